//! One fuzz input: a run of operations on a fresh four-CPU device of one
//! model over the mock backend. The bytes decode (through `arbitrary`) into
//! opens, ioctls as the device sees them and as the transport's argument
//! path sees them (both the kernel's restricted copy and CUSE's retry
//! protocol), reads, flushes, releases, host events and samples, CPUs going
//! offline and online, and raw FUSE requests for the decoder. After each
//! operation the answer is checked against the contract; a broken rule is a
//! [`Finding`].

use arbitrary::{Arbitrary, Unstructured};
use nix::errno::Errno;
use pfm_abi::numbers::{self as n, ALL};
use pfm_abi::{Implementation, OpenMode, PCNTOPENALL, PCNTOPENEACH, PCNTOPENONE};
use pfm_model::HostEvent;
use pfmd_device::backend::mock::MockBackend;
use pfmd_device::backend::{Sample, Target};
use pfmd_device::device::test_fixtures::{caller, device_with_cpus};
use pfmd_device::device::{Device, DeviceError, FileId, IoctlReply};
use pfmd_device::policy::Caller;
use pfmd_transport::abi::{
    FUSE_IOCTL_32BIT, FUSE_IOCTL_COMPAT, FUSE_IOCTL_UNRESTRICTED, FuseIoctlIn,
};
use pfmd_transport::ioctl::{IoctlAnswer, step};
use pfmd_transport::wire;

/// CPUs of the fuzzed device.
pub const CPUS: u32 = 4;
/// Operations one input may run at most.
const MAX_OPS: usize = 48;
/// Open files one input may hold at once.
const MAX_FILES: usize = 6;
/// Bytes the argument path may store (what a CUSE retry names).
const MAX_STORE: usize = 64 * 1024;

/// A rule the device broke on some input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding(pub String);

/// Host events the mock counts: the software events of a host without a
/// PMU and a few hardware ones, so that some selections resolve and some
/// are `EOPNOTSUPP`.
const HOST_EVENTS: &[HostEvent] = &[
    HostEvent::CpuClock,
    HostEvent::TaskClock,
    HostEvent::Cycles,
    HostEvent::Instructions,
    HostEvent::BranchMisses,
    HostEvent::CacheMisses,
    HostEvent::PageFaults,
];

/// Who calls: root on every CPU, or an ordinary user (two of them) bound
/// to one CPU or to all.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Who {
    Root,
    UserOn(u8),
    UserAll,
    OtherOn(u8),
}

impl Who {
    fn caller(self) -> Caller {
        let all: Vec<u32> = (0..CPUS).collect();
        match self {
            Who::Root => caller(100, 0, all),
            Who::UserOn(cpu) => caller(200 + i32::from(cpu % 4), 1000, vec![u32::from(cpu) % CPUS]),
            Who::UserAll => caller(210, 1000, all),
            Who::OtherOn(cpu) => {
                caller(300 + i32::from(cpu % 4), 1001, vec![u32::from(cpu) % CPUS])
            }
        }
    }
}

/// An ioctl number: one of the device's, or any word.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Cmd {
    Known(u8),
    Known2(u8),
    Raw(u32),
}

impl Cmd {
    fn number(self) -> u32 {
        match self {
            Cmd::Known(i) | Cmd::Known2(i) => ALL[usize::from(i) % ALL.len()].1,
            Cmd::Raw(cmd) => cmd,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Open {
        who: Who,
        mode: u8,
    },
    /// The device's own entry: the argument bytes as the kernel copied them.
    Ioctl {
        file: u8,
        who: Who,
        cmd: Cmd,
        arg: u64,
        short: Option<u8>,
    },
    /// Through the transport's argument path.
    Wire {
        file: u8,
        who: Who,
        cmd: Cmd,
        arg: u64,
        kind: WireKind,
    },
    /// A request as read from `/dev/fuse` or `/dev/cuse`.
    RawRequest(Vec<u8>),
    Read {
        file: u8,
        offset: u32,
        size: u16,
    },
    Flush {
        file: u8,
        who: Who,
    },
    Release {
        file: u8,
    },
    Advance {
        cpu: u8,
        event: u8,
        thread: Option<u8>,
        count: u32,
    },
    Sample {
        cpu: u8,
        user: bool,
        ip: u64,
        ticks: u8,
        thread: Option<u8>,
    },
    Hotplug {
        cpu: u8,
        online: bool,
    },
    ExitThread {
        who: Who,
    },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum WireKind {
    /// FUSE: restricted, the kernel copies `_IOC_SIZE` in and out.
    Restricted,
    /// CUSE: unrestricted, the retry protocol.
    Unrestricted,
    /// A 32-bit caller.
    Compat,
}

struct Run {
    backend: MockBackend,
    device: Device,
    files: Vec<(FileId, OpenMode)>,
}

/// Runs one input on `model`.
pub fn run(model: Implementation, data: &[u8]) -> Result<(), Finding> {
    let mut u = Unstructured::new(data);
    let paranoid = i32::from(u.int_in_range(0u8..=3).unwrap_or(2)) - 1;
    let online: u8 = u.arbitrary().unwrap_or(0xff);
    let backend = MockBackend::with_events(HOST_EVENTS);
    let online: Vec<u32> = (0..CPUS)
        .filter(|c| online & (1 << c) != 0 || *c == 0)
        .collect();
    for cpu in 0..CPUS {
        backend.set_online(cpu, online.contains(&cpu));
    }
    let device = device_with_cpus(model, &backend, paranoid, CPUS as usize, online);
    let mut run = Run {
        backend,
        device,
        files: Vec::new(),
    };
    for _ in 0..MAX_OPS {
        let Ok(op) = Op::arbitrary(&mut u) else { break };
        run.apply(op)?;
    }
    run.finish()
}

impl Run {
    fn file(&self, index: u8) -> Option<(FileId, OpenMode)> {
        (!self.files.is_empty()).then(|| self.files[usize::from(index) % self.files.len()])
    }

    fn apply(&mut self, op: Op) -> Result<(), Finding> {
        match op {
            Op::Open { who, mode } => {
                if self.files.len() >= MAX_FILES {
                    return Ok(());
                }
                let flags = match mode % 4 {
                    0 => PCNTOPENONE,
                    1 => PCNTOPENEACH,
                    2 => PCNTOPENALL,
                    _ => 0,
                };
                match self.device.open(&who.caller(), flags) {
                    Ok(id) => self.files.push((id, OpenMode::from_open_flags(flags))),
                    Err(e) => allowed("open", &e, &[Errno::EBUSY, Errno::EINVAL, Errno::EACCES])?,
                }
            }
            Op::Ioctl {
                file,
                who,
                cmd,
                arg,
                short,
            } => {
                let Some((id, mode)) = self.file(file) else {
                    return Ok(());
                };
                let cmd = cmd.number();
                let size = if n::dir(cmd) & n::IOC_WRITE != 0 {
                    (n::size(cmd) as usize).min(8)
                } else {
                    0
                };
                let size = short.map_or(size, |s| usize::from(s) % 9);
                let bytes = arg.to_ne_bytes();
                match self.device.ioctl(id, &who.caller(), cmd, &bytes[..size]) {
                    Ok(reply) => self.check_reply(cmd, &bytes[..size], mode, &reply)?,
                    Err(e) => allowed_ioctl(cmd, &e)?,
                }
            }
            Op::Wire {
                file,
                who,
                cmd,
                arg,
                kind,
            } => {
                let Some((id, mode)) = self.file(file) else {
                    return Ok(());
                };
                self.wire_ioctl(id, mode, who, cmd.number(), arg, kind)?;
            }
            Op::RawRequest(bytes) => {
                // Decoding never panics and answers every malformed request
                // with an error naming it.
                if let Ok(request) = wire::parse(&bytes)
                    && request.header.len as usize != bytes.len()
                {
                    return Err(Finding(format!(
                        "parsed a request of the wrong length: {request:?}"
                    )));
                }
            }
            Op::Read { file, offset, size } => {
                let Some((id, _)) = self.file(file) else {
                    return Ok(());
                };
                match self
                    .device
                    .read(id, &Who::Root.caller(), u64::from(offset), u32::from(size))
                {
                    Ok(bytes) if bytes.len() > usize::from(size) => {
                        return Err(Finding(format!(
                            "read of {size} bytes returned {}",
                            bytes.len()
                        )));
                    }
                    Ok(_) => {}
                    Err(e) => allowed("read", &e, &[Errno::EINVAL])?,
                }
            }
            Op::Flush { file, who } => {
                if let Some((id, _)) = self.file(file) {
                    self.device.flush(id, &who.caller());
                }
            }
            Op::Release { file } => {
                if let Some((id, _)) = self.file(file) {
                    self.device.release(id);
                    self.files.retain(|(f, _)| *f != id);
                }
            }
            Op::Advance {
                cpu,
                event,
                thread,
                count,
            } => {
                let event = HOST_EVENTS[usize::from(event) % HOST_EVENTS.len()];
                let target =
                    thread.map_or(Target::AllTasks, |t| Target::Thread(200 + i32::from(t % 4)));
                self.backend
                    .advance(u32::from(cpu) % CPUS, target, event, u64::from(count));
            }
            Op::Sample {
                cpu,
                user,
                ip,
                ticks,
                thread,
            } => {
                let cpu = u32::from(cpu) % CPUS;
                let tid = thread.map_or(0, |t| 200 + u32::from(t % 4));
                let target = thread.map_or(Target::AllTasks, |_| Target::Thread(tid as i32));
                let sample = Sample {
                    ip,
                    pid: tid,
                    tid,
                    cpu,
                    user,
                    caller: None,
                    count: None,
                };
                self.backend.emit(target, sample, u64::from(ticks % 16));
            }
            Op::Hotplug { cpu, online } => {
                let cpu = u32::from(cpu) % CPUS;
                let mut cpus = self.device.online_cpus();
                cpus.retain(|&c| c != cpu);
                if online {
                    cpus.push(cpu);
                }
                if cpus.is_empty() {
                    return Ok(());
                }
                self.backend.set_online(cpu, online);
                self.device.cpus_changed(cpus);
            }
            Op::ExitThread { who } => {
                self.backend.exit_thread(who.caller().tid());
            }
        }
        Ok(())
    }

    /// One ioctl through the transport's argument path, as the kernel sends
    /// it: restricted (the kernel copied `_IOC_SIZE` bytes), unrestricted
    /// (first with no buffers, then as the retry asked), or from a 32-bit
    /// caller.
    fn wire_ioctl(
        &mut self,
        id: FileId,
        mode: OpenMode,
        who: Who,
        cmd: u32,
        arg: u64,
        kind: WireKind,
    ) -> Result<(), Finding> {
        let size = n::size(cmd) as usize;
        let dir = n::dir(cmd);
        let want_in = if dir & n::IOC_WRITE != 0 { size } else { 0 };
        let want_out = if dir & n::IOC_READ != 0 { size } else { 0 };
        let caller = who.caller();
        // The argument bytes: the pointer value, then zeros.
        let mut bytes = arg.to_ne_bytes().to_vec();
        bytes.resize(want_in.max(8), 0);
        let mut request = FuseIoctlIn {
            fh: id,
            flags: 0,
            cmd,
            arg: 0x7ffd_0000_0000,
            in_size: want_in as u32,
            out_size: want_out as u32,
        };
        match kind {
            WireKind::Restricted => {}
            WireKind::Compat => request.flags = FUSE_IOCTL_COMPAT | FUSE_IOCTL_32BIT,
            WireKind::Unrestricted => {
                request.flags = FUSE_IOCTL_UNRESTRICTED;
                request.in_size = 0;
                request.out_size = 0;
            }
        }
        // CUSE's protocol: a retry for the argument, then one naming the
        // caller's array for a pointer ioctl; the kernel sends the request
        // again with the sizes the retry asked for.
        let device = &self.device;
        let mut answer = Err(DeviceError::invalid("no request"));
        for _ in 0..3 {
            answer = step(
                &request,
                &bytes[..request.in_size as usize],
                || MAX_STORE,
                |data| device.ioctl(id, &caller, cmd, data),
            );
            let Ok(IoctlAnswer::Retry { in_iovs, out_iovs }) = &answer else {
                break;
            };
            let total = |iovs: &[pfmd_transport::abi::FuseIoctlIovec]| -> u32 {
                iovs.iter().map(|v| v.len as u32).sum()
            };
            if !matches!(kind, WireKind::Unrestricted) || total(in_iovs) as usize > want_in.max(8) {
                return Err(Finding(format!(
                    "{cmd:#x} over {kind:?}: a retry for {in_iovs:?} in, {out_iovs:?} out (_IOC_SIZE {size})"
                )));
            }
            request.in_size = total(in_iovs);
            request.out_size = total(out_iovs);
        }
        match answer {
            Ok(IoctlAnswer::Retry { .. }) => Err(Finding(format!("a third retry for {cmd:#x}"))),
            Ok(IoctlAnswer::Data(out)) => {
                let fits = match kind {
                    WireKind::Unrestricted => out.len() <= request.out_size as usize,
                    _ => out.len() == want_out,
                };
                if !fits {
                    return Err(Finding(format!(
                        "{cmd:#x} answered {} bytes for {} asked",
                        out.len(),
                        request.out_size
                    )));
                }
                let _ = mode;
                Ok(())
            }
            Ok(IoctlAnswer::Store { store, data }) => {
                if !matches!(kind, WireKind::Restricted) || data.len() != want_out {
                    return Err(Finding(format!(
                        "a store answer for {cmd:#x} over {kind:?}"
                    )));
                }
                if store.addr != arg {
                    return Err(Finding(format!(
                        "{cmd:#x} stores at {:#x}, the caller passed {arg:#x}",
                        store.addr
                    )));
                }
                Ok(())
            }
            Err(e) if matches!(kind, WireKind::Compat) => {
                if e.errno() == Errno::ENOTTY {
                    Ok(())
                } else {
                    Err(Finding(format!(
                        "a 32-bit caller got {} for {cmd:#x}: {e}",
                        e.errno()
                    )))
                }
            }
            Err(e) => allowed_ioctl(cmd, &e),
        }
    }

    /// A successful ioctl's reply: a store only for a pointer ioctl, at the
    /// caller's pointer, of whole elements for the open's mode.
    fn check_reply(
        &self,
        cmd: u32,
        arg: &[u8],
        mode: OpenMode,
        reply: &IoctlReply,
    ) -> Result<(), Finding> {
        let Some(store) = &reply.store else {
            return Ok(());
        };
        match n::pointer_argument(cmd, arg) {
            Some(addr) if addr == store.addr => {}
            passed => {
                return Err(Finding(format!(
                    "{cmd:#x} stores at {:#x}; its pointer argument is {passed:x?}",
                    store.addr
                )));
            }
        }
        let elements = mode.elements(CPUS as usize);
        if store.bytes.is_empty() || store.bytes.len() % elements != 0 {
            return Err(Finding(format!(
                "{cmd:#x} stores {} bytes in {mode:?} mode ({elements} elements)",
                store.bytes.len()
            )));
        }
        Ok(())
    }

    /// Releases everything; then the device must be free for an ALL open.
    fn finish(mut self) -> Result<(), Finding> {
        for (id, _) in std::mem::take(&mut self.files) {
            self.device.release(id);
        }
        match self.device.open(&Who::Root.caller(), PCNTOPENALL) {
            Ok(id) => {
                self.device.release(id);
                Ok(())
            }
            Err(e) => Err(Finding(format!(
                "every open released, yet an ALL open by root is refused: {e}"
            ))),
        }
    }
}

/// A refusal must be one of `errnos`, and never a bug in pfmd.
fn allowed(what: &str, e: &DeviceError, errnos: &[Errno]) -> Result<(), Finding> {
    if matches!(e, DeviceError::Internal(_)) || !errnos.contains(&e.errno()) {
        return Err(Finding(format!("{what}: {} ({e})", e.errno())));
    }
    Ok(())
}

/// The errnos docs/device.md §9 lets an ioctl answer (`ESRCH`: a thread
/// that exited under a PME selection; `ENXIO`: a ONE open's CPU offline).
fn allowed_ioctl(cmd: u32, e: &DeviceError) -> Result<(), Finding> {
    let name = n::name(cmd).unwrap_or("an unknown ioctl");
    allowed(
        name,
        e,
        &[
            Errno::EINVAL,
            Errno::EBUSY,
            Errno::EFAULT,
            Errno::EOPNOTSUPP,
            Errno::EPERM,
            Errno::EACCES,
            Errno::ENOMEM,
            Errno::ENOSPC,
            Errno::ENXIO,
            Errno::ESRCH,
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bug_in_pfmd_or_an_errno_outside_the_table_is_a_finding() {
        let bug = DeviceError::Internal("a panic".into());
        assert!(allowed("open", &bug, &[Errno::EIO]).is_err());
        let stray = DeviceError::Host("?".into(), Errno::ENOENT);
        assert!(allowed_ioctl(n::PCNTGETCNT, &stray).is_err());
        assert!(allowed_ioctl(n::PCNTGETCNT, &DeviceError::invalid("no")).is_ok());
    }

    #[test]
    fn the_empty_input_runs_clean_on_every_model() {
        for model in Implementation::ALL {
            assert_eq!(run(model, &[]), Ok(()));
        }
    }
}
