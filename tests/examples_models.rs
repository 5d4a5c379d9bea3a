//! The C examples on every Alpha family, and the errors that tell a user
//! what to do.
//!
//! - `uprofile` samples cycles with each family's own ioctls (EV4
//!   `PCNTSETMUX`; EV5 `PCNT5MUX`/`PCNT5FREQ`/`PCNT5RESTART`; EV6 `PCNT6MUX`;
//!   EV67 profile-me and `-pair`) and finds its hot function on a daemon of
//!   each family, as root and as nobody.
//! - Every example asks "is pfmd running?" when the device is missing or its
//!   daemon is gone, and a family ioctl refused by a daemon emulating another
//!   family names the model it emulates.
//! - The examples that can run on another family do (`papi_ev6` on an EV67,
//!   `ioctl_bench` everywhere).
//!
//! Bounds were measured on a loaded 2-CPU host without a PMU (load average
//! 9, cycles from cpu-clock), three runs per model, root and nobody, ALL and
//! EACH: hot/cold 7.5 .. 10.1 (typically 10.0, the workload's 90/10 split),
//! (hot + cold) / total >= 0.999, total / pf_cntr0 0.98 .. 1.00. No assertion
//! depends on wall-clock time.

use crate::common;

use common::{Channel, Daemon, run, text, value};
use std::path::Path;
use std::process::{Command, Output};

/// The prerequisites of a test, checked in order. Missing one fails loudly
/// when `CI=true`; elsewhere the test prints `SKIPPED: ...` and returns false.
fn prerequisites(needs: &[Need]) -> bool {
    for need in needs {
        let missing = match need {
            Need::Gcc => (!command_runs("gcc", &["--version"]))
                .then_some("gcc is not installed (scripts/install-deps)"),
            Need::Root => (!nix::unistd::geteuid().is_root())
                .then_some("needs root (pfmd mounts a FUSE file system)"),
            Need::Fuse => (!Path::new("/dev/fuse").exists()).then_some("/dev/fuse is missing"),
            Need::Nobody => {
                if !command_runs("setpriv", &["--version"]) {
                    Some("setpriv (util-linux) is not installed: cannot run as nobody")
                } else if common::paranoid() > 2 {
                    Some("kernel.perf_event_paranoid > 2: an unprivileged PCNTLOGSELECT is EACCES")
                } else {
                    None
                }
            }
        };
        if let Some(why) = missing {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and a prerequisite is missing: {why}");
            }
            eprintln!("SKIPPED: {why}");
            return false;
        }
    }
    true
}

enum Need {
    Gcc,
    Root,
    Fuse,
    Nobody,
}

const DAEMON: &[Need] = &[Need::Gcc, Need::Root, Need::Fuse];
const DAEMON_AND_NOBODY: &[Need] = &[Need::Gcc, Need::Root, Need::Fuse, Need::Nobody];

fn command_runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// uprofile's machine line.
#[derive(Debug)]
struct Profile {
    hot: u64,
    cold: u64,
    total: u64,
    pf_cntr0: u64,
}

fn profile(what: &str, out: &Output, daemon: &Daemon) -> Profile {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        text(out),
        daemon.log()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let get = |k| value(&stdout, k).unwrap_or_else(|| panic!("{what}: no {k}= in\n{stdout}"));
    Profile {
        hot: get("hot_samples"),
        cold: get("cold_samples"),
        total: get("total"),
        pf_cntr0: get("pf_cntr0"),
    }
}

/// hot() runs ten times as long as cold(): the profile must say so.
fn assert_hot_dominates(what: &str, p: &Profile, stdout: &str) {
    let why = format!("{what}: {p:?}\n{stdout}");
    assert!(p.pf_cntr0 > 0, "counter 0 interrupted: {why}");
    assert!(p.cold > 0, "cold() sampled at all: {why}");
    assert!(p.hot > 5 * p.cold, "hot() dominates cold(): {why}");
    assert!(
        (p.hot + p.cold) as f64 >= 0.9 * p.total as f64,
        "the profile is hot() and cold(): {why}"
    );
    assert!(
        p.total as f64 >= 0.8 * p.pf_cntr0 as f64 && p.total <= p.pf_cntr0 + p.pf_cntr0 / 20,
        "the profile holds the interrupts, and no more: {why}"
    );
    let first = stdout
        .lines()
        .find(|l| l.starts_with("0x"))
        .unwrap_or_default();
    assert!(first.contains(" hot+"), "hottest range in hot(): {why}");
}

/// Runs the command `make` builds; again while its open is refused with
/// EBUSY. Under FUSE the release of the previous program's descriptor
/// reaches pfmd after that program has exited, so a program started right
/// after another may find the device still held (docs/device.md §2: an open
/// never waits).
fn run_when_free(device: &Path, mut make: impl FnMut() -> Command) -> Output {
    let busy = format!("{}: Device or resource busy", device.display());
    for _ in 0..100 {
        let out = run(&mut make());
        if out.status.success() || !String::from_utf8_lossy(&out.stderr).contains(&busy) {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    run(&mut make())
}

/// uprofile on one model: root (ALL and EACH) and nobody; `extra` more
/// argument sets as root.
fn uprofile_on(channel: Channel, model: &str, banner: &str, extra: &[&[&str]]) {
    let daemon = Daemon::on(channel, &["--model", model]);
    let mut runs: Vec<(String, Output)> = Vec::new();
    for args in [&[][..], &["-each"]].iter().chain(extra) {
        let out = run_when_free(&daemon.device, || {
            let mut cmd = daemon.client("uprofile");
            cmd.args(*args);
            cmd
        });
        runs.push((format!("--model {model} root {args:?}"), out));
    }
    let out = run_when_free(&daemon.device, || {
        let mut cmd = common::as_nobody(common::c_program("uprofile"));
        cmd.env("PFM_DEVICE", &daemon.device);
        cmd
    });
    runs.push((format!("--model {model} nobody"), out));
    for (what, out) in &runs {
        let p = profile(what, out, &daemon);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.lines().any(|l| l.starts_with(banner)),
            "{what}: uprofile names the model it asked PCNTGETINFO for ({banner}):\n{stdout}"
        );
        assert_hot_dominates(what, &p, &stdout);
    }
}

fn uprofile_finds_its_hot_function_on_ev4(channel: Channel) {
    if prerequisites(DAEMON_AND_NOBODY) {
        uprofile_on(channel, "ev4", "# model ev4 (21064)", &[]);
    }
}

fn uprofile_finds_its_hot_function_on_ev5(channel: Channel) {
    if prerequisites(DAEMON_AND_NOBODY) {
        uprofile_on(channel, "ev5", "# model ev5 (21164)", &[]);
    }
}

fn uprofile_finds_its_hot_function_on_pca56(channel: Channel) {
    if prerequisites(DAEMON_AND_NOBODY) {
        uprofile_on(channel, "pca56", "# model pca56 (21164PC)", &[]);
    }
}

fn uprofile_finds_its_hot_function_on_ev6(channel: Channel) {
    if prerequisites(DAEMON_AND_NOBODY) {
        uprofile_on(channel, "ev6", "# model ev6 (21264)", &[]);
    }
}

/// Profile-me mode (PF67_PM_RETIRE in PCNTSETITEMS) by default; `-pair`
/// samples with the aggregate pair PF67_CYCLES_AND_UNDEFINED.
fn uprofile_finds_its_hot_function_on_ev67_profile_me_and_pair(channel: Channel) {
    if prerequisites(DAEMON_AND_NOBODY) {
        uprofile_on(channel, "ev67", "# model ev67 (21264A)", &[&["-pair"]]);
    }
}

/// `-pair` is for an EV67 only; elsewhere it is a usage error that says why.
fn uprofile_pair_elsewhere_is_a_usage_error(channel: Channel) {
    if !prerequisites(DAEMON) {
        return;
    }
    let daemon = Daemon::on(channel, &["--model", "ev6"]);
    let out = run(daemon.client("uprofile").arg("-pair"));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the daemon emulates ev6 (21264), not ev67"),
        "{}",
        text(&out)
    );
}

const EXAMPLES: [&str; 6] = [
    "ev4count",
    "ev5count",
    "papi_ev6",
    "errno_contract",
    "uprofile",
    "ioctl_bench",
];

/// Runs every example against `device`; each must fail, asking whether
/// pfmd runs, with the device and the errno's text.
fn assert_every_example_asks_for_pfmd(device: &Path, errno_text: &str) {
    for prog in EXAMPLES {
        let out = run(Command::new(common::c_program(prog)).env("PFM_DEVICE", device));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{prog}: {}", text(&out));
        let line = stderr
            .lines()
            .find(|l| l.contains("is pfmd running? systemctl start pfmd"))
            .unwrap_or_else(|| panic!("{prog} asks whether pfmd runs: {}", text(&out)));
        let head = format!("{prog}: {}: {errno_text}", device.display());
        assert!(line.starts_with(&head), "{prog}: `{line}` starts `{head}`");
    }
}

#[test]
fn every_example_asks_whether_pfmd_runs_when_the_device_is_missing() {
    if !prerequisites(&[Need::Gcc]) {
        return;
    }
    assert_every_example_asks_for_pfmd(
        Path::new("/nonexistent/pfcntr"),
        "No such file or directory",
    );
    // errno_contract still ends with its tally, after saying why.
    let out =
        run(Command::new(common::c_program("errno_contract"))
            .env("PFM_DEVICE", "/nonexistent/pfcntr"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout.contains("# the device could not be opened"),
        "{}",
        text(&out)
    );
    assert_eq!(
        stdout.lines().last(),
        Some("0 passed, 1 failed"),
        "{}",
        text(&out)
    );
}

/// A daemon killed under its mount leaves ENOTCONN: the same question.
fn every_example_asks_whether_pfmd_runs_when_the_daemon_is_gone(channel: Channel) {
    if !prerequisites(DAEMON) {
        return;
    }
    let mut daemon = Daemon::on(channel, &["--model", "ev4"]);
    daemon.signal(nix::sys::signal::Signal::SIGKILL);
    daemon.wait();
    // Over io_uring the kernel ends the connection after the process is
    // reaped (its ring's teardown holds the FUSE device a little longer):
    // an open meanwhile is `ECONNABORTED` (docs/device.md §9). The daemon
    // is gone once an open is `ENOTCONN`.
    common::wait_until(
        "the kernel ends the dead daemon's connection",
        std::time::Duration::from_secs(30),
        || match std::fs::File::open(&daemon.device) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => true,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::ECANCELED)) => {
                false
            }
            other => panic!("an open of a dead daemon's device: {other:?}"),
        },
        String::new,
    );
    assert_every_example_asks_for_pfmd(&daemon.device, "Transport endpoint is not connected");
}

/// A family ioctl of another family is EINVAL; the example names the model
/// the daemon emulates and the one to start.
fn family_ioctls_on_another_model_name_the_daemons_model(channel: Channel) {
    if !prerequisites(DAEMON) {
        return;
    }
    let cases: [(&str, &str, &str); 4] = [
        (
            "ev6",
            "ev4count",
            "ev4count: PCNTSETMUX: Invalid argument: the daemon emulates ev6 (21264); start pfmd --model ev4",
        ),
        (
            "ev6",
            "ev5count",
            "ev5count: PCNT5CTXTS: Invalid argument: the daemon emulates ev6 (21264); start pfmd --model ev5",
        ),
        (
            "ev67",
            "ev4count",
            "ev4count: PCNTSETMUX: Invalid argument: the daemon emulates ev67 (21264A); start pfmd --model ev4",
        ),
        (
            "pca56",
            "papi_ev6",
            "papi_ev6: PCNT6MUX: Invalid argument: the daemon emulates pca56 (21164PC); start pfmd --model ev6",
        ),
    ];
    for model in ["ev6", "ev67", "pca56"] {
        let daemon = Daemon::on(channel, &["--model", model]);
        for (_, prog, want) in cases.iter().filter(|c| c.0 == model) {
            let out = run_when_free(&daemon.device, || {
                let mut cmd = daemon.client(prog);
                cmd.args(["-ms", "10"]);
                cmd
            });
            assert_eq!(out.status.code(), Some(1), "{prog}: {}", text(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.lines().any(|l| l == *want),
                "{prog} on --model {model}: want `{want}`\n{}",
                text(&out)
            );
            assert!(
                out.stdout.is_empty(),
                "{prog} printed counts: {}",
                text(&out)
            );
        }
    }
}

/// papi_ev6 on an EV67 counts cycles alone with the pair the 21264A has;
/// ioctl_bench selects cycles with each family's ioctls.
fn examples_that_can_run_on_another_model_do(channel: Channel) {
    if !prerequisites(DAEMON) {
        return;
    }
    let daemon = Daemon::on(channel, &["--model", "ev67"]);
    let out = run(daemon.client("papi_ev6").args(["-ms", "50"]));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        value(&stdout, "cycles").is_some_and(|c| c > 0),
        "{}",
        text(&out)
    );
    assert!(
        stdout.lines().any(|l| l == "cond_branches=unavailable"),
        "{}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PF67_CYCLES_AND_UNDEFINED"),
        "papi_ev6 says what it counts instead: {}",
        text(&out)
    );
    drop(daemon);

    for model in ["ev4", "ev5", "ev6", "ev67"] {
        let daemon = Daemon::on(channel, &["--model", model]);
        // ioctl_bench closes its ALL open and opens EACH: under load the
        // release may land after pfmd's grace for a process's own release.
        let out = run_when_free(&daemon.device, || {
            let mut cmd = daemon.client("ioctl_bench");
            cmd.args(["-n", "50", "-label", model]);
            cmd
        });
        assert!(
            out.status.success(),
            "--model {model}: {}\n{}",
            text(&out),
            daemon.log()
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        for row in ["noop", "enable", "getcnt_all", "getcnt_each", "perf_read"] {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.starts_with(&format!("bench label={model} row={row} "))),
                "--model {model}: no {row} row\n{stdout}"
            );
        }
    }
}

over_each_fuse_channel!(
    uprofile_finds_its_hot_function_on_ev4,
    uprofile_finds_its_hot_function_on_ev5,
    uprofile_finds_its_hot_function_on_pca56,
    uprofile_finds_its_hot_function_on_ev6,
    uprofile_finds_its_hot_function_on_ev67_profile_me_and_pair,
    uprofile_pair_elsewhere_is_a_usage_error,
    every_example_asks_whether_pfmd_runs_when_the_daemon_is_gone,
    family_ioctls_on_another_model_name_the_daemons_model,
    examples_that_can_run_on_another_model_do,
);
