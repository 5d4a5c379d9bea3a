//! What the device's unit tests share: a device over the mock backend,
//! callers with known credentials, and ioctls as the transport hands them in.

use crate::backend::mock::MockBackend;
use crate::device::budget::Limits;
use crate::device::{Device, DeviceConfig, FileId, IoctlReply};
use crate::policy::{Caller, Credentials, SecurityPolicy};
use nix::errno::Errno;
use pfm_abi::numbers as n;
use pfm_model::{EventMap, Implementation};
use std::sync::Arc;

/// 1 GHz: one nanosecond of cpu-clock is one cycle.
pub const KHZ_1GHZ: u64 = 1_000_000;
/// Kernel text of the test devices.
pub const KERNEL_TEXT: (u64, u64) = (0xffff_8000_0000_0000, 0xffff_8000_0100_0000);

/// A two-CPU device emulating `model` at `perf_event_paranoid` = `paranoid`.
pub fn device(model: Implementation, backend: &MockBackend, paranoid: i32) -> Device {
    device_with_limits(model, backend, paranoid, Limits::default())
}

/// As [`device`], with these budgets.
pub fn device_with_limits(
    model: Implementation,
    backend: &MockBackend,
    paranoid: i32,
    limits: Limits,
) -> Device {
    build(model, backend, paranoid, limits, 2, vec![0, 1])
}

/// As [`device`], with `configured` CPUs of which `online` are online.
pub fn device_with_cpus(
    model: Implementation,
    backend: &MockBackend,
    paranoid: i32,
    configured: usize,
    online: Vec<u32>,
) -> Device {
    build(
        model,
        backend,
        paranoid,
        Limits::default(),
        configured,
        online,
    )
}

fn build(
    model: Implementation,
    backend: &MockBackend,
    paranoid: i32,
    limits: Limits,
    configured_cpus: usize,
    online_cpus: Vec<u32>,
) -> Device {
    Device::new(
        DeviceConfig {
            implementation: model,
            cpu_khz: KHZ_1GHZ,
            configured_cpus,
            online_cpus,
            policy: SecurityPolicy {
                allow_gid: None,
                paranoid_override: Some(paranoid),
            },
            event_map: EventMap::default(),
            max_profile_bytes: 1 << 20,
            limits,
            kernel_text: Some(KERNEL_TEXT),
            // Every read of two CPUs or more through the reader threads, so
            // the unit tests cover them.
            parallel_reads: 2,
        },
        Arc::new(backend.clone()),
    )
}

/// A caller in the initial user namespace; uid 0 has every capability, as
/// root normally does.
pub fn caller(tid: i32, euid: u32, cpus: Vec<u32>) -> Caller {
    Caller::with_credentials(
        tid,
        Credentials {
            tgid: tid,
            uid: euid,
            gid: euid,
            euid,
            egid: euid,
            cap_effective: if euid == 0 { u64::MAX } else { 0 },
            cpus_allowed: cpus,
            initial_user_namespace: true,
            ..Credentials::default()
        },
    )
}

pub fn root(tid: i32) -> Caller {
    caller(tid, 0, vec![0, 1])
}

pub fn user(tid: i32, cpus: Vec<u32>) -> Caller {
    caller(tid, 1000, cpus)
}

/// `ioctl(fd, cmd, &arg)`: the kernel hands in `_IOC_SIZE` bytes only for
/// `_IOW`/`_IOWR` commands.
pub fn ioctl(d: &Device, f: FileId, c: &Caller, cmd: u32, arg: u64) -> Result<IoctlReply, Errno> {
    let input = if n::dir(cmd) & n::IOC_WRITE != 0 {
        n::size(cmd) as usize
    } else {
        0
    };
    d.ioctl(f, c, cmd, &arg.to_ne_bytes()[..input])
        .map_err(|e| e.errno())
}
