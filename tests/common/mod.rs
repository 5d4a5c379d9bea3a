//! Integration-test harness: start a real pfmd on a private FUSE mount, build
//! the C clients with gcc, run them, stop the daemon.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The workspace root.
pub const CRATE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// A binary of the workspace (`pfmd`, `pfmstat`, ...), as built for this
/// test run. Integration tests live in their own package, where Cargo does
/// not build the other packages' binaries, so the first call builds them
/// all, into the target directory and profile this test binary came from.
pub fn bin(name: &str) -> PathBuf {
    static PROFILE_DIR: OnceLock<PathBuf> = OnceLock::new();
    PROFILE_DIR
        .get_or_init(|| {
            // target/<profile>/deps/<test binary>
            let exe = std::env::current_exe().expect("the test binary's path");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("a test binary lives in target/<profile>/deps")
                .to_path_buf();
            let target_dir = profile_dir.parent().expect("target/<profile>");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut build = Command::new(cargo);
            build
                .args(["build", "--workspace", "--bins", "--quiet"])
                .arg("--manifest-path")
                .arg(Path::new(CRATE).join("Cargo.toml"))
                .arg("--target-dir")
                .arg(target_dir);
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                build.arg("--release");
            }
            let status = build.status().expect("run cargo build for the binaries");
            assert!(
                status.success(),
                "cargo build of the workspace binaries failed"
            );
            profile_dir
        })
        .join(name)
}

/// True when the test can do what it needs (root, /dev/fuse). Otherwise the
/// test is skipped loudly (`SKIPPED: ...`, counted by `.ci/run`), or fails
/// under `CI=true`, and the caller returns.
pub fn can_run() -> bool {
    let missing = if !nix::unistd::geteuid().is_root() {
        Some("integration tests need root (FUSE mounts, perf system-wide counting)")
    } else if !Path::new("/dev/fuse").exists() {
        Some("/dev/fuse is missing")
    } else {
        None
    };
    match missing {
        Some(why) => {
            let test = std::thread::current()
                .name()
                .unwrap_or("an integration test")
                .to_string();
            xtask::ci::skip_or_fail(&test, why);
            false
        }
        None => true,
    }
}

pub struct Daemon {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub mountpoint: PathBuf,
    pub device: PathBuf,
    pub stderr_path: PathBuf,
    /// Detach whatever is mounted on the mountpoint when dropped; off once
    /// [`Daemon::restart`] hands the mountpoint to the next daemon.
    detach_on_drop: bool,
}

/// The FUSE channel a daemon serves over: each behaviour test runs over
/// both ([`over_each_fuse_channel!`]); CUSE runs in the VM (`cuse_vm.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Reader threads on `/dev/fuse` (`--fuse-uring off`).
    Classic,
    /// A ring per CPU (`--fuse-uring on`, `enable_uring` set for its start).
    Uring,
}

impl Channel {
    /// True where this kernel can serve the channel; else the test is
    /// skipped loudly (a failure under `CI=true`) and the caller returns.
    pub fn available(self) -> bool {
        if self == Channel::Classic || Path::new(ENABLE_URING).exists() {
            return true;
        }
        let test = std::thread::current()
            .name()
            .unwrap_or("an io_uring test")
            .to_string();
        xtask::ci::skip_or_fail(
            &test,
            format!("{ENABLE_URING} missing (kernel without CONFIG_FUSE_IO_URING)"),
        );
        false
    }
}

/// Two tests for a behaviour test `fn NAME(channel: Channel)`:
/// `NAME::classic` and `NAME::io_uring`, each skipped (failed under
/// `CI=true`) where its channel is not available.
#[macro_export]
macro_rules! over_each_fuse_channel {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn classic() {
                if $crate::common::Channel::Classic.available() {
                    super::$name($crate::common::Channel::Classic);
                }
            }
            #[test]
            fn io_uring() {
                if $crate::common::Channel::Uring.available() {
                    super::$name($crate::common::Channel::Uring);
                }
            }
        }
    )+};
}

impl Daemon {
    /// Starts over `channel` with `extra`.
    pub fn on(channel: Channel, extra: &[&str]) -> Daemon {
        Self::on_env(channel, extra, &[])
    }

    /// Starts over `channel` with `extra` and environment variables; checks
    /// that the channel asked for is the one that serves.
    pub fn on_env(channel: Channel, extra: &[&str], envs: &[(&str, &std::ffi::OsStr)]) -> Daemon {
        let choice = match channel {
            Channel::Classic => "off",
            Channel::Uring => "on",
        };
        let args: Vec<&str> = ["--fuse-uring", choice]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let guard = (channel == Channel::Uring).then(EnableUring::set);
        let daemon = Self::start_env(&args, envs);
        if let Some(guard) = guard {
            guard.restore_checked();
        }
        let log = daemon.log();
        let serving = match channel {
            Channel::Classic => "classic channel",
            Channel::Uring => "served over io_uring",
        };
        assert!(log.contains(serving), "{channel:?}: {log}");
        daemon
    }

    pub fn start(extra: &[&str]) -> Daemon {
        Self::start_env(extra, &[])
    }

    /// Starts with extra environment variables.
    pub fn start_env(extra: &[&str], envs: &[(&str, &std::ffi::OsStr)]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("pfmd-test")
            .tempdir()
            .unwrap();
        // Unprivileged clients must be able to reach the mount.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mountpoint = dir.path().join("mnt");
        Self::launch(dir, mountpoint, extra, envs)
    }

    /// Starts on an existing directory (restart tests).
    pub fn start_at(dir: tempfile::TempDir, mountpoint: PathBuf, extra: &[&str]) -> Daemon {
        Self::launch(dir, mountpoint, extra, &[])
    }

    fn launch(
        dir: tempfile::TempDir,
        mountpoint: PathBuf,
        extra: &[&str],
        envs: &[(&str, &std::ffi::OsStr)],
    ) -> Daemon {
        let stderr_path = dir
            .path()
            .join(format!("pfmd-{}.log", Instant::now().elapsed().as_nanos()));
        let log = std::fs::File::create(&stderr_path).unwrap();
        let envs: Vec<(&str, &std::ffi::OsStr)> = [("RUST_LOG", "debug".as_ref())]
            .into_iter()
            .chain(envs.iter().copied())
            .collect();
        let launch = xtask::pfmd::Launch {
            pfmd: &bin("pfmd"),
            mountpoint: &mountpoint,
            args: extra,
            envs: &envs,
            cpu: None,
            stderr: log.into(),
        };
        let device = launch.device();
        let child = launch.spawn().expect("spawn pfmd");
        let mut daemon = Daemon {
            child: Some(child),
            dir,
            mountpoint,
            device,
            stderr_path,
            detach_on_drop: true,
        };
        daemon.wait_ready();
        daemon
    }

    fn wait_ready(&mut self) {
        let child = self.child.as_mut().unwrap();
        let ready =
            xtask::pfmd::wait_ready(child, &self.device, xtask::pfmd::READY_TIMEOUT, || {
                read_log(&self.stderr_path).contains("pfmd ready")
            });
        if let Err(e) = ready {
            panic!("{e}:\n{}", self.log());
        }
    }

    pub fn log(&self) -> String {
        read_log(&self.stderr_path)
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal).unwrap();
    }

    /// Starts a new daemon with `extra` on this one's directory and
    /// mountpoint, once this one has exited (restart tests): whatever the
    /// old one left there (a dead mount, a stale link) stays for the new
    /// one to find.
    pub fn restart(mut self, extra: &[&str]) -> Daemon {
        assert!(
            self.child.is_none(),
            "restart: wait for the old daemon to exit first"
        );
        self.detach_on_drop = false;
        let placeholder = tempfile::tempdir().unwrap();
        let dir = std::mem::replace(&mut self.dir, placeholder);
        Daemon::start_at(dir, self.mountpoint.clone(), extra)
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait()
    }

    pub fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("daemon already stopped");
        // Generous: on a loaded host a killed daemon's ring threads, pinned
        // to busy CPUs, can take many seconds to run their exit.
        match xtask::pfmd::wait_for_exit(&mut child, Duration::from_secs(60)) {
            Some(status) => status,
            None => {
                let _ = child.kill();
                panic!("pfmd did not exit:\n{}", self.log());
            }
        }
    }

    /// Opens this daemon's device in `mode`.
    pub fn open(
        &self,
        mode: pfm_client::OpenMode,
    ) -> Result<pfm_client::Device, pfm_client::Error> {
        pfm_client::Device::open(&self.device, mode)
    }

    /// A C client's environment pointing it at this daemon.
    pub fn client(&self, program: &str) -> Command {
        let mut cmd = Command::new(c_program(program));
        cmd.env("PFM_DEVICE", &self.device);
        cmd
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            xtask::pfmd::terminate(&mut child, Duration::from_secs(10));
        }
        // A crashed daemon leaves a dead mount; never leave one behind.
        if self.detach_on_drop {
            let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Builds `examples/c/<name>.c` with gcc once per test run; returns the
/// executable. World-readable, so unprivileged runs can execute it.
pub fn c_program(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    });
    let exe = dir.join(name);
    if !exe.exists() {
        let source = Path::new(CRATE)
            .join("examples/c")
            .join(format!("{name}.c"));
        let tmp = dir
            .join(format!("{name}.tmp{:?}", std::thread::current().id()).replace(['(', ')'], ""));
        let out = Command::new("gcc")
            .args(["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(Path::new(CRATE).join("include"))
            .arg("-o")
            .arg(&tmp)
            .arg(&source)
            .output()
            .expect("run gcc");
        assert!(
            out.status.success(),
            "gcc {}:\n{}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &exe).unwrap();
    }
    exe
}

/// Runs a command, returning its output; panics with everything if it cannot start.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

pub fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `key=value` pairs of the first stdout line that has `cpu=<which>`.
pub fn counts_line(stdout: &str, which: &str) -> Option<std::collections::HashMap<String, u64>> {
    let line = stdout
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == format!("cpu={which}")))?;
    Some(
        line.split_whitespace()
            .filter_map(|w| w.split_once('='))
            .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
            .collect(),
    )
}

pub fn value(stdout: &str, key: &str) -> Option<u64> {
    stdout.split_whitespace().find_map(|w| {
        w.strip_prefix(&format!("{key}="))
            .and_then(|v| v.parse().ok())
    })
}

pub fn online_cpus() -> usize {
    xtask::pfmd::online_cpus().len()
}

fn read_log(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

pub fn configured_cpus() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF)
        .ok()
        .flatten()
        .map_or(1, |n| n as usize)
}

/// [`c_source`] of a client of the device: `<sys/pfcntr.h>` from this
/// repository's `include/`, then `flags`.
pub fn client_source(name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let include = format!("-I{CRATE}/include");
    let flags: Vec<&str> = std::iter::once(include.as_str())
        .chain(flags.iter().copied())
        .collect();
    c_source(name, source, &flags)
}

/// Builds C source given inline (a test's own workload) with gcc and
/// `flags`, once per test run, name and source; returns the executable.
/// Suites may use one name for different programs (each suite's `work`):
/// each source gets a directory of its own, and keeps its name.
pub fn c_source(name: &str, source: &str, flags: &[&str]) -> PathBuf {
    use std::hash::{Hash, Hasher};
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (source, flags).hash(&mut hasher);
    let dir = c_program_dir().join(format!("{:08x}", hasher.finish() as u32));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join(name);
    if !exe.exists() {
        let src = dir.join(format!("{name}.c"));
        std::fs::write(&src, source).unwrap();
        let out = Command::new("gcc")
            .args(["-std=gnu99", "-O1", "-g", "-Wall", "-Werror"])
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("run gcc");
        assert!(
            out.status.success(),
            "gcc {name}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    exe
}

/// C for a workload that reports its own CPU time: `task_clock_ns()` reads
/// perf's task-clock of the calling thread (opened on first use, again after
/// fork). Without a PMU pfmd's cycles are cpu-clock time, which runs on the
/// same clock as task-clock; `clock_gettime(CLOCK_*_CPUTIME_ID)` does not:
/// the scheduler leaves steal time out of it, so on a host whose other guests
/// take the CPU (CI) cpu-clock runs 10-50% ahead of it. Measured in the same
/// window on the same clock, the reference holds however loaded the host is.
pub const TASK_CLOCK_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static long long task_clock_ns(void) {
	static int fd = -1;
	static long owner;
	long tid = syscall(SYS_gettid);
	if (fd < 0 || owner != tid) {
		struct perf_event_attr a;
		memset(&a, 0, sizeof a);
		a.type = PERF_TYPE_SOFTWARE;
		a.size = sizeof a;
		a.config = PERF_COUNT_SW_TASK_CLOCK;
		fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
		if (fd < 0 && (errno == EACCES || errno == EPERM)) {
			/* Unprivileged under perf_event_paranoid 2: user mode only
			 * (a time event counts the same either way). */
			a.exclude_kernel = a.exclude_hv = 1;
			fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
		}
		if (fd < 0) { perror("perf_event_open(task-clock)"); exit(3); }
		owner = tid;
	}
	long long v;
	if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) { perror("read(task-clock)"); exit(3); }
	return v;
}
"#;

/// `source` with [`TASK_CLOCK_C`] before it.
pub fn with_task_clock(source: &str) -> String {
    format!("{TASK_CLOCK_C}{source}")
}

/// The directory `c_program` builds into (world-readable).
pub fn c_program_dir() -> PathBuf {
    c_program("ev4count").parent().unwrap().to_path_buf()
}

/// `pfmprof` pointed at this daemon's device.
/// The tool `name` (pfmstat, pfmprof) pointed at `daemon`'s device.
pub fn tool(name: &str, daemon: &Daemon) -> Command {
    let mut cmd = Command::new(bin(name));
    cmd.env("PFM_DEVICE", &daemon.device);
    cmd
}

pub fn pfmprof(daemon: &Daemon) -> Command {
    tool("pfmprof", daemon)
}

/// `perf stat -e task-clock -- PROGRAM`: an independent reading of the CPU
/// time of a program and everything it starts. Add the program's arguments.
pub fn under_perf_stat(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("perf");
    cmd.args(["stat", "-x,", "-e", "task-clock", "--"])
        .arg(program);
    cmd
}

/// The task-clock milliseconds `perf stat -x,` printed on stderr.
pub fn task_clock_ms(output: &Output) -> f64 {
    let stderr = String::from_utf8_lossy(&output.stderr);
    stderr
        .lines()
        .find(|l| l.contains("task-clock"))
        .and_then(|l| l.split(',').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no task-clock in perf output:\n{stderr}"))
}

/// The host's `kernel.perf_event_paranoid`.
pub fn paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .expect("perf_event_paranoid")
        .trim()
        .parse()
        .expect("a number")
}

/// `setpriv`'s arguments that run the next word as nobody (uid and gid
/// 65534, no groups).
pub const AS_NOBODY: [&str; 4] = ["--reuid=65534", "--regid=65534", "--clear-groups", "--"];

/// `program` run as nobody: an unprivileged caller for docs/device.md §8
/// checks. Add the arguments.
pub fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(AS_NOBODY).arg(program);
    cmd
}

/// Polls `done` every 50 ms until it holds; fails naming `what` (and what
/// `context` says then) after `timeout`.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < timeout,
            "{what} within {timeout:?}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// FUSE over io_uring: the kernel offers it to a connection only while
/// this module parameter is `Y`; a connection that negotiated it keeps it.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// The tests of this binary start their daemons one at a time, so one
/// test's restore cannot land inside another's start.
pub static URING_PARAMETER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Sets `enable_uring` and puts the previous value back when dropped (on
/// panic too), so a failing test does not leave it changed.
/// Holds [`URING_PARAMETER`] meanwhile, so that one test's restore cannot
/// land inside another's start.
pub struct EnableUring {
    previous: String,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl EnableUring {
    pub fn set() -> EnableUring {
        let _one_at_a_time = URING_PARAMETER.lock().unwrap_or_else(|e| e.into_inner());
        let previous = std::fs::read_to_string(ENABLE_URING)
            .unwrap_or_else(|e| panic!("reading {ENABLE_URING}: {e}"));
        std::fs::write(ENABLE_URING, "Y").unwrap_or_else(|e| panic!("writing {ENABLE_URING}: {e}"));
        EnableUring {
            previous,
            _one_at_a_time,
        }
    }
}

impl EnableUring {
    /// Puts the previous value back and checks that it took, before another
    /// test may change it.
    pub fn restore_checked(self) {
        let previous = self.previous.trim().to_string();
        std::fs::write(ENABLE_URING, &previous).unwrap();
        let now = std::fs::read_to_string(ENABLE_URING).unwrap();
        assert_eq!(now.trim(), previous, "{ENABLE_URING} restored");
    }
}

impl Drop for EnableUring {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(ENABLE_URING, self.previous.trim()) {
            eprintln!(
                "could not restore {ENABLE_URING} to {}: {e}",
                self.previous.trim()
            );
        }
    }
}

/// A 32-bit caller without libc (no multilib needed): opens `DEVICE`
/// (`-DDEVICE='"path"'`, else `/dev/pfcntr`), makes one `PCNTRENABLE`, and
/// exits with the errno it got (25: `ENOTTY`), or 100 if the open failed.
pub const COMPAT32_C: &str = r#"
#ifndef DEVICE
#define DEVICE "/dev/pfcntr"
#endif
static int sys3(int nr, int a, int b, int c)
{
	int ret;
	__asm__ volatile ("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
	return ret;
}
void _start(void)
{
	int fd = sys3(5, (int)DEVICE, 0, 0);		/* open */
	int r = fd < 0 ? 100 : sys3(54, fd, 0x5001, 0);	/* ioctl PCNTRENABLE */
	sys3(1, r < 0 ? -r : r, 0, 0);				/* exit */
	for (;;)
		;
}
"#;

/// [`COMPAT32_C`] built for `device`; None (after `skip_or_fail`) where gcc
/// cannot build 32-bit code.
pub fn compat32_program(device: &Path) -> Option<PathBuf> {
    let dir = tempfile::Builder::new()
        .prefix("compat32")
        .tempdir()
        .unwrap()
        .keep();
    let source = dir.join("compat32.c");
    std::fs::write(&source, COMPAT32_C).unwrap();
    let exe = dir.join("compat32");
    let out = Command::new("gcc")
        .args([
            "-m32",
            "-static",
            "-nostdlib",
            "-ffreestanding",
            "-fno-pic",
            "-fno-stack-protector",
            "-O1",
        ])
        .arg(format!("-DDEVICE=\"{}\"", device.display()))
        .arg("-o")
        .arg(&exe)
        .arg(&source)
        .output();
    match out {
        Ok(out) if out.status.success() => Some(exe),
        Ok(out) => {
            xtask::ci::skip_or_fail(
                "a 32-bit caller",
                format!(
                    "gcc -m32 -nostdlib failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            );
            None
        }
        Err(e) => {
            xtask::ci::skip_or_fail("a 32-bit caller", format!("cannot run gcc: {e}"));
            None
        }
    }
}
