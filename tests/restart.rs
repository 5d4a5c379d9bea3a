//! pfmd killed or restarted under a client that holds the device open and
//! is using it, over both FUSE channels (docs/device.md §1, "When pfmd
//! stops or dies"): what the client's next call gets, that it does not
//! hang, that a new daemon on the same mountpoint and `--dev-link` serves
//! cleanly (a dead mount detached and replaced, the old link kept or
//! replaced),
//! that nothing of the old daemon is left, and that the client's reopen
//! counts. The CUSE side is `tests/cuse_vm.rs`
//! (`cuse_restart_and_kill_in_a_vm`).
//!
//! The client is `tests/restart/holder.c`: it counts its own CPU (and
//! samples a profile) in rounds until a call fails, keeps the dead
//! descriptor open until told (SIGUSR1), then reopens and counts 100 ms of
//! its CPU against its own task-clock, measured in the same window.

use crate::common;

use common::{Daemon, EnableUring, can_run};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The nominal clock the daemons run at: 4096 cycles = 2.048 us of CPU.
const MHZ: u64 = 2000;
const PERIOD: u64 = 4096;
/// Waits that end on an event; past them the test fails saying which.
const EVENT_WAIT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Channel {
    Classic,
    Uring,
}

impl Channel {
    fn arg(self) -> &'static str {
        match self {
            Channel::Classic => "off",
            Channel::Uring => "on",
        }
    }

    /// Whether `errno` from a call to a mount says its daemon is gone:
    /// ENOTCONN once the kernel has aborted the connection; a call on its
    /// way (or made while the kernel tears an io_uring connection down)
    /// ends ECONNABORTED, or over io_uring ECANCELED (a ring entry of the
    /// dead daemon had it).
    fn server_gone(self, errno: i32) -> bool {
        errno == libc::ENOTCONN
            || errno == libc::ECONNABORTED
            || (self == Channel::Uring && errno == libc::ECANCELED)
    }

    /// Where the kernel can serve this channel; else says why (a failure
    /// under `CI=true`).
    fn available(self) -> bool {
        if self == Channel::Classic || Path::new(common::ENABLE_URING).exists() {
            return true;
        }
        let test = std::thread::current()
            .name()
            .unwrap_or("restart")
            .to_string();
        xtask::ci::skip_or_fail(
            &test,
            format!(
                "{} missing (kernel without CONFIG_FUSE_IO_URING)",
                common::ENABLE_URING
            ),
        );
        false
    }
}

/// How the old daemon ends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ending {
    /// SIGKILL: a crash, the OOM killer, `systemctl kill -s KILL`.
    Kill,
    /// SIGTERM: `systemctl stop` / `restart`.
    Term,
}

/// Starts a daemon (or, with `old`, restarts on its mountpoint) serving
/// `channel`; io_uring is allowed only while it starts.
fn start(channel: Channel, old: Option<Daemon>, args: &[&str]) -> Daemon {
    let mut all = vec!["--fuse-uring", channel.arg(), "--cpu-mhz", "2000"];
    all.extend_from_slice(args);
    let uring = (channel == Channel::Uring).then(EnableUring::set);
    let daemon = match old {
        Some(old) => old.restart(&all),
        None => Daemon::start(&all),
    };
    if let Some(uring) = uring {
        uring.restore_checked();
    }
    let served = match channel {
        Channel::Classic => "classic channel",
        Channel::Uring => "served over io_uring",
    };
    assert!(daemon.log().contains(served), "{}", daemon.log());
    daemon
}

/// The holder client (tests/restart/holder.c) and its output file.
struct Holder {
    child: Child,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Holder {
    fn start(device: &Path, profile: bool) -> Holder {
        let program = common::client_source(
            "holder",
            &common::with_task_clock(include_str!("restart/holder.c")),
            &[],
        );
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("holder.out");
        let child = Command::new(program)
            .arg(device)
            .args(profile.then_some("profile"))
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the holder");
        Holder {
            child,
            out,
            _dir: dir,
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// Waits until the output satisfies `done`; fails saying `what` did not
    /// happen.
    fn wait_for(&mut self, what: &str, daemon_log: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + EVENT_WAIT;
        loop {
            let out = self.output();
            if done(&out) {
                return out;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the holder exited ({status}) before {what}:\n{out}\n{daemon_log}");
            }
            assert!(
                Instant::now() < deadline,
                "{what} did not happen within {EVENT_WAIT:?} (the client hung?):\n{out}\n{daemon_log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Tells the holder to reopen, and waits for it to finish.
    fn reopen(mut self, daemon_log: &str) -> (ExitStatus, String) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            Signal::SIGUSR1,
        )
        .unwrap();
        let deadline = Instant::now() + EVENT_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, self.output());
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "the holder's reopen did not finish:\n{}\n{daemon_log}",
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key=value` of the first line starting with `prefix`.
fn field(out: &str, prefix: &str, key: &str) -> Option<String> {
    let line = out.lines().find(|l| l.starts_with(prefix))?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

/// The `round` lines' `cntr0` and `buckets`.
fn rounds(out: &str) -> Vec<(u64, u64)> {
    out.lines()
        .filter(|l| l.starts_with("round "))
        .filter_map(|l| {
            let num = |key| common::value(l, key);
            Some((num("cntr0")?, num("buckets")?))
        })
        .collect()
}

/// A process, told from a later one with the same pid by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Process {
    pid: i32,
    start: u64,
}

impl Process {
    /// `/proc/PID/stat`: command name, state, parent, start time.
    fn stat(pid: i32) -> Option<(String, char, i32, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the name: state (3), ppid (4), ..., starttime (22).
        Some((
            name.to_string(),
            fields.first()?.chars().next()?,
            fields.get(1)?.parse().ok()?,
            fields.get(19)?.parse().ok()?,
        ))
    }

    fn of(pid: i32) -> Process {
        let (_, _, _, start) = Process::stat(pid).expect("a live process");
        Process { pid, start }
    }

    /// Children of `parent` named `name`.
    fn children(parent: i32, name: &str) -> Vec<Process> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(|pid| {
                let (comm, _, ppid, start) = Process::stat(pid)?;
                (ppid == parent && comm == name).then_some(Process { pid, start })
            })
            .collect()
    }

    /// Still there, with threads and descriptors (a zombie has neither).
    fn alive(self) -> bool {
        Process::stat(self.pid)
            .is_some_and(|(_, state, _, start)| start == self.start && state != 'Z')
    }

    /// Its perf event descriptors.
    fn perf_events(self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.as_os_str() == "anon_inode:[perf_event]")
            })
            .count()
    }
}

/// Mounts on `path`, in this process's mount namespace.
fn mounts_on(path: &Path) -> usize {
    let path = path.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().nth(4) == Some(path))
        .count()
}

/// The scenario every test here runs: a daemon serving `channel` with a
/// `--dev-link`, the holder counting through the link (and with `profile`
/// sampling a profile), the daemon ended by `ending`, a new daemon on the
/// same mountpoint and link, the holder's reopen.
fn client_across_an_ending(channel: Channel, ending: Ending, profile: bool) {
    if !can_run() || !channel.available() {
        return;
    }
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("pfcntr");
    let link_arg = link.to_str().unwrap();
    let daemon = start(channel, None, &["--dev-link", link_arg]);
    let mountpoint = daemon.mountpoint.clone();
    assert_eq!(std::fs::read_link(&link).unwrap(), daemon.device);

    // The client in use: rounds counting (and, profiling, samples in the
    // buckets) before the daemon ends.
    let mut holder = Holder::start(&link, profile);
    let before = holder.wait_for("the holder's rounds", &daemon.log(), |out| {
        let rounds = rounds(out);
        rounds.len() >= 3 && (!profile || rounds.iter().any(|&(_, buckets)| buckets > 0))
    });
    let counted = rounds(&before);
    assert!(
        counted.last().unwrap().0 > counted.first().unwrap().0,
        "the holder's counts advance while it runs:\n{before}"
    );
    let old = Process::of(daemon.pid());
    let old_helpers = Process::children(old.pid, "pfmd-stores");
    assert_eq!(
        old_helpers.len(),
        1,
        "one store helper: {old_helpers:?}\n{}",
        daemon.log()
    );
    if profile {
        assert!(
            old.perf_events() > 0,
            "the old daemon samples the profile with perf events"
        );
    }

    let mut daemon = daemon;
    match ending {
        Ending::Kill => {
            daemon.signal(Signal::SIGKILL);
            let status = daemon.wait();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(libc::SIGKILL)
            );
            // Left behind: the dead mount and the link to it.
            assert_eq!(
                std::fs::read_link(&link).unwrap(),
                daemon.device,
                "a killed daemon leaves its link"
            );
            // (A stat still answers from the kernel's attribute cache.)
            let errno = std::fs::File::open(&link).unwrap_err().raw_os_error();
            assert!(
                errno.is_some_and(|e| channel.server_gone(e)),
                "an open through the link: the dead mount, not {errno:?}"
            );
        }
        Ending::Term => {
            let status = daemon.stop();
            assert!(
                status.success(),
                "SIGTERM with a client holding the device: {status}\n{}",
                daemon.log()
            );
            assert!(
                daemon
                    .log()
                    .contains("clients still hold the device: detaching the mount"),
                "{}",
                daemon.log()
            );
            assert!(
                std::fs::symlink_metadata(&link).is_err(),
                "SIGTERM removes the link"
            );
            assert_eq!(mounts_on(&mountpoint), 0, "the mount is detached");
        }
    }

    // The holder's next call fails, and so do the ones after until the
    // connection is plainly gone (ENOTCONN); it does not hang.
    let after = holder.wait_for("the holder's failed calls", &daemon.log(), |out| {
        ["\nsettled ", "\nunsettled", "\nagain ok"]
            .iter()
            .any(|end| out.contains(end))
    });
    let errnos: Vec<String> = after
        .lines()
        .filter(|l| {
            l.starts_with("failed ") || l.starts_with("again ") || l.starts_with("settled ")
        })
        .filter_map(|l| {
            Some(
                l.split_once("errno=")?
                    .1
                    .split_whitespace()
                    .next()?
                    .to_string(),
            )
        })
        .collect();
    eprintln!("{channel:?} {ending:?}: the holder's calls failed with {errnos:?}");
    assert!(
        after.contains("\nsettled "),
        "the calls settle on ENOTCONN:\n{after}\n{}",
        daemon.log()
    );
    let errno_of = |name: &str| match name {
        "ENOTCONN" => libc::ENOTCONN,
        "ECONNABORTED" => libc::ECONNABORTED,
        "ECANCELED" => libc::ECANCELED,
        _ => 0,
    };
    assert!(
        errnos.iter().all(|e| channel.server_gone(errno_of(e))),
        "{errnos:?}\n{after}\n{}",
        daemon.log()
    );

    // A new daemon on the same mountpoint and link, the old descriptor
    // still held.
    let daemon = start(channel, Some(daemon), &["--dev-link", link_arg]);
    let log = daemon.log();
    match ending {
        Ending::Kill => {
            assert!(log.contains("stale FUSE mount"), "{log}");
            // The old link points at the same path, which reaches the new
            // daemon's file now.
            assert!(
                log.contains("keeping the link a daemon that died left to this device"),
                "{log}"
            );
        }
        Ending::Term => assert!(!log.contains("stale FUSE mount"), "{log}"),
    }
    assert_eq!(mounts_on(&mountpoint), 1, "one mount, the new one: {log}");
    assert_eq!(std::fs::read_link(&link).unwrap(), daemon.device);
    std::fs::metadata(&link).expect("the link reaches the new device");

    // Nothing of the old daemon is left: its process (threads, perf events
    // and all) and its store helper (PR_SET_PDEATHSIG) are gone.
    assert!(!old.alive(), "the old daemon is gone");
    let deadline = Instant::now() + EVENT_WAIT;
    while old_helpers.iter().any(|h| h.alive()) {
        assert!(
            Instant::now() < deadline,
            "the old daemon's store helper {old_helpers:?} is still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let new = Process::of(daemon.pid());
    assert_eq!(
        new.perf_events(),
        0,
        "a new daemon with no open has no perf events"
    );

    // The holder closes its dead descriptor, reopens through the link and
    // counts its own CPU again.
    let (status, out) = holder.reopen(&daemon.log());
    assert!(status.success(), "{out}\n{}", daemon.log());
    let cntr0: u64 = field(&out, "reopened ", "cntr0").unwrap().parse().unwrap();
    let task_ns: u64 = field(&out, "reopened ", "task_ns")
        .unwrap()
        .parse()
        .unwrap();
    let buckets: u64 = field(&out, "reopened ", "buckets")
        .unwrap()
        .parse()
        .unwrap();
    // cycles = task-clock ns x MHz / 1000 (no PMU here: cpu-clock, on the
    // same clock as task-clock), one interrupt every 4096. The task-clock
    // window holds the enabled one: at most one more, and the ioctls at its
    // edges are little of 100 ms.
    let expected = task_ns as f64 * MHZ as f64 / 1000.0 / PERIOD as f64;
    eprintln!(
        "{channel:?} {ending:?}: reopened, {cntr0} interrupts vs {expected:.1} from task-clock"
    );
    assert!(
        cntr0 as f64 <= expected + 1.0 && cntr0 as f64 >= 0.9 * expected - 1.0,
        "reopened: {cntr0} interrupts vs {expected:.1} from the holder's task-clock:\n{out}"
    );
    if profile {
        assert!(buckets > 0, "the reopened profile samples:\n{out}");
    }
    assert_eq!(mounts_on(&mountpoint), 1);
    let mut daemon = daemon;
    assert!(daemon.stop().success(), "{}", daemon.log());
}

#[test]
fn sigkill_with_a_client_counting_classic() {
    client_across_an_ending(Channel::Classic, Ending::Kill, false);
}

#[test]
fn sigkill_with_a_client_counting_io_uring() {
    client_across_an_ending(Channel::Uring, Ending::Kill, false);
}

#[test]
fn sigterm_with_a_client_counting_classic() {
    client_across_an_ending(Channel::Classic, Ending::Term, false);
}

#[test]
fn sigterm_with_a_client_counting_io_uring() {
    client_across_an_ending(Channel::Uring, Ending::Term, false);
}

#[test]
fn sigkill_in_the_middle_of_a_profile_classic() {
    client_across_an_ending(Channel::Classic, Ending::Kill, true);
}

#[test]
fn sigkill_in_the_middle_of_a_profile_io_uring() {
    client_across_an_ending(Channel::Uring, Ending::Kill, true);
}

/// A link left by a killed daemon whose mount was elsewhere is replaced by
/// a daemon with another mountpoint: that mount is dead, although `stat`
/// through the link still answers from the kernel's attribute cache.
#[test]
fn a_link_to_a_killed_daemons_mount_elsewhere_is_replaced() {
    if !can_run() {
        return;
    }
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("pfcntr");
    let link_arg = link.to_str().unwrap();
    let mut killed = start(Channel::Classic, None, &["--dev-link", link_arg]);
    // Looked up once, so the kernel has its attributes cached.
    std::fs::metadata(&link).unwrap();
    killed.signal(Signal::SIGKILL);
    killed.wait();
    assert_eq!(std::fs::read_link(&link).unwrap(), killed.device);
    let other = start(Channel::Classic, None, &["--dev-link", link_arg]);
    assert!(
        other
            .log()
            .contains("replacing a link to a device that is gone"),
        "{}",
        other.log()
    );
    assert_eq!(std::fs::read_link(&link).unwrap(), other.device);
    let out = common::run(
        Command::new(common::c_program("ev4count"))
            .args(["-ms", "10"])
            .env("PFM_DEVICE", &link),
    );
    assert!(out.status.success(), "{}", common::text(&out));
}

/// A daemon served over io_uring goes in steps: for a while after it was
/// reaped the kernel is still tearing its connection down, and a request
/// to the mount then ends ECONNABORTED or ECANCELED rather than ENOTCONN.
/// A new daemon started at once, a client still holding the old device,
/// takes that mount for the dead one it is.
#[test]
fn restart_right_after_sigkill_io_uring() {
    if !can_run() || !Channel::Uring.available() {
        return;
    }
    let mut daemon = start(Channel::Uring, None, &[]);
    for round in 0..5 {
        let held = daemon
            .open(pfm_client::OpenMode::All)
            .unwrap_or_else(|e| panic!("round {round}: {e}\n{}", daemon.log()));
        daemon.signal(Signal::SIGKILL);
        daemon.wait();
        daemon = start(Channel::Uring, Some(daemon), &[]);
        assert!(
            daemon.log().contains("stale FUSE mount"),
            "round {round}: {}",
            daemon.log()
        );
        let errno = held.info().unwrap_err().errno().map(|e| e as i32);
        assert!(
            errno.is_some_and(|e| Channel::Uring.server_gone(e)),
            "round {round}: the held device after the kill: {errno:?}"
        );
        drop(held);
        assert_eq!(mounts_on(&daemon.mountpoint), 1, "round {round}");
    }
    assert!(daemon.stop().success(), "{}", daemon.log());
}
