//! The out-of-process fuzzer (`tests/fuzz/pfm_fuzz.c`) against a real pfmd
//! of every model, over each FUSE channel, for a bounded time each: `PFM_FUZZ_SECONDS` (default 5),
//! seed `PFM_FUZZ_SEED` (default: from the clock; printed). Per model it
//! prints one summary line and asserts: no daemon restart (same pid, still
//! running), no hang (every call answered within the fuzzer's deadline), no
//! errno outside what each call may return (the list is in pfm_fuzz.c's
//! header), no EIO (a panic in a request), no "bug in pfmd" in the log; and
//! the daemon's RSS after the run, with every descriptor closed, within
//! 64 MiB of before (the run's budgets: 64 MiB of profile memory in all).
//!
//! The operations include fork+execve (a FLUSH sent from inside execve once
//! deadlocked pfmd); `PFM_FUZZ_EXEC=0` leaves it out. `PFM_FUZZ_SKIP` leaves
//! other operations out (see pfm_fuzz.c).

use crate::common;
use crate::common_hostile;

use common::{Channel, Daemon};
use common_hostile::{Need, alive, bug_lines, log_tail, prerequisites, rss_kib, serial, values};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The daemon's budgets for a fuzz run: small, so a run cannot take the
/// machine's memory, and so the fuzzer reaches them.
const BUDGETS: &[&str] = &[
    "--cpu-mhz",
    "2000",
    "--max-profile-bytes",
    "16777216",
    "--profile-memory-total",
    "67108864",
    "--profile-memory-per-user",
    "33554432",
    "--ring-memory-total",
    "33554432",
    "--ring-memory-per-user",
    "16777216",
    "--perf-fds-total",
    "512",
    "--perf-fds-per-user",
    "256",
    "--max-pme-threads",
    "32",
];

fn fuzzer() -> PathBuf {
    let include = Path::new(common::CRATE).join("include");
    common::c_source(
        "pfm_fuzz",
        include_str!("fuzz/pfm_fuzz.c"),
        &["-I", include.to_str().unwrap(), "-pthread", "-Wextra"],
    )
}

fn seconds() -> u64 {
    std::env::var("PFM_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

fn seed() -> u64 {
    std::env::var("PFM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                % 1_000_000_007
        })
}

/// A normal client once nothing holds the device any more (the fuzzer's
/// last releases reach the daemon after it has exited; `peek` waits them
/// out): it opens, reads its counts and closes. It runs in a child process:
/// this test process never holds the device (see `common_hostile::serial`).
fn normal_client(daemon: &Daemon) -> Result<(), String> {
    let out = common::run(&mut common_hostile::client(daemon, "peek", &[]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    match common_hostile::rows(&stdout).get("getcnt") {
        Some(e) if e == "0" && out.status.success() => Ok(()),
        _ => Err(common::text(&out)),
    }
}

fn fuzz(model: &str, channel: Channel) {
    let _serial = serial();
    let name = format!("fuzz_{model}");
    if !prerequisites(&name, &[Need::Root, Need::Fuse, Need::Gcc]) {
        return;
    }
    let program = fuzzer();
    let mut daemon = Daemon::on_env(
        channel,
        &[&["--model", model], BUDGETS].concat(),
        &[("RUST_LOG", "info".as_ref())],
    );
    let pid = daemon.pid();
    let rss_before = rss_kib(pid);
    let (seconds, seed) = (seconds(), seed());
    let mut child = Command::new(&program)
        .arg(&daemon.device)
        .arg(seconds.to_string())
        .arg(seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pfm_fuzz");
    let output = std::thread::spawn({
        let mut stdout = child.stdout.take().unwrap();
        move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
            text
        }
    });
    // The fuzzer has its own watchdog; this one only catches the fuzzer
    // itself stuck (a worker in a call its SIGKILL cannot end).
    let deadline = Instant::now() + Duration::from_secs(seconds + 180);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{model}: pfm_fuzz did not finish in {seconds} s + 180 s: a call never returned\n{}",
                log_tail(&daemon, 40)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = output.join().unwrap();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }

    let restarted = !alive(&mut daemon) || daemon.pid() != pid;
    let normal = if restarted {
        Err("no daemon".to_string())
    } else {
        normal_client(&daemon)
    };
    let rss_after = if restarted { 0 } else { rss_kib(pid) };
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("SUMMARY "))
        .unwrap_or_default()
        .to_string();
    let v = values(&summary);
    let get = |k: &str| v.get(k).copied().unwrap_or(u64::MAX);
    println!(
        "fuzz {model}: seed {seed}, {channel:?}, {seconds} s: inputs {}, ok ioctls {}, restarts {}, hangs {}, \
         unknown errnos {}, EIO {}, ENOTCONN {}, RSS before {rss_before} KiB, after {rss_after} KiB",
        get("inputs"),
        get("ok_ioctls"),
        u8::from(restarted),
        get("hangs"),
        get("unexpected"),
        get("eio"),
        get("enotconn"),
    );
    let details = format!(
        "pfm_fuzz {status}, seed {seed} (PFM_FUZZ_SEED={seed} to repeat)\nstdout:\n{stdout}\nstderr:\n{stderr}\ndaemon log tail:\n{}",
        log_tail(&daemon, 30)
    );
    assert!(
        !restarted,
        "{model}: the daemon died or restarted\n{details}"
    );
    assert!(!summary.is_empty(), "{model}: no SUMMARY line\n{details}");
    assert_eq!(get("hangs"), 0, "{model}: hangs\n{details}");
    assert_eq!(
        get("eio"),
        0,
        "{model}: EIO (a request hit a bug)\n{details}"
    );
    assert_eq!(get("enotconn"), 0, "{model}: ENOTCONN\n{details}");
    assert_eq!(get("unexpected"), 0, "{model}: unknown errnos\n{details}");
    assert!(status.success(), "{model}\n{details}");
    assert!(
        get("inputs") > 0 && get("ok_ioctls") > 0,
        "{model}: nothing tried\n{details}"
    );
    let bugs = bug_lines(&daemon);
    assert!(
        bugs.is_empty(),
        "{model}: the daemon logged bugs:\n{}",
        bugs.join("\n")
    );
    assert!(
        rss_after <= rss_before + 64 * 1024,
        "{model}: RSS {rss_before} KiB before, {rss_after} KiB after every descriptor closed\n{details}"
    );
    if let Err(e) = normal {
        panic!("{model}: a normal client after the run failed:\n{e}\n{details}");
    }
}

/// `fuzz_MODEL(channel)` for each model, two tests each.
macro_rules! fuzz_models {
    ($($test:ident => $model:literal),+ $(,)?) => {
        $(fn $test(channel: Channel) {
            fuzz($model, channel);
        })+
        over_each_fuse_channel!($($test),+);
    };
}

fuzz_models!(
    fuzz_ev4 => "ev4",
    fuzz_ev45 => "ev45",
    fuzz_ev5 => "ev5",
    fuzz_ev56 => "ev56",
    fuzz_pca56 => "pca56",
    fuzz_ev6 => "ev6",
    fuzz_ev67 => "ev67",
);
