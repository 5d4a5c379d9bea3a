//! What the benchmark binaries share: starting and stopping the pfmd next
//! to them on a private mount, the online CPUs, binding a thread to one.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts the pfmd next to this binary on `dir/<name>` (FUSE, no device
/// link), with `args`, bound to `cpu` if given (through `taskset`); `None`,
/// and why on stderr, if it does not come up.
pub fn start_pfmd(
    dir: &Path,
    name: &str,
    args: &[&str],
    cpu: Option<usize>,
) -> Option<(Child, PathBuf)> {
    let pfmd = std::env::current_exe().ok()?.with_file_name("pfmd");
    let mountpoint = dir.join(name);
    let mut command = match cpu {
        Some(cpu) => {
            let mut taskset = Command::new("taskset");
            taskset.args(["-c", &cpu.to_string()]).arg(&pfmd);
            taskset
        }
        None => Command::new(&pfmd),
    };
    command
        .args(["--transport", "fuse", "--dev-link", "none", "--mountpoint"])
        .arg(&mountpoint)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    let mut child = command.spawn().ok()?;
    let device = mountpoint.join("pfcntr");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::metadata(&device).is_err() {
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            eprintln!("pfmd {args:?} did not come up");
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((child, device))
}

/// SIGTERM, and wait for it to go.
pub fn stop_pfmd(mut child: Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
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
pub fn pin_to(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).expect("a CPU number");
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).expect("sched_setaffinity");
}
