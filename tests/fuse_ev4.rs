//! The EV4 device over FUSE, end to end: a real pfmd, the real kernel's FUSE
//! and perf_event, and gcc-built legacy C clients.

use crate::common;

use common::{Daemon, can_run, counts_line, run, text, value};
use nix::errno::Errno;
use nix::sys::signal::Signal;
use pfm_abi::{self as abi, Iccsr};
use pfm_client::{Device, Items, OpenMode};
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

/// Nominal clock the tests pin, so expected interrupt counts are exact arithmetic.
const MHZ: u64 = 2000;

#[test]
fn conformance_program_reports_zero_failed() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&[]);
    let out = run(&mut daemon.client("errno_contract"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.ends_with(" 0 failed") && !last.starts_with("0 passed"),
        "{}",
        text(&out)
    );
    // Rows that must have run, not been skipped: sampling and profiling.
    for row in [
        "sampling_probe",
        "getrsize_no_range_is_0",
        "getrsize_stride_4_is_range_over_4",
        "getrsize_stride_0_one_bucket",
        "setuaddr_keeps_stride_0",
        "setuaddr_keeps_stride_8",
        "getrsize_each_times_ncpus",
        "seturange_stride_3",
        "seturange_1tib_enomem",
        "caller_with_user_profiling",
        "read_again_from_byte_0",
        "read_profile_nonzero",
        "getiplhis_each_array_one_short",
        "getiplhis_each_full_array_ok",
        "ipl_ticks_then_clearcnt_zeroes",
        "setkrange_stride_3",
        "caller_ranges_4_ok",
        "caller_range_5th_enospc",
        "caller_range_outside_text_efault",
        "caller_range_unaligned_efault",
        "caller_range_empty_efault",
        "caller_without_kprofiling",
        "setuaddr_without_profiling",
    ] {
        assert!(
            stdout.lines().any(|l| l == format!("PASS {row}")),
            "{row} did not pass as root:\n{stdout}"
        );
    }
    // The same program as an unprivileged user reaches the EACCES rows.
    let out =
        run(common::as_nobody(common::c_program("errno_contract"))
            .env("PFM_DEVICE", &daemon.device));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "as nobody: {}\n{}",
        text(&out),
        daemon.log()
    );
    assert!(
        stdout
            .lines()
            .last()
            .unwrap_or_default()
            .ends_with(" 0 failed"),
        "{}",
        text(&out)
    );
    if common::paranoid() > 0 {
        for row in [
            "eacces_logall",
            "eacces_renable_under_logall",
            "eacces_kernel_profiling",
        ] {
            assert!(
                stdout.lines().any(|l| l == format!("PASS {row}")),
                "{row}:\n{stdout}"
            );
        }
    }
    assert!(
        stdout.lines().any(|l| l == "PASS read_again_from_byte_0"),
        "{stdout}"
    );
}

/// The README's legacy client, as printed there, counts its own work for
/// root and for an ordinary user: the interrupts of 4096 cycles against
/// perf's task-clock of the same process (it once counted the whole
/// machine for root and a silent 0 for everybody else).
#[test]
fn the_readmes_legacy_client_counts_its_own_work_for_every_user() {
    if !can_run() {
        return;
    }
    let readme = include_str!("../README.md");
    let block = readme
        .split("## A legacy client in")
        .nth(1)
        .and_then(|rest| rest.split("```c\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("the README's C block");
    let daemon = Daemon::start(&["--cpu-mhz", &MHZ.to_string()]);
    let (includes, body): (Vec<&str>, Vec<&str>) =
        block.lines().partition(|l| l.starts_with("#include"));
    let source = format!(
        "#include <fcntl.h>\n#include <stdio.h>\n#include <sys/ioctl.h>\n#include <time.h>\n\
         {}\n\
         /* 300 ms of this process's CPU. */\n\
         static void work(void) {{\n\
         \tstruct timespec a, b; volatile unsigned long x = 0;\n\
         \tclock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);\n\
         \tdo {{ for (int i = 0; i < 100000; i++) x += i; \n\
         \t\tclock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b); }}\n\
         \twhile ((b.tv_sec - a.tv_sec) * 1000000000L + b.tv_nsec - a.tv_nsec < 300000000L);\n\
         }}\n\
         int main(void) {{\n{}\nreturn 0;\n}}\n",
        includes.join("\n"),
        body.join("\n").replace(
            "\"/dev/pfcntr\"",
            &format!("{:?}", daemon.device.display().to_string())
        )
    );
    let program = common::client_source("readme_client", &source, &[]);
    // The reference is perf's task-clock of the same process: the count's
    // own clock (CLOCK_PROCESS_CPUTIME_ID leaves out the time a hypervisor
    // stole, which perf's clocks and so pfmd's count keep).
    for as_nobody in [false, true] {
        let mut cmd = if as_nobody {
            let mut cmd = common::under_perf_stat("setpriv");
            cmd.args(common::AS_NOBODY).arg(&program);
            cmd
        } else {
            common::under_perf_stat(&program)
        };
        let out = run(&mut cmd);
        assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
        let stdout = String::from_utf8_lossy(&out.stdout);
        let interrupts: f64 = stdout
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count: {}", text(&out)));
        let expected = common::task_clock_ms(&out) * 1e6 * MHZ as f64 / 1000.0 / 4096.0;
        // task-clock also covers exec and the set-up before PCNTRENABLE.
        assert!(
            interrupts >= 0.8 * expected && interrupts <= 1.02 * expected,
            "nobody={as_nobody}: {interrupts} interrupts for {expected:.0} by task-clock\n{}",
            text(&out)
        );
    }
}

/// A member of pfmd's `--allow-group` group is privileged, which the
/// program cannot see for itself: told so with `-allowed`, it checks the
/// privileged answers (system-wide counting, kernel profiling, the EV5's
/// 256-event period) and reports 0 failed; untold, it expects the EACCES
/// and EPERM of an ordinary user and sees the device grant them.
#[test]
fn conformance_program_knows_an_allowed_group_member_when_told() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&["--model", "ev5", "--allow-group", "daemon"]);
    let member = |extra: &[&str]| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--groups=daemon", "--"])
            .arg(common::c_program("errno_contract"))
            .args(extra)
            .env("PFM_DEVICE", &daemon.device);
        run(&mut cmd)
    };
    let out = member(&["-allowed"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    assert!(
        stdout.contains("PASS pcnt5freq_256_needs_privilege"),
        "{stdout}"
    );
    assert!(
        stdout.contains("SKIP eacces_logall: -allowed: pfmd's --allow-group group"),
        "{stdout}"
    );
    assert!(stdout.contains("PASS allowed_logall"), "{stdout}");
    assert!(
        stdout.contains("PASS allowed_renable_under_logall"),
        "{stdout}"
    );
    let out = member(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("FAIL pcnt5freq_256_needs_privilege: expected EPERM got 0"),
        "{stdout}"
    );
    let out = member(&["-bogus"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // -allowed is checked, not believed: a user outside the group fails
    // (where perf_event_paranoid does not allow everyone system-wide).
    if common::paranoid() > 0 {
        let mut outsider = common::as_nobody(common::c_program("errno_contract"));
        let out = run(outsider.arg("-allowed").env("PFM_DEVICE", &daemon.device));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{stdout}");
        assert!(
            stdout.contains("FAIL allowed_logall: expected 0 got EACCES")
                && stdout.contains("is pfmd started with --allow-group"),
            "{stdout}"
        );
    }
}

/// PF_CYCLES over a CPU-bound loop, counted for the client's own thread
/// (LOGSELECT), against perf's own task-clock of the same process.
#[test]
fn pf_cycles_agree_with_perf_task_clock() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&["--cpu-mhz", &MHZ.to_string()]);
    let out = run(common::under_perf_stat(common::c_program("ev4count"))
        .args(["-select", "-ms", "400"])
        .env("PFM_DEVICE", &daemon.device));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let task_clock_ms = common::task_clock_ms(&out);
    let got = counts_line(&stdout, "all").expect("a cpu=all line")["pf_cntr0"];
    // cycles = ns x MHz / 1000; one interrupt every 4096 (pc0 set).
    let expected = task_clock_ms * 1e6 * MHZ as f64 / 1000.0 / 4096.0;
    // perf's task-clock also covers exec and the ioctls before PCNTRENABLE
    // and after PCNTRDISABLE: allow 2% for that, and ±1 for the floor.
    let tolerance = 1.0 + 0.02 * expected;
    assert!(
        (got as f64 - expected).abs() <= tolerance,
        "PF_CYCLES {got} interrupts vs {expected:.1} from perf task-clock {task_clock_ms} ms\n{stdout}"
    );
    assert!(
        got as f64 <= expected + 1.0,
        "the device counted more than the whole process ran"
    );
    let workload_ns = value(&stdout, "workload_cpu_ns").expect("workload_cpu_ns");
    assert!(workload_ns >= 400_000_000, "{stdout}");
}

#[test]
fn second_process_gets_ebusy_until_the_holder_closes() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&[]);
    let held = daemon.open(OpenMode::All).unwrap();
    let out = run(daemon.client("ev4count").args(["-ms", "10"]));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("EBUSY"),
        "{}",
        text(&out)
    );
    drop(held);
    let out = run(daemon.client("ev4count").args(["-ms", "10"]));
    assert!(
        out.status.success(),
        "after close: {}\n{}",
        text(&out),
        daemon.log()
    );
}

#[test]
fn one_mode_needs_a_thread_bound_to_one_cpu() {
    if !can_run() {
        return;
    }
    if common::online_cpus() < 2 {
        xtask::ci::skip_or_fail("one_mode_needs_a_thread_bound_to_one_cpu", "one CPU only");
        return;
    }
    let daemon = Daemon::start(&["--cpu-mhz", &MHZ.to_string()]);
    let out = run(Command::new("taskset")
        .args(["-c", "1"])
        .arg(common::c_program("ev4count"))
        .args(["-one", "-ms", "200"])
        .env("PFM_DEVICE", &daemon.device));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("pf_cntr0="))
        .expect("a counts line");
    let c0 = value(line, "pf_cntr0").unwrap();
    // LOGALL on CPU 1 for at least the 200 ms busy loop: ≥ 200ms x 2 GHz / 4096.
    assert!(c0 >= 200 * 2_000_000 / 4096 * 9 / 10, "{stdout}");
    // A thread allowed on two CPUs cannot open ONE.
    let device = daemon.device.clone();
    let refused = std::thread::spawn(move || {
        let mut both = nix::sched::CpuSet::new();
        both.set(0).unwrap();
        both.set(1).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &both).unwrap();
        Device::open(device, OpenMode::One)
    })
    .join()
    .unwrap();
    assert_eq!(refused.unwrap_err().errno(), Some(Errno::EINVAL));
}

/// A ONE open's thread that is no longer bound to its CPU still reads that
/// CPU's counts, and the daemon logs it once (the contract: "if it is later
/// found on another CPU ... we log it").
#[test]
fn a_one_open_whose_thread_leaves_its_cpu_is_logged() {
    if !can_run() {
        return;
    }
    if common::online_cpus() < 2 {
        xtask::ci::skip_or_fail(
            "a_one_open_whose_thread_leaves_its_cpu_is_logged",
            "one CPU only",
        );
        return;
    }
    const LOGGED: &str = "no longer bound to CPU 1";
    let daemon = Daemon::start(&[]);
    let device = daemon.device.clone();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let (go_on_tx, go_on_rx) = std::sync::mpsc::channel::<()>();
    let client = std::thread::spawn(move || {
        let set = |cpus: &[usize]| {
            let mut set = nix::sched::CpuSet::new();
            for cpu in cpus {
                set.set(*cpu).unwrap();
            }
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
        };
        set(&[1]);
        let one = Device::open(device, OpenMode::One).unwrap();
        bound_tx.send(one.ev4_counts().map(|c| c.len())).unwrap();
        go_on_rx.recv().unwrap();
        set(&[0, 1]);
        (0..2)
            .map(|_| one.ev4_counts().map(|c| c.len()))
            .collect::<Vec<_>>()
    });
    assert_eq!(bound_rx.recv().unwrap().unwrap(), 1);
    assert!(!daemon.log().contains(LOGGED), "{}", daemon.log());
    go_on_tx.send(()).unwrap();
    for counts in client.join().unwrap() {
        assert_eq!(counts.unwrap(), 1, "the counts of CPU 1 still");
    }
    let log = daemon.log();
    assert_eq!(log.matches(LOGGED).count(), 1, "logged once: {log}");
}

/// PCNTGETCNT in EACH mode through a pointer a safe client cannot make: an
/// array ending at a PROT_NONE guard page. Prints `ncpus=N`, `fits=R` and one
/// `cpu=I pf_cntr0=N` line per CPU for an array of exactly N elements there,
/// then `short=R` for one element fewer and `null=R` for a null array (R:
/// `ok` or the errno's name).
const GUARD_PAGE: &str = r#"
#include <sys/mman.h>
#include <sys/pfcntr.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *getcnt(int fd, struct pfcntrs *array) {
	if (ioctl(fd, PCNTGETCNT, &array) == 0)
		return "ok";
	return errno == EFAULT ? "EFAULT" : strerror(errno);
}

int main(void) {
	const char *dev = getenv("PFM_DEVICE");
	if (dev == 0 || *dev == '\0')
		dev = "/dev/pfcntr";
	int fd = open(dev, O_RDONLY | PCNTOPENEACH);
	if (fd < 0) { perror(dev); return 1; }
	struct pfm_info info;
	unsigned long items = PFM_COUNTERS;
	struct iccsr mux;
	memset(&mux, 0, sizeof mux);
	mux.iccsr_mux0 = PF_CYCLES;
	mux.iccsr_pc0 = PF_C0_INT_EVERY_4096;
	mux.iccsr_disable = 2;
	if (ioctl(fd, PCNTGETINFO, &info) < 0 || ioctl(fd, PCNTSETITEMS, &items) < 0 ||
	    ioctl(fd, PCNTSETMUX, &mux) < 0 || ioctl(fd, PCNTRENABLE, 0) < 0) {
		perror("setting up");
		return 1;
	}
	usleep(50000);
	if (ioctl(fd, PCNTRDISABLE, 0) < 0) { perror("PCNTRDISABLE"); return 1; }

	long page = sysconf(_SC_PAGESIZE);
	char *base = mmap(0, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED || mprotect(base + page, page, PROT_NONE) < 0) {
		perror("guard page");
		return 1;
	}
	char *guard = base + page;
	unsigned long n = info.pi_ncpus;
	struct pfcntrs *fits = (struct pfcntrs *)(guard - n * sizeof *fits);
	printf("ncpus=%lu\n", n);
	printf("fits=%s\n", getcnt(fd, fits));
	for (unsigned long i = 0; i < n; i++)
		printf("cpu=%lu pf_cntr0=%lu\n", i, fits[i].pf_cntr0);
	printf("short=%s\n", getcnt(fd, (struct pfcntrs *)(guard - (n - 1) * sizeof *fits)));
	printf("null=%s\n", getcnt(fd, 0));
	return 0;
}
"#;

#[test]
fn each_mode_fills_one_element_per_cpu_and_faults_at_a_guard_page() {
    if !can_run() {
        return;
    }
    let program = common::client_source("guard_page", GUARD_PAGE, &[]);
    // Each CPU read in turn, and by a reader thread per CPU.
    for extra in [&["--parallel-reads", "0"][..], &["--parallel-reads", "2"]] {
        each_mode_at_a_guard_page(&program, extra);
    }
}

fn each_mode_at_a_guard_page(program: &std::path::Path, extra: &[&str]) {
    let daemon = Daemon::start(extra);
    let out = run(Command::new(program).env("PFM_DEVICE", &daemon.device));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ncpus = value(&stdout, "ncpus").expect("ncpus=") as usize;
    assert_eq!(ncpus, common::configured_cpus());
    let line = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key}= in\n{stdout}"))
    };
    // Exactly ncpus elements end at the guard page: fine.
    assert_eq!(line("fits"), "ok", "{stdout}");
    for cpu in 0..ncpus {
        let counts = counts_line(&stdout, &cpu.to_string()).expect("a line per CPU");
        assert!(
            counts["pf_cntr0"] > 0,
            "every CPU counted wall time: {stdout}"
        );
    }
    // One element short: the last one would land on the guard page.
    assert_eq!(line("short"), "EFAULT", "{stdout}");
    assert_eq!(line("null"), "EFAULT", "{stdout}");
}

#[test]
fn client_sigkill_frees_the_device_and_the_daemon_lives_on() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&[]);
    let mut client = daemon
        .client("ev4count")
        .args(["-ms", "20000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Watched through /proc, not by opening the device: an open of ours
    // would race the client's and could make it fail with EBUSY.
    let holds_the_device = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == daemon.device))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !holds_the_device(client.id()) {
        if let Some(status) = client.try_wait().unwrap() {
            panic!(
                "client exited {status}: {}",
                text(&client.wait_with_output().unwrap())
            );
        }
        assert!(
            Instant::now() < deadline,
            "the client never opened the device"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    client.kill().unwrap();
    client.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match daemon.open(OpenMode::All) {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline,
                "device still busy after SIGKILL: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = run(daemon.client("ev4count").args(["-ms", "10"]));
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn restart_after_daemon_sigkill_replaces_the_dead_mount() {
    if !can_run() {
        return;
    }
    let mut daemon = Daemon::start(&[]);
    daemon.signal(Signal::SIGKILL);
    daemon.wait();
    let err = daemon.open(OpenMode::All).unwrap_err();
    // ENOTCONN; ECONNABORTED (ECANCELED over io_uring) while the kernel is
    // still ending the connection: the store helper holds it a moment
    // longer (docs/device.md §1).
    assert!(
        matches!(
            err.errno(),
            Some(Errno::ENOTCONN | Errno::ECONNABORTED | Errno::ECANCELED)
        ),
        "a killed daemon leaves a dead mount: {err}"
    );
    let dir = std::mem::replace(&mut daemon.dir, tempfile::tempdir().unwrap());
    let mountpoint = daemon.mountpoint.clone();
    std::mem::forget(daemon);
    let restarted = Daemon::start_at(dir, mountpoint, &[]);
    assert!(
        restarted.log().contains("stale FUSE mount"),
        "{}",
        restarted.log()
    );
    let out = run(restarted.client("ev4count").args(["-ms", "10"]));
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn sigterm_unmounts_removes_the_link_and_exits_zero() {
    if !can_run() {
        return;
    }
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("pfcntr");
    let mut daemon = Daemon::start(&["--dev-link", link.to_str().unwrap()]);
    assert_eq!(std::fs::read_link(&link).unwrap(), daemon.device);
    let out = run(Command::new(common::c_program("ev4count"))
        .args(["-ms", "10"])
        .env("PFM_DEVICE", &link));
    assert!(out.status.success(), "through the link: {}", text(&out));
    assert!(daemon.stop().success(), "{}", daemon.log());
    assert!(std::fs::symlink_metadata(&link).is_err(), "link removed");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts.contains(daemon.mountpoint.to_str().unwrap()),
        "unmounted"
    );
}

#[test]
fn unprivileged_callers_get_eacces_for_logall_and_count_their_own_threads() {
    if !can_run() {
        return;
    }
    let paranoid: i32 = common::paranoid();
    let daemon = Daemon::start(&["--cpu-mhz", &MHZ.to_string()]);
    let as_nobody = |args: &[&str]| {
        run(common::as_nobody(common::c_program("ev4count"))
            .args(args)
            .env("PFM_DEVICE", &daemon.device))
    };
    let out = as_nobody(&["-ms", "10"]);
    if paranoid > 0 {
        assert!(!out.status.success(), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("EACCES") && stderr.contains("-select counts this command only"),
            "{}",
            text(&out)
        );
    }
    let out = as_nobody(&["-select", "-ms", "200"]);
    if paranoid <= 2 {
        assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
        let c0 = counts_line(&String::from_utf8_lossy(&out.stdout), "all").unwrap()["pf_cntr0"];
        assert!(c0 >= 200 * 2_000_000 / 4096 * 9 / 10, "{}", text(&out));
    }
}

/// PCNTLOGSELECT's PME bit is inherited by processes the caller starts later.
#[test]
fn logselect_counts_children_started_afterwards() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&["--cpu-mhz", &MHZ.to_string()]);
    let burn = "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done";
    let out = run(common::under_perf_stat(common::c_program("ev4count"))
        .args(["-select", "--", "sh", "-c", burn])
        .env("PFM_DEVICE", &daemon.device));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let task_clock_ms = common::task_clock_ms(&out);
    let got = counts_line(&String::from_utf8_lossy(&out.stdout), "all").unwrap()["pf_cntr0"] as f64;
    let whole = task_clock_ms * 1e6 * MHZ as f64 / 1000.0 / 4096.0;
    // The child's loop is nearly all of the process tree's CPU time.
    assert!(
        got >= 0.8 * whole && got <= whole + 1.0,
        "{got} vs {whole:.1}: {}",
        text(&out)
    );
}

/// `burn(ns)` burns `ns` of the calling thread's CPU time and returns what
/// it burnt; `print_cntr0(fd)` prints the open's `pf_cntr0`.
const BURN: &str = r#"
#include <sys/pfcntr.h>
#include <sys/ioctl.h>

static long long burn(long long ns)
{
	long long t0 = task_clock_ns(), t;
	while ((t = task_clock_ns()) - t0 < ns)
		;
	return t - t0;
}

static int print_cntr0(int fd)
{
	struct pfcntrs c = { 0 }, *cp = &c;

	if (ioctl(fd, PCNTGETCNT, &cp)) {
		perror("PCNTGETCNT");
		return 1;
	}
	printf("pf_cntr0=%lu\n", c.pf_cntr0);
	return 0;
}
"#;

/// Builds `source` with [`BURN`] and runs it against a daemon of `MHZ`:
/// the daemon (for its log) and the program's standard output.
fn run_burning_program(name: &str, source: &str) -> (Daemon, String) {
    let source = common::with_task_clock(&format!("{BURN}{source}"));
    let program = common::client_source(name, &source, &["-pthread"]);
    let daemon = Daemon::start(&["--cpu-mhz", &MHZ.to_string()]);
    let out = run(Command::new(program).env("PFM_DEVICE", &daemon.device));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (daemon, stdout)
}

/// PF_CYCLES interrupts (every 4096) that `ns` of CPU time makes at `MHZ`.
fn interrupts(ns: u64) -> f64 {
    ns as f64 * MHZ as f64 / 1000.0 / 4096.0
}

/// A parent that set the PME bit, forked its workload and cleared its own bit:
/// the child keeps the bit it inherited (as on Tru64) and is counted; the
/// parent's work after the clear is not.
const CLEAR_AFTER_FORK: &str = r#"
#include <sys/pfcntr.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	struct iccsr mux = { 0 };
	int go[2], fd = open(getenv("PFM_DEVICE"), O_RDONLY | PCNTOPENALL);
	char byte = 0;
	pid_t child;

	mux.iccsr_mux0 = PF_CYCLES;
	mux.iccsr_pc0 = 1;		/* every 4096 */
	mux.iccsr_disable = 2;		/* counter 1 off */
	if (fd < 0 || ioctl(fd, PCNTSETMUX, &mux) || ioctl(fd, PCNTLOGSELECT) ||
	    ioctl(fd, PCNTCLEARCNT) || ioctl(fd, PCNTRENABLE) || pipe(go)) {
		perror("setup");
		return 1;
	}
	child = fork();
	if (child == 0) {
		if (read(go[0], &byte, 1) != 1)
			_exit(2);
		printf("child_ns=%lld\n", burn(200000000));
		fflush(stdout);
		_exit(0);
	}
	if (ioctl(fd, PCNTCLEARPCBPME)) {
		perror("PCNTCLEARPCBPME");
		return 1;
	}
	if (write(go[1], &byte, 1) != 1)
		return 1;
	printf("parent_ns=%lld\n", burn(200000000));
	waitpid(child, 0, 0);
	return print_cntr0(fd);
}
"#;

#[test]
fn a_parent_clearing_its_pme_bit_leaves_its_child_counted() {
    if !can_run() {
        return;
    }
    let (daemon, stdout) = run_burning_program("clear_after_fork", CLEAR_AFTER_FORK);
    let got = value(&stdout, "pf_cntr0").unwrap() as f64;
    let child = interrupts(value(&stdout, "child_ns").unwrap());
    let parent = interrupts(value(&stdout, "parent_ns").unwrap());
    // The child's 200 ms, the parent's 200 ms after its clear left out.
    assert!(
        got >= 0.8 * child && got <= 1.1 * child + 0.2 * parent,
        "counted {got} interrupts: child {child:.0}, parent {parent:.0}\n{stdout}\n{}",
        daemon.log()
    );
}

/// A PME child with a worker thread, for programs after [`BURN`]:
/// `open_cycles()` opens the device counting PF_CYCLES every 4096, cleared;
/// `worker_child(fd)` forks a child that selects, enables and starts a
/// thread, and returns once that thread is ready; `worker_go(child)` lets the
/// thread burn 200 ms (it prints `worker_ns`) and reaps the child.
const WORKER_CHILD: &str = r#"
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static int ready[2], go[2];

static void *worker(void *arg)
{
	char byte = 0;

	(void)arg;
	if (write(ready[1], &byte, 1) != 1 || read(go[0], &byte, 1) != 1)
		_exit(2);
	printf("worker_ns=%lld\n", burn(200000000));
	fflush(stdout);
	return 0;
}

static int open_cycles(void)
{
	struct iccsr mux = { 0 };
	int fd = open(getenv("PFM_DEVICE"), O_RDONLY | PCNTOPENALL);

	mux.iccsr_mux0 = PF_CYCLES;
	mux.iccsr_pc0 = 1;		/* every 4096 */
	mux.iccsr_disable = 2;		/* counter 1 off */
	if (fd < 0 || ioctl(fd, PCNTSETMUX, &mux) || ioctl(fd, PCNTCLEARCNT) ||
	    pipe(ready) || pipe(go)) {
		perror("setup");
		exit(1);
	}
	return fd;
}

static pid_t worker_child(int fd)
{
	char byte = 0;
	pid_t child = fork();

	if (child == 0) {
		pthread_t t;

		if (ioctl(fd, PCNTLOGSELECT) || ioctl(fd, PCNTRENABLE)) {
			perror("child");
			_exit(1);
		}
		pthread_create(&t, 0, worker, 0);
		pthread_join(t, 0);
		_exit(0);
	}
	if (child < 0 || read(ready[0], &byte, 1) != 1)
		exit(1);
	return child;
}

static int worker_go(pid_t child)
{
	char byte = 0;
	int status;

	return write(go[1], &byte, 1) != 1 || waitpid(child, &status, 0) < 0 || status != 0;
}
"#;

/// Two children select on the inherited descriptor in turn (as a tool
/// running two workloads does): the second's `PCNTLOGSELECT` leaves the
/// thread the first started before it counted.
const SECOND_SELECT: &str = r#"
int main(void)
{
	int fd = open_cycles(), status;
	pid_t first = worker_child(fd), second = fork();

	if (second == 0)
		_exit(ioctl(fd, PCNTLOGSELECT) ? 1 : 0);
	if (waitpid(second, &status, 0) < 0 || status != 0) {
		fprintf(stderr, "second child's PCNTLOGSELECT failed\n");
		return 1;
	}
	if (worker_go(first))
		return 1;
	return print_cntr0(fd);
}
"#;

#[test]
fn a_second_select_keeps_the_first_childs_threads_counted() {
    if !can_run() {
        return;
    }
    // The worker's 200 ms, all after the second child's select.
    assert_worker_counted("second_select", SECOND_SELECT);
}

/// Runs `program` after [`WORKER_CHILD`]: the count is the worker's burn.
fn assert_worker_counted(name: &str, program: &str) {
    let (daemon, stdout) = run_burning_program(name, &format!("{WORKER_CHILD}{program}"));
    let got = value(&stdout, "pf_cntr0").unwrap() as f64;
    let worker = interrupts(value(&stdout, "worker_ns").unwrap());
    assert!(
        got >= 0.8 * worker && got <= 1.1 * worker + 50.0,
        "counted {got} interrupts: worker {worker:.0}\n{stdout}\n{}",
        daemon.log()
    );
}

/// Settings changed away and back (items with and without PFM_IPL): the
/// thread the PME child started before the change is counted again after
/// it, as the open takes back the host events it had.
const CHANGED_BACK: &str = r#"
static int items(int fd, long items)
{
	return ioctl(fd, PCNTSETITEMS, &items);
}

int main(void)
{
	int fd = open_cycles();
	pid_t child = worker_child(fd);

	if (items(fd, PFM_COUNTERS | PFM_IPL) || items(fd, PFM_COUNTERS)) {
		perror("PCNTSETITEMS");
		return 1;
	}
	if (worker_go(child))
		return 1;
	return print_cntr0(fd);
}
"#;

#[test]
fn settings_changed_back_count_the_threads_they_counted() {
    if !can_run() {
        return;
    }
    assert_worker_counted("changed_back", CHANGED_BACK);
}

#[test]
fn unavailable_events_are_eopnotsupp_and_never_count_zero() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&[]);
    let device = daemon.open(OpenMode::All).unwrap();
    device.set_items(Items::COUNTERS).unwrap();
    // PF_PALMODE has no host event anywhere.
    assert_eq!(
        device
            .set_mux(Iccsr::new(0xb, 0, 0, 0, 2))
            .unwrap_err()
            .errno(),
        Some(Errno::EOPNOTSUPP)
    );
    assert!(
        daemon.log().contains("PF_PALMODE"),
        "the log names the event"
    );
    let i = device.info().unwrap();
    assert_eq!(i.pi_family, 0);
    assert_eq!(i.pi_version, abi::PFM_INFO_VERSION);
}

/// At the default log level an administrator still finds each refusal:
/// an unavailable event is named with why at once, and every user's
/// refusals are summed up in a line 10 s after the first (also when no
/// refusal follows), and at stop.
#[test]
fn refusals_reach_the_default_log_without_another_refusal() {
    if !can_run() {
        return;
    }
    let mut daemon = Daemon::start_env(&[], &[("RUST_LOG", std::ffi::OsStr::new("info"))]);
    let device = daemon.open(OpenMode::All).unwrap();
    device.set_items(Items::COUNTERS).unwrap();
    let palmode = Iccsr::new(0xb, 0, 0, 0, 2);
    let refuse = || {
        let e = device.set_mux(palmode).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP));
    };
    refuse();
    let named = "cannot be counted on this host (EOPNOTSUPP): PF_PALMODE";
    assert!(daemon.log().contains(named), "{}", daemon.log());
    const SUMMARY: &str = "1 request refused in the last";
    common::wait_until(
        "a summary after the refusal",
        Duration::from_secs(60),
        || daemon.log().contains(SUMMARY),
        || daemon.log(),
    );
    // A second refusal of the same event: not named again, summed at stop.
    refuse();
    drop(device);
    daemon.stop();
    let log = daemon.log();
    assert_eq!(log.matches(named).count(), 1, "{log}");
    assert_eq!(log.matches(SUMMARY).count(), 2, "{log}");
}

/// `read(2)` and ioctls are the only data paths: a write is refused with the
/// device's errno, as by a character driver without a write method.
#[test]
fn writes_are_refused_with_einval() {
    use std::io::Write;
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&[]);
    let mut file = OpenOptions::new()
        .write(true)
        .custom_flags(abi::PCNTOPENALL)
        .open(&daemon.device)
        .expect("root may open for writing");
    assert_eq!(
        file.write(b"x").unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
}

/// Every counter of a CPU-wide open counts in every measurement, not only
/// the first: here counter 1 bound to task-clock by an event map, a member of
/// cpu-clock's group. Switching the group with PERF_IOC_FLAG_GROUP, as pfmd
/// did, left the kernel's software members counting nothing after their
/// first disable and enable, and the second and third measurements here read
/// exactly 0; only the leader is switched now.
#[test]
fn a_group_member_counts_after_the_first_measurement() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("task-clock.map");
    std::fs::write(&map, "PF_DCACHE type=1 config=1\n").unwrap();
    let daemon = Daemon::start(&["--event-map", map.to_str().unwrap()]);
    let device = daemon.open(OpenMode::All).unwrap();
    device.set_items(Items::COUNTERS).unwrap();
    let mux = Iccsr::new(0xa, 0x0, 1, 1, 0);
    let measure = || {
        device.set_mux(mux).unwrap();
        device.clear_counts().unwrap();
        device.enable().unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(100) {
            std::hint::black_box(0u64);
        }
        device.disable().unwrap();
        device.disable().unwrap();
        device.ev4_counts().unwrap()[0].pf_cntr1
    };
    let first = measure();
    let second = measure();
    let third = measure();
    assert!(first > 0, "task-clock counts at all: {first}");
    assert!(
        second > 0 && third > 0,
        "counts {first}, {second}, {third}: a repeated selection stopped the counter\n{}",
        daemon.log()
    );
}
