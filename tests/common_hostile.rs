//! Helpers of the hostile-caller tests (`hostile.rs`, `fuzz.rs`; `cuse_vm.rs`
//! reads its guest clients' rows with them) that the
//! shared harness (`common/mod.rs`) does not have: prerequisites that fail
//! loudly on CI, the daemon's RSS, the hostile C client, opens that wait out
//! a previous client's release.

use crate::common::{self, Daemon};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// What a test needs from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Root,
    Fuse,
    Gcc,
    Setpriv,
    Unshare,
    /// An unprivileged user may create a user namespace (`unshare -U -r`).
    UserNamespaces,
    /// Two online CPUs (ONE opens of different CPUs).
    TwoCpus,
}

fn command_runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn missing(need: Need) -> Option<&'static str> {
    let ok = match need {
        Need::Root => nix::unistd::geteuid().is_root(),
        Need::Fuse => Path::new("/dev/fuse").exists(),
        Need::Gcc => command_runs("gcc", &["--version"]),
        Need::Setpriv => command_runs("setpriv", &["--version"]),
        Need::Unshare => command_runs("unshare", &["--version"]),
        Need::UserNamespaces => command_runs(
            "setpriv",
            &[
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
                "unshare",
                "-U",
                "-r",
                "true",
            ],
        ),
        Need::TwoCpus => common::online_cpus() >= 2,
    };
    (!ok).then_some(match need {
        Need::Root => "needs root (FUSE mounts, setuid to nobody, perf system-wide)",
        Need::Fuse => "/dev/fuse is missing",
        Need::Gcc => "gcc is missing (the clients are C programs)",
        Need::Setpriv => "setpriv (util-linux) is missing",
        Need::Unshare => "unshare (util-linux) is missing",
        Need::UserNamespaces => "unprivileged user namespaces are disabled on this host",
        Need::TwoCpus => "needs two online CPUs",
    })
}

/// True when everything `needs` lists is there. Otherwise prints
/// `SKIPPED: <test>: <why>` and returns false, or, with `CI=true` in the
/// environment, fails the test: CI machines must have it all.
pub fn prerequisites(test: &str, needs: &[Need]) -> bool {
    let why: Vec<&str> = needs.iter().filter_map(|n| missing(*n)).collect();
    if why.is_empty() {
        return true;
    }
    let why = why.join("; ");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: prerequisite missing on CI: {why}");
    }
    eprintln!("SKIPPED: {test}: {why}");
    false
}

/// Serializes the tests of one binary. A test that holds the device in its
/// own process (Rust opens are close-on-exec) must not run while another
/// test of the same process starts a program: that program's execve would
/// close its copy of the descriptor, a FLUSH the daemon cannot answer while
/// the exec is under way (see `hostile.rs`,
/// `closing_on_exec_does_not_deadlock_the_daemon`). So tests here run one
/// at a time, and none starts a program while it holds the device.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The daemon's resident set, KiB (`VmRSS` of /proc/PID/status).
pub fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// True while the daemon process is running (not exited, not a zombie).
pub fn alive(daemon: &mut Daemon) -> bool {
    daemon
        .child
        .as_mut()
        .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
}

/// The hostile C client (`tests/hostile/client.c`, after
/// [`common::TASK_CLOCK_C`]), built once per test run, world-executable.
pub fn client_program() -> PathBuf {
    let include = Path::new(common::CRATE).join("include");
    common::c_source(
        "hostile_client",
        &common::with_task_clock(include_str!("hostile/client.c")),
        &["-I", include.to_str().unwrap(), "-pthread", "-Wextra"],
    )
}

/// `hostile_client SUBCOMMAND DEVICE ARGS...` as root.
pub fn client(daemon: &Daemon, subcommand: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(client_program());
    cmd.arg(subcommand).arg(&daemon.device).args(args);
    cmd
}

/// The same as nobody (uid and gid 65534, no groups).
pub fn client_as_nobody(daemon: &Daemon, subcommand: &str, args: &[&str]) -> Command {
    let mut cmd = common::as_nobody(client_program());
    cmd.arg(subcommand).arg(&daemon.device).args(args);
    cmd
}

/// Runs `cmd` to the end; panics with its output and the daemon's log unless
/// it exits 0.
pub fn run_ok(daemon: &Daemon, cmd: &mut Command) -> String {
    let out: Output = common::run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}\ndaemon log tail:\n{}",
        common::text(&out),
        log_tail(daemon, 40)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `row NAME ERRNO` lines of a client's output, by name.
pub fn rows(stdout: &str) -> HashMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("row "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, errno)| (name.to_string(), errno.trim().to_string()))
        .collect()
}

/// Asserts each `(row, errno)` of `want` against a client's output.
pub fn assert_rows(who: &str, stdout: &str, want: &[(&str, &str)]) {
    let got = rows(stdout);
    for (name, errno) in want {
        assert_eq!(
            got.get(*name).map(String::as_str),
            Some(*errno),
            "{who}: row {name}\n{stdout}"
        );
    }
}

/// Opens the device in `mode` as root, trying again while it is busy: a
/// previous client's release reaches the daemon after the client has gone
/// (FUSE sends RELEASE asynchronously). Gives up after 30 s.
pub fn open_when_free(daemon: &Daemon, mode: pfm_abi::OpenMode) -> pfm_client::Device {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match pfm_client::Device::open(&daemon.device, mode) {
            Ok(device) => return device,
            Err(e) if e.errno() == Some(nix::errno::Errno::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("open {mode:?}: {e}\n{}", log_tail(daemon, 40)),
        }
    }
}

/// The last `n` lines of the daemon's log.
pub fn log_tail(daemon: &Daemon, n: usize) -> String {
    let log = daemon.log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Lines of the daemon's log that say a request hit a bug in pfmd (a panic
/// answered with EIO) or that a thread panicked.
pub fn bug_lines(daemon: &Daemon) -> Vec<String> {
    daemon
        .log()
        .lines()
        .filter(|l| l.contains("bug in pfmd") || l.contains("panicked"))
        .map(str::to_string)
        .collect()
}

/// `key=value` words of `text` as numbers.
pub fn values(text: &str) -> HashMap<String, u64> {
    text.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

/// What the `pidns` client's rows must say (tests/hostile/client.c): no
/// count while only threads without the PME bit ran (phase 1), the PME
/// thread's own time in phase 2 and, where the counter is the cpu-clock
/// stand-in, about its run time at the nominal clock (both from one clock,
/// so load does not skew them).
pub fn assert_pidns_phases(who: &str, out: &str) {
    let v = values(out);
    assert_eq!(
        v["phase1"], 0,
        "{who}: threads without the PME bit counted:\n{out}"
    );
    assert!(
        v["phase2"] > 0,
        "{who}: the PME thread was not counted:\n{out}"
    );
    if v["fidelity"] == pfm_model::Fidelity::Approximate.abi_code() {
        let expected = v["pme_cpu_ns"] as f64 * v["khz"] as f64 / 1e6 / v["period"] as f64;
        let got = v["phase2"] as f64;
        assert!(
            got >= expected * 0.5 && got <= expected * 1.5 + 2.0,
            "{who}: {got} interrupts for {expected:.0} expected from the thread's CPU time\n{out}"
        );
    }
}

/// What the `userns` client's rows must say for root (everything allowed),
/// on EV5 with its `PCNT5FREQ` row.
pub fn userns_rows_of_root(ev5: bool) -> Vec<(&'static str, &'static str)> {
    [
        ("open", "0"),
        ("logall", "0"),
        ("renable_under_logall", "0"),
        ("setkrange", "0"),
        ("caller", "0"),
        ("logselect", "0"),
    ]
    .into_iter()
    .chain(ev5.then_some(("freq256", "0")))
    .collect()
}

/// What they must say for a caller that may not count system-wide (nobody,
/// and root of a user namespace or without capabilities): refused all that
/// is system-wide or kernel, allowed its own threads in user mode.
pub fn userns_rows_refused(ev5: bool) -> Vec<(&'static str, &'static str)> {
    [
        ("open", "0"),
        ("logall", "EACCES"),
        ("setitems", "0"),
        ("select", "0"),
        ("renable_under_logall", "EACCES"),
        ("setitems_profiling", "0"),
        ("setkrange", "EACCES"),
        ("caller", "EINVAL"),
        ("logselect", "0"),
        ("renable_under_logselect", "0"),
    ]
    .into_iter()
    .chain(ev5.then_some(("freq256", "EPERM")))
    .collect()
}

/// What nobody's `peek` must say after root's session: nothing of it (no
/// periods, fidelities or counts) and the selection an open starts with.
pub fn assert_peek_sees_nothing_of_root(peek: &str) {
    let v = values(peek);
    assert_eq!(v["uid"], 65534, "{peek}");
    for key in [
        "period0",
        "period1",
        "period2",
        "fidelity0",
        "fidelity1",
        "count0",
    ] {
        assert_eq!(v[key], 0, "nobody sees root's {key}:\n{peek}");
    }
    assert_eq!(v["items"], 1, "items after open are PFM_COUNTERS:\n{peek}");
}

/// The `flood` client's summary: at least 1000 rounds, every bad ioctl of
/// each refused, nothing unexpected.
pub fn assert_flood_refused(out: &str) {
    let v = values(out);
    assert!(v["rounds"] >= 1000, "{out}");
    assert_eq!(
        v["refused"],
        3 * v["rounds"],
        "every bad ioctl is refused:\n{out}"
    );
    assert_eq!(v["unexpected"], 0, "{out}");
}

/// What the `pidns` client's rows must say, root or nobody, before
/// [`assert_pidns_phases`] checks its counts.
pub const PIDNS_ROWS: &[(&str, &str)] = &[
    ("setitems", "0"),
    ("select", "0"),
    ("logselect", "0"),
    ("renable1", "0"),
    ("getcnt1", "0"),
    ("renable2", "0"),
    ("getcnt2", "0"),
];

/// What the `pme 6` client's rows must say under `--max-pme-threads 4`: four
/// PME threads, the fifth and sixth refused, the open still usable.
pub const PME_PAST_BUDGET_ROWS: &[(&str, &str)] = &[
    ("thread1", "0"),
    ("thread2", "0"),
    ("thread3", "0"),
    ("thread4", "0"),
    ("thread5", "ENOSPC"),
    ("thread6", "ENOSPC"),
    ("renable", "0"),
    ("rdisable", "0"),
];

/// What the `pme 8 exit` client's rows must say under `--max-pme-threads 4`:
/// threads that exit give their place back, so all eight get one.
pub const PME_EXIT_ROWS: &[(&str, &str)] = &[
    ("thread1", "0"),
    ("thread2", "0"),
    ("thread3", "0"),
    ("thread4", "0"),
    ("thread5", "0"),
    ("thread6", "0"),
    ("thread7", "0"),
    ("thread8", "0"),
    ("renable", "0"),
];

/// What the `wedge` client's rows must say, either variant, root or nobody:
/// every call of the open answered after its PME child died.
pub const WEDGE_ROWS: &[(&str, &str)] = &[
    ("setitems_ipl", "0"),
    ("select", "0"),
    ("child_logselect", "0"),
    ("setmux", "0"),
    ("logselect", "0"),
    ("setitems", "0"),
    ("renable", "0"),
    ("rdisable", "0"),
    ("getcnt", "0"),
    ("getiplhis", "0"),
];
