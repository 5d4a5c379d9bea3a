//! `pfmprof` shows the whole program (issue 18): shares of every sample
//! against `perf record` on the same program in the same window, shared
//! libraries and the kernel profiled, a stripped binary symbolized from its
//! separate debug file, `-f` through a shell, `--annotate`. A real pfmd
//! over FUSE, real gcc-built programs.

use crate::common;

use common::{Daemon, can_run, run, text};
use std::path::{Path, PathBuf};
use std::process::Command;

const MHZ: u64 = 2000;

/// Most of its time in libc's qsort, calling its own comparison function:
/// `libcheavy ROUNDS` sorts the same shuffled array ROUNDS times.
const LIBC_HEAVY: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int *base, *work;
#define N 200000
__attribute__((noinline)) int by_value(const void *a, const void *b) {
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}
int main(int argc, char **argv) {
	if (argc != 2) { fprintf(stderr, "usage: libcheavy ROUNDS\n"); return 2; }
	long rounds = atol(argv[1]);
	base = malloc(N * sizeof *base);
	work = malloc(N * sizeof *work);
	unsigned long x = 88172645463325252UL;
	for (int i = 0; i < N; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; base[i] = (int)x; }
	long sum = 0;
	for (long r = 0; r < rounds; r++) {
		memcpy(work, base, N * sizeof *work);
		qsort(work, N, sizeof *work, by_value);
		sum += work[r % N];
	}
	fprintf(stderr, "sum=%ld\n", sum);
	return 0;
}
"#;

/// `hotloop MS`: hot() and cold() in turn (10:1) for MS ms of CPU.
const HOT_LOOP: &str = r#"
#include <stdio.h>
#include <stdlib.h>
volatile unsigned long sink;
__attribute__((noinline)) void hot(long n) {
	unsigned long x = sink;
	for (long i = 0; i < n; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL; /* HOT */
	sink = x;
}
__attribute__((noinline)) void cold(long n) {
	unsigned long x = sink;
	for (long i = 0; i < n; i++) x = x * 2862933555777941757UL + 3037000493UL;
	sink = x;
}
int main(int argc, char **argv) {
	if (argc != 2) { fprintf(stderr, "usage: hotloop MS\n"); return 2; }
	long long end = task_clock_ns() + atoll(argv[1]) * 1000000LL;
	do { hot(1000000); cold(100000); } while (task_clock_ns() < end);
	return 0;
}
"#;

fn libc_heavy() -> PathBuf {
    common::c_source("pfmprof_libcheavy", LIBC_HEAVY, &[])
}

fn hot_loop() -> PathBuf {
    common::c_source("pfmprof_hotloop", &common::with_task_clock(HOT_LOOP), &[])
}

fn daemon() -> Daemon {
    Daemon::start(&["--cpu-mhz", &MHZ.to_string()])
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

/// Percent of the run in functions of `module`, and in `function`.
fn shares(report: &serde_json::Value, module: &str, function: &str) -> (f64, f64) {
    let rows = report["functions"].as_array().expect("functions");
    let sum = |keep: &dyn Fn(&serde_json::Value) -> bool| -> f64 {
        rows.iter()
            .filter(|r| keep(r))
            .filter_map(|r| r["percent"].as_f64())
            .sum()
    };
    (
        sum(&|r| r["module"] == module),
        sum(&|r| r["name"] == function),
    )
}

/// `perf report --stdio --sort KEY` of `data`: (percent, name) rows.
fn perf_report(data: &Path, key: &str) -> Vec<(f64, String)> {
    let out = run(Command::new("perf")
        .args(["report", "--stdio", "-q", "--sort", key, "-i"])
        .arg(data));
    assert!(out.status.success(), "perf report: {}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (percent, name) = l.trim().split_once('%')?;
            let name = name.trim();
            // --sort sym: "[.] name" (user) or "[k] name" (kernel).
            let name = name.split_once("] ").map_or(name, |(_, n)| n);
            Some((percent.trim().parse().ok()?, name.trim().to_string()))
        })
        .collect()
}

fn perf_available() -> bool {
    let ok = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-o", "/dev/null", "--", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let test = std::thread::current()
            .name()
            .unwrap_or("pfmprof_whole")
            .to_string();
        xtask::ci::skip_or_fail(
            &test,
            "perf record -e cpu-clock does not run (install linux-perf)",
        );
    }
    ok
}

#[test]
fn libc_and_own_function_shares_agree_with_perf_record() {
    if !can_run() || !perf_available() {
        return;
    }
    let program = libc_heavy();
    let rounds = "40";
    let daemon = daemon();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("perf.data");
    // The reference in the same window, on the same program and work.
    let perf = run(Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&program)
        .arg(rounds));
    assert!(perf.status.success(), "perf record: {}", text(&perf));
    let out = run(common::pfmprof(&daemon)
        .arg("--json")
        .arg(&program)
        .arg(rounds));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let report = json(&out);
    let (pfm_libc, pfm_own) = shares(&report, "libc.so.6", "by_value");
    let dsos = perf_report(&data, "dso");
    let syms = perf_report(&data, "sym");
    let perf_libc: f64 = dsos
        .iter()
        .filter(|(_, d)| d == "libc.so.6")
        .map(|(p, _)| p)
        .sum();
    let perf_own: f64 = syms
        .iter()
        .filter(|(_, s)| s == "by_value")
        .map(|(p, _)| p)
        .sum();
    let summary = format!(
        "pfmprof libc {pfm_libc:.1}% by_value {pfm_own:.1}%; perf record libc {perf_libc:.1}% \
         by_value {perf_own:.1}%\nperf dso: {dsos:?}\nperf sym: {:?}\npfmprof: {report:#}",
        &syms[..syms.len().min(8)]
    );
    eprintln!(
        "pfmprof_whole: libcheavy {rounds}: pfmprof libc {pfm_libc:.1}% by_value {pfm_own:.1}%, \
         perf record libc {perf_libc:.1}% by_value {perf_own:.1}%"
    );
    assert!(perf_libc > 30.0, "the program lives in libc: {summary}");
    assert!(
        (pfm_libc - perf_libc).abs() <= 10.0,
        "libc share: {summary}"
    );
    assert!(
        (pfm_own - perf_own).abs() <= 10.0,
        "by_value share: {summary}"
    );
    // Percentages are of the whole run: with the lost and outside rows they
    // make 100.
    let total: f64 = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["percent"].as_f64())
        .sum::<f64>()
        + report["lost_percent"].as_f64().unwrap()
        + report["outside_percent"].as_f64().unwrap();
    assert!((total - 100.0).abs() < 0.5, "{summary}");
    let images = range_images(&report);
    assert!(
        images.iter().any(|i| i.ends_with("/libc.so.6")),
        "{images:?}"
    );
    // Root may profile the kernel: its range is one of them.
    assert!(images.contains(&"/proc/kallsyms"), "{images:?}");
}

#[test]
fn a_stripped_binary_is_symbolized_from_its_debug_file() {
    if !can_run() {
        return;
    }
    let built = hot_loop();
    let dir = built.parent().unwrap();
    let stripped = dir.join("pfmprof_hotloop_stripped");
    let debug = dir.join("pfmprof_hotloop_stripped.debug");
    let objcopy = |args: &[&std::ffi::OsStr]| {
        let out = run(Command::new("objcopy").args(args));
        assert!(out.status.success(), "objcopy {args:?}: {}", text(&out));
    };
    if !stripped.exists() {
        objcopy(&[
            "--only-keep-debug".as_ref(),
            built.as_os_str(),
            debug.as_os_str(),
        ]);
        objcopy(&[
            "--strip-all".as_ref(),
            built.as_os_str(),
            stripped.as_os_str(),
        ]);
        let link = format!("--add-gnu-debuglink={}", debug.display());
        objcopy(&[link.as_ref(), stripped.as_os_str()]);
    }
    let nm = run(Command::new("nm").arg(&stripped));
    assert!(
        !String::from_utf8_lossy(&nm.stdout).contains(" hot"),
        "stripped: {}",
        text(&nm)
    );
    let daemon = daemon();
    let out = run(common::pfmprof(&daemon)
        .arg("--json")
        .arg(&stripped)
        .arg("200"));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let report = json(&out);
    let top = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["module"] == "pfmprof_hotloop_stripped")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(top["name"], "hot", "{report:#}");
    let location = top["location"].as_str().unwrap_or_default();
    assert!(location.starts_with("pfmprof_hotloop.c:"), "{report:#}");
}

/// The report and the program's own output never mix: while the report has
/// pfmprof's standard output, the program writes to its standard error;
/// with `--output` the program keeps its standard output.
#[test]
fn the_report_and_the_programs_output_never_mix() {
    if !can_run() {
        return;
    }
    let daemon = daemon();
    // The report's header quotes the command, so the output the test looks
    // for is computed, not in the command line.
    let command = format!("echo program-$((6*7)); {} 50", hot_loop().display());
    for (format, marker) in [("text", "interrupts "), ("json", "\"functions\"")] {
        let out = run(common::pfmprof(&daemon)
            .args(["-f", "--format", format, "sh", "-c"])
            .arg(&command));
        assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("program-42"), "{format}: {stdout}");
        assert!(stdout.contains(marker), "{format}: the report: {stdout}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("program-42"),
            "{format}: {}",
            text(&out)
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt");
    let out = run(common::pfmprof(&daemon)
        .arg("--output")
        .arg(&report)
        .args(["-f", "sh", "-c"])
        .arg(&command));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "program-42\n");
    let report = std::fs::read_to_string(&report).unwrap();
    assert!(
        report.contains("interrupts ") && !report.contains("program-42"),
        "{report}"
    );
}

/// SIGTERM (as from a service manager or `kill`) stops pfmprof as SIGINT
/// does: passed on to the program, which ends, and the report is written;
/// killed outright, pfmprof had left the program running.
#[test]
fn sigterm_ends_the_program_too() {
    if !can_run() {
        return;
    }
    let daemon = daemon();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let pfmprof = common::pfmprof(&daemon)
        .args(["sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 60", pidfile.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = || {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
    };
    common::wait_until(
        "the program's start",
        std::time::Duration::from_secs(60),
        || pid().is_some(),
        String::new,
    );
    let pid = pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pfmprof.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = pfmprof.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("interrupts "),
        "{}",
        text(&out)
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the program (pid {pid}) outlived pfmprof"
    );
}

#[test]
fn follow_exec_profiles_the_program_a_shell_starts() {
    if !can_run() {
        return;
    }
    let program = hot_loop();
    let daemon = daemon();
    // "; true": the shell must fork the program and wait, not exec it.
    let command = format!("{} 300; true", program.display());
    let out = run(common::pfmprof(&daemon)
        .args(["-f", "--json", "sh", "-c"])
        .arg(&command));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let report = json(&out);
    let functions = report["functions"].as_array().unwrap();
    assert_eq!(functions[0]["name"], "hot", "{report:#}");
    assert_eq!(functions[0]["module"], "pfmprof_hotloop", "{report:#}");
    assert!(
        functions[0]["percent"].as_f64().unwrap() > 50.0,
        "{report:#}"
    );
    // Without -f only the shell's own text is profiled.
    let out = run(common::pfmprof(&daemon)
        .args(["--json", "sh", "-c"])
        .arg(&command));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let report = json(&out);
    let functions = report["functions"].as_array().unwrap();
    assert!(
        functions.iter().all(|f| f["module"] != "pfmprof_hotloop"),
        "{report:#}"
    );
}

#[test]
fn annotate_shows_the_hot_line() {
    if !can_run() {
        return;
    }
    let program = hot_loop();
    let daemon = daemon();
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw");
    let out = run(common::pfmprof(&daemon)
        .args(["--annotate", "hot", "-o"])
        .arg(&raw)
        .arg(&program)
        .arg("200"));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let annotation = stdout
        .split_once("annotation of hot:")
        .unwrap_or_else(|| panic!("{stdout}"))
        .1;
    // The line with the most samples is the loop of hot().
    let hottest = annotation
        .lines()
        .filter_map(|l| {
            // "samples percent line  source"; lines without samples have
            // only the line number before the source.
            let mut words = l.split_whitespace();
            let samples: u64 = words.next()?.parse().ok()?;
            words.next()?.parse::<f64>().ok()?;
            Some((samples, l))
        })
        .max_by_key(|(n, _)| *n)
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(hottest.1.contains("/* HOT */"), "{stdout}");
    assert!(stdout.lines().all(|l| l.chars().count() <= 100), "{stdout}");
    // The same from the -o file.
    let again = run(Command::new(common::bin("pfmprof"))
        .args(["--annotate", "hot", "--report"])
        .arg(&raw));
    assert!(again.status.success(), "{}", text(&again));
    assert!(String::from_utf8_lossy(&again.stdout).contains("/* HOT */"));
}

#[test]
fn ranges_the_daemon_refuses_are_left_out_and_said() {
    if !can_run() {
        return;
    }
    let program = libc_heavy();
    // libc's text needs ~350 kB of buckets at stride 4: over this budget.
    let daemon = Daemon::start(&[
        "--cpu-mhz",
        &MHZ.to_string(),
        "--max-profile-bytes",
        "100000",
    ]);
    let out = run(common::pfmprof(&daemon)
        .arg("--json")
        .arg(&program)
        .arg("10"));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = stderr
        .lines()
        .find(|l| l.starts_with("pfmprof: not profiling") && l.contains("/libc.so.6"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(said.contains("ENOMEM"), "{said}");
    let report = json(&out);
    let images = range_images(&report);
    assert!(
        images.iter().all(|i| !i.ends_with("/libc.so.6")),
        "{images:?}"
    );
    // qsort's time is libc's: outside every range now, and said so.
    let outside = report["outside_percent"].as_f64().unwrap();
    assert!(outside > 30.0, "{report:#}");
    assert_eq!(report["functions"][0]["name"], "by_value", "{report:#}");
}

/// The images of a JSON report's profiled ranges.
fn range_images(report: &serde_json::Value) -> Vec<&str> {
    report["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["image"].as_str())
        .collect()
}
