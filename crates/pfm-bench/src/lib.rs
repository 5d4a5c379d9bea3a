//! What the benchmark binaries share: starting and stopping the pfmd next
//! to them on a private mount.

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
