//! pfmd's development tasks, as a library the integration tests call and as
//! the `cargo xtask` binary.
//!
//! - [`vm`]: boot a throwaway qemu VM with a stock Debian kernel and a
//!   busybox initramfs, run one command in it and get its output and exit
//!   status. x86_64 guests have `/dev/cuse`; aarch64 guests have an emulated
//!   ARMv8 PMU (`armv8_pmuv3`), so hardware perf events open there.
//! - [`aarch64`]: build the workspace for `aarch64-unknown-linux-gnu` in a
//!   cached Debian chroot (the host toolchain has no aarch64 std).
//! - [`ci`]: the skip-or-fail rule for tests whose environment cannot run.
//! - [`guest`]: the `run NAME CMD` step convention of guest scripts.
//! - [`selftest`]: end-to-end checks of the VMs (`cargo xtask vm-selftest`).
//! - [`pfmd`]: a pfmd on a private mount next to a test or a benchmark (the
//!   harness `tests/common` and `pfm-bench` share).
//!
//! Everything downloaded or built is cached under [`cache_dir`].

pub mod aarch64;
pub mod ci;
pub mod guest;
pub mod host;
mod layout;
pub mod pfmd;
pub mod selftest;
pub mod vm;

use std::path::PathBuf;

/// The environment variable that moves the cache (kernels, initramfs bases,
/// the aarch64 chroot) away from `target/vm-cache`, e.g. to share it between
/// clones.
pub const CACHE_ENV: &str = "PFM_VM_CACHE";

/// The repository this crate belongs to: `xtask/` is one of its members.
pub fn repo_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or(manifest_dir)
}

/// Where downloads and built artefacts are kept: `$PFM_VM_CACHE`, else
/// `<repo>/target/vm-cache` (so `cargo clean` drops it too).
pub fn cache_dir() -> PathBuf {
    match std::env::var_os(CACHE_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo_root().join("target").join("vm-cache"),
    }
}
