//! Running a pfmd next to a test or a benchmark: the one harness the
//! integration tests (`tests/common`) and the benchmark binaries
//! (`pfm-bench`) share. A private FUSE mount, no device link, optionally
//! bound to one CPU; ready when the device node is there and the caller's
//! own readiness check (the log's ready line, where it keeps one) passes;
//! stopped with SIGTERM, then SIGKILL after a grace period.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a pfmd gets to come up: generous, as CI hosts are shared.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a pfmd did not come up.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("pfmd could not be started: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("pfmd exited early with {0}")]
    Exited(ExitStatus),
    #[error("pfmd did not become ready within {0:?}")]
    Timeout(Duration),
}

/// A pfmd to start: the binary, its FUSE mount and what else it is told.
pub struct Launch<'a> {
    pub pfmd: &'a Path,
    pub mountpoint: &'a Path,
    pub args: &'a [&'a str],
    pub envs: &'a [(&'a str, &'a OsStr)],
    /// Bind the daemon to this CPU (`taskset -c`).
    pub cpu: Option<usize>,
    pub stderr: Stdio,
}

impl Launch<'_> {
    /// The device node the daemon will serve.
    pub fn device(&self) -> PathBuf {
        self.mountpoint.join("pfcntr")
    }

    /// Starts the daemon, over FUSE explicitly (on a host with CUSE, `auto`
    /// would pick CUSE) and with no device link unless `args` name one.
    pub fn spawn(self) -> std::io::Result<Child> {
        let mut command = match self.cpu {
            Some(cpu) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", &cpu.to_string()]).arg(self.pfmd);
                taskset
            }
            None => Command::new(self.pfmd),
        };
        command
            .args(["--transport", "fuse", "--mountpoint"])
            .arg(self.mountpoint);
        if !self.args.contains(&"--dev-link") {
            command.args(["--dev-link", "none"]);
        }
        command
            .args(self.args)
            .envs(self.envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.stderr)
            .spawn()
    }
}

/// Waits until `device` exists and `ready()` holds; fails if the daemon
/// exits first or `timeout` passes.
pub fn wait_ready(
    child: &mut Child,
    device: &Path,
    timeout: Duration,
    ready: impl Fn() -> bool,
) -> Result<(), NotReady> {
    let deadline = Instant::now() + timeout;
    loop {
        if std::fs::metadata(device).is_ok() && ready() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            return Err(NotReady::Exited(status));
        }
        if Instant::now() > deadline {
            return Err(NotReady::Timeout(timeout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM, then SIGKILL if it has not exited within `grace`; the exit
/// status, `None` where it had to be killed.
pub fn terminate(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    let exited = wait_for_exit(child, grace);
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    exited
}

/// The exit status once `child` exits, `None` if it runs past `timeout`.
pub fn wait_for_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The CPUs online now (`/sys/devices/system/cpu/online`), else CPU 0.
pub fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            cpus.extend(a..=b);
        }
    }
    if cpus.is_empty() { vec![0] } else { cpus }
}

/// Binds the calling thread to `cpu` (what a `PCNTOPENONE` open needs).
pub fn pin_to(cpu: usize) -> nix::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    nix::sched::sched_setaffinity(Pid::from_raw(0), &set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn online_cpus_include_the_one_this_runs_on() {
        let here = nix::sched::sched_getcpu().unwrap();
        assert!(online_cpus().contains(&here), "{:?}", online_cpus());
    }

    #[test]
    fn a_daemon_that_exits_at_once_is_not_ready() {
        let mut child = Command::new("true").spawn().unwrap();
        let got = wait_ready(&mut child, Path::new("/nonexistent"), READY_TIMEOUT, || {
            true
        });
        assert!(
            matches!(got, Err(NotReady::Exited(s)) if s.success()),
            "{got:?}"
        );
    }
}
