//! The EV5 and EV6/EV67 models end to end: a real pfmd per model, the legacy
//! C clients, and ioctls through the client library.

use crate::common;

use common::{Daemon, can_run, run, text, value};
use nix::errno::Errno;
use pfm_abi::{Iccsr, PMCTRS_ALL_CPUS};
use pfm_client::{CounterMask, Items, OpenMode, RawCounters};

const MHZ: u64 = 2000;

#[test]
fn conformance_program_reports_zero_failed_on_every_model() {
    if !can_run() {
        return;
    }
    for model in ["ev45", "ev5", "ev56", "pca56", "ev6", "ev67"] {
        let daemon = Daemon::start(&["--model", model]);
        let out = run(&mut daemon.client("errno_contract"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "--model {model}: {}\n{}",
            text(&out),
            daemon.log()
        );
        let last = stdout.lines().last().unwrap_or_default();
        assert!(
            last.ends_with(" 0 failed") && !last.starts_with("0 passed"),
            "--model {model}: {last}"
        );
        let device = daemon.open(OpenMode::All).unwrap();
        assert_eq!(
            device.implementation(),
            model.parse::<pfm_model::Implementation>().unwrap()
        );
    }
}

/// PAPI's Tru64 call sequence on an EV6: cycles against perf's own task-clock.
#[test]
fn papi_style_client_counts_cycles_consistent_with_task_clock() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&["--model", "ev6", "--cpu-mhz", &MHZ.to_string()]);
    let out = run(common::under_perf_stat(common::c_program("papi_ev6"))
        .args(["-ms", "300"])
        .env("PFM_DEVICE", &daemon.device));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cycles = value(&stdout, "cycles").expect("cycles=") as f64;
    let task_clock_ms = common::task_clock_ms(&out);
    let whole = task_clock_ms * 1e6 * MHZ as f64 / 1000.0;
    let workload = value(&stdout, "workload_cpu_ns").unwrap() as f64 * MHZ as f64 / 1000.0;
    // Counted between RESTART and RDISABLE: at least the workload, at most the
    // whole process; READCNTRS is (interrupts << 20) + raw, i.e. events.
    assert!(
        cycles >= workload * 0.99 && cycles <= whole * 1.01,
        "{cycles} vs workload {workload} / process {whole}\n{stdout}"
    );
}

#[test]
fn ev5_counts_three_counters_with_restart_and_readcntrs() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&["--model", "ev5", "--cpu-mhz", &MHZ.to_string()]);
    let out = run(common::under_perf_stat(common::c_program("ev5count"))
        .args(["-ms", "200"])
        .env("PFM_DEVICE", &daemon.device));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let whole = common::task_clock_ms(&out) * 1e6 * MHZ as f64 / 1000.0;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("counter0 "))
        .expect("counter0 line");
    let cycles: f64 = line
        .rsplit('=')
        .next()
        .unwrap()
        .parse()
        .expect("counter 0 counts cycles on every host");
    // At least the workload's CPU time (the scheduler's clock, which runs
    // behind cpu-clock under steal), at most perf's task-clock of the whole
    // process (cpu-clock's own clock).
    let workload = value(&stdout, "workload_cpu_ns").unwrap() as f64 * MHZ as f64 / 1000.0;
    assert!(
        cycles >= workload * 0.99 && cycles <= whole * 1.01,
        "{cycles} vs workload {workload} / process {whole}\n{stdout}"
    );
    // Counters the host cannot count say so; none prints a zero count.
    for l in stdout.lines().filter(|l| l.starts_with("counter")) {
        assert!(!l.ends_with("=0"), "a silent zero: {l}");
    }
}

/// PCNT6SETCNTRS preloads the raw counter: the first interrupt comes after
/// 2^20 - value events, as on the chip.
#[test]
fn setcntrs_preload_moves_the_first_interrupt() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&["--model", "ev6", "--cpu-mhz", &MHZ.to_string()]);
    let burn = || {
        // 100 us of this thread's CPU: 200 000 cycles at 2 GHz, a fifth of 2^20.
        let start = cpu_time_ns();
        while cpu_time_ns() - start < 100_000 {
            std::hint::black_box(0u64);
        }
    };
    let interrupts_after_burn = |preload: Option<u64>| -> (u64, u64) {
        let device = daemon.open(OpenMode::All).unwrap();
        device.set_items(Items::COUNTERS).unwrap();
        device.log_select().unwrap();
        device.ev6_mux(0x00).unwrap(); // PF6_MUX0_CYCLES
        device.disable_counters(CounterMask::COUNTER_1).unwrap();
        device.clear_counts().unwrap();
        device
            .enable_write_counters(RawCounters {
                select: CounterMask::COUNTER_0,
                cpu: PMCTRS_ALL_CPUS,
                values: [preload.unwrap_or(0), 0, 0],
            })
            .unwrap();
        burn();
        device.disable().unwrap();
        let interrupts = device.interrupt_counts().unwrap()[0].counters[0];
        let full = device.full_counts().unwrap()[0].counters[0];
        (interrupts, full)
    };
    let (plain, plain_full) = interrupts_after_burn(None);
    assert_eq!(plain, 0, "200k cycles are short of 2^20");
    assert!(
        plain_full >= 200_000,
        "READCNTRS holds the raw count: {plain_full}"
    );
    let (preloaded, full) = interrupts_after_burn(Some((1 << 20) - 1000));
    assert_eq!(
        preloaded, 1,
        "a preload of 2^20 - 1000 interrupts after 1000 cycles"
    );
    assert!(full >= 1 << 20, "(1 << 20) + raw: {full}");
}

#[test]
fn family_ioctls_of_another_model_are_einval() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&["--model", "ev6"]);
    let device = daemon.open(OpenMode::All).unwrap();
    // The client sends these as they are: the daemon refuses them.
    assert_eq!(
        device.set_mux(Iccsr(0)).unwrap_err().errno(),
        Some(Errno::EINVAL)
    );
    assert_eq!(device.ev5_mux(0).unwrap_err().errno(), Some(Errno::EINVAL));
    assert_eq!(device.info().unwrap().pi_family, 2);
}

fn cpu_time_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// EV6 raw counts read in a loop while a forked child burns, after the
/// parent cleared its own PME bit (its host events then come off the
/// child's through a second set, read apart): the counts never go back, as
/// a hardware counter's never do (PAPI's EV6 substrate subtracts readings).
const CLEARED_PARENT_READS: &str = r#"
#include <sys/pfcntr.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
	long mux = PF6_MUX0_CYCLES | PF6_MUX1_CYCLES;
	union pmctrs_ev6 sel;
	struct pfcntrs_ev6 c[64], *cp = c;
	unsigned long last = 0;
	long reads = 0, back = 0;
	int fd = open(getenv("PFM_DEVICE"), O_RDONLY | PCNTOPENALL), status;
	pid_t child;

	memset(&sel, 0, sizeof sel);
	sel.pmctrs_ev6_cpu = PMCTRS_ALL_CPUS;
	sel.pmctrs_ev6_select = PF6_SEL_COUNTER_0 | PF6_SEL_COUNTER_1;
	if (fd < 0 || ioctl(fd, PCNT6MUX, &mux) || ioctl(fd, PCNTLOGSELECT) ||
	    ioctl(fd, PCNT6RESTART, &sel.pmctrs_ev6_long)) {
		perror("setup");
		return 1;
	}
	child = fork();
	if (child == 0) {
		struct timespec a, b;
		volatile unsigned long x = 1;

		clock_gettime(CLOCK_MONOTONIC, &a);
		do {
			for (int i = 0; i < 1000; i++)
				x = x * 3 + 1;
			clock_gettime(CLOCK_MONOTONIC, &b);
		} while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < 600);
		_exit(0);
	}
	if (ioctl(fd, PCNTCLEARPCBPME)) {
		perror("PCNTCLEARPCBPME");
		return 1;
	}
	while (waitpid(child, &status, WNOHANG) == 0) {
		if (ioctl(fd, PCNT6READCNTRS, &cp)) {
			perror("PCNT6READCNTRS");
			return 1;
		}
		reads++;
		if (c[0].pf_cntr0 < last)
			back++;
		last = c[0].pf_cntr0;
	}
	printf("reads=%ld\nback=%ld\nlast=%lu\n", reads, back, last);
	return 0;
}
"#;

#[test]
fn counts_never_go_back_while_a_cleared_parents_child_runs() {
    if !can_run() {
        return;
    }
    let program = common::client_source("cleared_parent_reads", CLEARED_PARENT_READS, &[]);
    let daemon = Daemon::start(&["--model", "ev6", "--cpu-mhz", &MHZ.to_string()]);
    let out = run(std::process::Command::new(program).env("PFM_DEVICE", &daemon.device));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(value(&stdout, "reads").unwrap() > 100, "{stdout}");
    assert!(
        value(&stdout, "last").unwrap() > 0,
        "the child counted: {stdout}"
    );
    assert_eq!(value(&stdout, "back"), Some(0), "{stdout}");
}
