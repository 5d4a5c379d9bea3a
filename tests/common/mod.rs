//! Integration-test harness: start a real pfmd on a private FUSE mount, build
//! the C clients with gcc, run them, stop the daemon.
#![allow(dead_code)] // each test binary uses its own part of the harness

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const CRATE: &str = env!("CARGO_MANIFEST_DIR");

/// True when the test can do what it needs (root, /dev/fuse); else it prints
/// why and the caller returns. CI runs as root on a machine with /dev/fuse.
pub fn can_run() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP: integration tests need root (FUSE mounts, perf system-wide counting)");
        return false;
    }
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP: /dev/fuse is missing");
        return false;
    }
    true
}

pub struct Daemon {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub mountpoint: PathBuf,
    pub device: PathBuf,
    pub stderr_path: PathBuf,
}

impl Daemon {
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
        // FUSE explicitly: on a CI host with CUSE, auto would pick CUSE.
        let mut args: Vec<String> = vec![
            "--transport".into(),
            "fuse".into(),
            "--mountpoint".into(),
            mountpoint.display().to_string(),
        ];
        if !extra.contains(&"--dev-link") {
            args.extend(["--dev-link".into(), "none".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Command::new(env!("CARGO_BIN_EXE_pfmd"))
            .args(&args)
            .env("RUST_LOG", "debug")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn pfmd");
        let device = mountpoint.join("pfcntr");
        let mut daemon = Daemon {
            child: Some(child),
            dir,
            mountpoint,
            device,
            stderr_path,
        };
        daemon.wait_ready();
        daemon
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::fs::metadata(&self.device).is_ok() && self.log().contains("pfmd ready") {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("pfmd exited early with {status}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("pfmd did not become ready:\n{}", self.log());
    }

    pub fn log(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.stderr_path) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal).unwrap();
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait()
    }

    pub fn wait(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("daemon already stopped");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("pfmd did not exit:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // A crashed daemon leaves a dead mount; never leave one behind.
        let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Builds `examples/c/<name>.c` with gcc once per test binary; returns the
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
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| pfmd::device::caller::parse_cpu_list(&s))
        .map_or(1, |v| v.len())
}

pub fn configured_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) as usize }
}

/// One writable page followed by a PROT_NONE guard page.
pub struct GuardedPage {
    base: *mut u8,
}

impl GuardedPage {
    pub fn new() -> Self {
        // SAFETY: a fresh anonymous mapping of two pages; the second is made
        // inaccessible so writes past the first fault.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            assert_eq!(
                libc::mprotect(base.cast::<u8>().add(4096).cast(), 4096, libc::PROT_NONE),
                0
            );
            GuardedPage { base: base.cast() }
        }
    }

    /// The address where the guard page begins.
    pub fn end(&self) -> usize {
        self.base as usize + 4096
    }

    pub fn read<T: Copy>(&self, offset: usize) -> T {
        assert!(offset + size_of::<T>() <= 4096);
        // SAFETY: within the writable page, read unaligned.
        unsafe { std::ptr::read_unaligned(self.base.add(offset).cast::<T>()) }
    }
}

impl Drop for GuardedPage {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.base.cast(), 8192) };
    }
}

// ---- ioctls as a legacy client makes them ----
use pfmd::ioctl::numbers as n;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

pub fn open_device(daemon: &Daemon, mode: i32) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(mode)
        .open(&daemon.device)
}

/// `ioctl(fd, cmd, arg)` as a legacy client makes it.
pub fn ioctl(file: &File, cmd: u32, arg: *mut libc::c_void) -> Result<(), nix::errno::Errno> {
    // SAFETY: every `arg` below points at live memory of the size the command
    // declares, or is deliberately bad to provoke EFAULT from the daemon,
    // which never lets the kernel dereference it (restricted FUSE ioctl).
    let r = unsafe { libc::ioctl(file.as_raw_fd(), cmd as libc::c_ulong, arg) };
    if r < 0 {
        Err(nix::errno::Errno::last())
    } else {
        Ok(())
    }
}

pub fn ioctl_long(file: &File, cmd: u32, mut value: u64) -> Result<(), nix::errno::Errno> {
    ioctl(file, cmd, (&mut value as *mut u64).cast())
}

pub fn info(file: &File) -> pfmd::ioctl::abi::PfmInfo {
    let mut info = pfmd::ioctl::abi::PfmInfo::default();
    ioctl(
        file,
        n::PCNTGETINFO,
        (&mut info as *mut pfmd::ioctl::abi::PfmInfo).cast(),
    )
    .unwrap();
    info
}

/// Builds C source given inline (a test's own workload) with gcc and
/// `flags`, once per test binary and name; returns the executable.
pub fn c_source(name: &str, source: &str, flags: &[&str]) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = c_program_dir();
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

/// The directory `c_program` builds into (world-readable).
pub fn c_program_dir() -> PathBuf {
    c_program("ev4count").parent().unwrap().to_path_buf()
}

/// `pfmprof` pointed at this daemon's device.
pub fn pfmprof(daemon: &Daemon) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pfmprof"));
    cmd.env("PFM_DEVICE", &daemon.device);
    cmd
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

/// `program` run as nobody (uid and gid 65534, no groups): an unprivileged
/// caller for the contract's §8 checks. Add the arguments.
pub fn as_nobody(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(program);
    cmd
}
