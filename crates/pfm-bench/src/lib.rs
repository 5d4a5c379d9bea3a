//! What the benchmark binaries share: the pfmd next to them on a private
//! mount, through the harness the integration tests use too
//! (`xtask::pfmd`), and binding a thread to one CPU.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;
use xtask::pfmd::{Launch, READY_TIMEOUT};

pub use xtask::pfmd::online_cpus;

/// Starts the pfmd next to this binary on `dir/<name>` (FUSE, no device
/// link), with `args`, bound to `cpu` if given; `None`, and why on stderr,
/// if it does not come up.
pub fn start_pfmd(
    dir: &Path,
    name: &str,
    args: &[&str],
    cpu: Option<usize>,
) -> Option<(Child, PathBuf)> {
    let pfmd = std::env::current_exe().ok()?.with_file_name("pfmd");
    let mountpoint = dir.join(name);
    let launch = Launch {
        pfmd: &pfmd,
        mountpoint: &mountpoint,
        args,
        envs: &[("RUST_LOG", "warn".as_ref())],
        cpu,
        stderr: Stdio::inherit(),
    };
    let device = launch.device();
    let mut child = match launch.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("pfmd {args:?}: {e}");
            return None;
        }
    };
    // At `warn` the log has no ready line: the device node is the sign.
    if let Err(e) = xtask::pfmd::wait_ready(&mut child, &device, READY_TIMEOUT, || true) {
        eprintln!("pfmd {args:?} did not come up: {e}");
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    Some((child, device))
}

/// SIGTERM, and wait for it to go (killed after a minute).
pub fn stop_pfmd(mut child: Child) {
    xtask::pfmd::terminate(&mut child, Duration::from_secs(60));
}

/// Binds the calling thread to `cpu` (what a `PCNTOPENONE` open needs).
pub fn pin_to(cpu: usize) {
    xtask::pfmd::pin_to(cpu).expect("sched_setaffinity");
}
