//! The CUSE session: the CUSE_INIT handshake, then reader threads that take
//! requests off the channel and answer each from the device core.

use super::CuseError;
use super::abi::*;
use super::channel::{Channel, Received};
use super::ioctl::{self, IoctlAnswer};
use super::wire::{self, Op, Request};
use crate::device::memory::store_to_caller;
use crate::device::{Device, FileId};
use crate::policy::Caller;
use nix::errno::Errno;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Bytes a read of a request needs: the largest is an ioctl carrying a full
/// CUSE transfer of argument bytes.
pub const REQUEST_BUFFER: usize = CUSE_MAX_TRANSFER + 4096;
/// The largest piece of a `read(2)` we accept in one request; the kernel
/// caps it to its 32-page limit anyway (docs/device.md §6: big reads arrive in
/// pieces).
pub const MAX_READ: u32 = CUSE_MAX_TRANSFER as u32;
/// The device has no write method; the kernel wants at least a page.
pub const MAX_WRITE: u32 = 4096;

/// The open flags we answer: CUSE itself ignores them (every CUSE read is
/// direct with offsets from 0, and the device's llseek is a no-op), but they
/// state the same semantics the FUSE transport asks for.
pub const OPEN_FLAGS: u32 = FOPEN_DIRECT_IO | FOPEN_NONSEEKABLE | FOPEN_STREAM;

/// Answers the kernel's CUSE_INIT so it creates `/dev/<dev_name>`.
pub fn handshake(channel: &Channel, dev_name: &str) -> Result<(), CuseError> {
    let mut buf = vec![0u8; REQUEST_BUFFER];
    let n = match channel
        .receive(&mut buf, &AtomicBool::new(false))
        .map_err(CuseError::io("reading CUSE_INIT"))?
    {
        Received::Request(n) => n,
        Received::Stopped | Received::Gone => {
            return Err(CuseError::Protocol(
                "the channel closed before CUSE_INIT".into(),
            ));
        }
    };
    let request = wire::parse(&buf[..n]).map_err(|e| CuseError::Protocol(e.to_string()))?;
    let Op::CuseInit(init) = request.op else {
        return Err(CuseError::Protocol(format!(
            "first request is {} (opcode {}), not CUSE_INIT",
            wire::opcode_name(request.header.opcode),
            request.header.opcode
        )));
    };
    if init.major != FUSE_KERNEL_VERSION || init.minor < MIN_KERNEL_MINOR {
        let reply = wire::reply_error(request.header.unique, Errno::EPROTO);
        let _ = channel.send(&reply);
        return Err(CuseError::KernelTooOld {
            major: init.major,
            minor: init.minor,
        });
    }
    let minor = init.minor.min(PFMD_MINOR_VERSION);
    tracing::debug!(
        kernel = format!("{}.{}", init.major, init.minor),
        speaking = format!("{FUSE_KERNEL_VERSION}.{minor}"),
        kernel_flags = init.flags,
        "CUSE_INIT"
    );
    let out = CuseInitOut {
        major: FUSE_KERNEL_VERSION,
        minor,
        // Restricted ioctls: the kernel copies each argument as its _IOC
        // encoding says, so every ioctl is one request (ioctl.rs).
        flags: 0,
        max_read: MAX_READ,
        max_write: MAX_WRITE,
        ..Default::default()
    };
    channel
        .send(&wire::init_reply(request.header.unique, &out, dev_name))
        .map_err(CuseError::io("answering CUSE_INIT"))
}

/// Shared by the reader threads.
pub struct Session {
    pub device: Arc<Device>,
    pub channel: Channel,
    /// Set once the transport is stopping: a closed channel is then expected.
    pub stopping: AtomicBool,
    /// Set when the kernel ended the connection while we were serving.
    pub lost: AtomicBool,
    pub on_lost: Box<dyn Fn() + Send + Sync>,
}

impl Session {
    /// One reader thread's life.
    pub fn serve(&self, index: usize) {
        let mut buf = vec![0u8; REQUEST_BUFFER];
        loop {
            match self.channel.receive(&mut buf, &self.stopping) {
                Ok(Received::Request(n)) => {
                    let (reply, end) = answer(&self.device, &buf[..n]);
                    if let Some(reply) = reply
                        && let Err(e) = self.channel.send(&reply)
                    {
                        if e.raw_os_error() == Some(libc::ENODEV) {
                            self.connection_lost("the kernel closed the connection");
                            return;
                        }
                        tracing::error!(thread = index, "writing a CUSE reply: {e}");
                    }
                    if end {
                        self.connection_lost("the kernel sent DESTROY");
                        return;
                    }
                }
                Ok(Received::Stopped) => return,
                Ok(Received::Gone) => {
                    self.connection_lost("the kernel closed the connection");
                    return;
                }
                Err(e) => {
                    self.connection_lost(&format!("reading /dev/cuse: {e}"));
                    return;
                }
            }
        }
    }

    fn connection_lost(&self, why: &str) {
        if self.stopping.load(Ordering::SeqCst) {
            return;
        }
        // Only the first thread to notice reports it; the others see the
        // same closed connection.
        if !self.lost.swap(true, Ordering::SeqCst) {
            tracing::error!("CUSE connection lost: {why}");
            (self.on_lost)();
        }
    }
}

/// The reply to one raw request (None: the kernel wants none), and whether
/// the session ends after it.
pub fn answer(device: &Device, raw: &[u8]) -> (Option<Vec<u8>>, bool) {
    answer_with(device, raw, 0)
}

/// [`answer`], with `info_flags` (`PFM_INFO_*` bits the transport reports
/// about itself) added to every `PCNTGETINFO` reply. The FUSE io_uring
/// transport answers its device requests here too: one codec for both.
pub fn answer_with(device: &Device, raw: &[u8], info_flags: u64) -> (Option<Vec<u8>>, bool) {
    match wire::parse(raw) {
        Ok(request) => {
            let end = request.op == Op::Destroy;
            (handle(device, &request, info_flags), end)
        }
        Err(e) => {
            tracing::error!("malformed CUSE request: {e}");
            (e.unique().map(|u| wire::reply_error(u, Errno::EIO)), false)
        }
    }
}

fn handle(device: &Device, request: &Request<'_>, info_flags: u64) -> Option<Vec<u8>> {
    let unique = request.header.unique;
    let caller = || Caller::from_tid(request.header.pid as i32);
    tracing::trace!(
        op = wire::opcode_name(request.header.opcode),
        unique,
        tid = request.header.pid,
        "CUSE request"
    );
    let reply = match &request.op {
        Op::Open(open) => match device.open(&caller(), open.flags as i32) {
            Ok(id) => wire::reply_struct(
                unique,
                &FuseOpenOut {
                    fh: id,
                    open_flags: OPEN_FLAGS,
                    padding: 0,
                },
            ),
            Err(e) => {
                tracing::debug!(tid = request.header.pid, "open refused: {e}");
                wire::reply_error(unique, e.errno())
            }
        },
        Op::Read(read) => match device.read(read.fh as FileId, &caller(), read.offset, read.size) {
            Ok(mut bytes) => {
                bytes.truncate(read.size as usize);
                wire::reply(unique, &[&bytes])
            }
            Err(e) => wire::reply_error(unique, e.errno()),
        },
        Op::Write(write) => match device.write(write.fh as FileId) {
            // fuse_write_out: the size written and padding.
            Ok(n) => wire::reply(unique, &[&(n as u32).to_ne_bytes(), &[0; 4]]),
            Err(e) => wire::reply_error(unique, e.errno()),
        },
        Op::Release(release) => {
            device.release(release.fh as FileId);
            wire::reply(unique, &[])
        }
        // A close(2) of one descriptor (FUSE only: CUSE has no flush).
        Op::Flush(flush) => {
            device.flush(flush.fh as FileId, &caller());
            wire::reply(unique, &[])
        }
        Op::Ioctl { arg, data } => {
            let caller = caller();
            let answer = ioctl::step(
                arg,
                data,
                |bytes| {
                    let mut reply = device.ioctl(arg.fh as FileId, &caller, arg.cmd, bytes)?;
                    pfm_abi::PfmInfo::add_flags_to_reply(arg.cmd, &mut reply.out, info_flags);
                    Ok(reply)
                },
                |store| store_to_caller(caller.tid(), store.addr, &store.bytes),
            );
            match answer {
                Ok(IoctlAnswer::Retry { in_iovs, out_iovs }) => {
                    wire::ioctl_retry_reply(unique, &in_iovs, &out_iovs)
                }
                Ok(IoctlAnswer::Data(bytes)) => wire::ioctl_data_reply(unique, &bytes),
                Err(e) => {
                    // The core logs its own refusals; these are ours.
                    if arg.flags & (FUSE_IOCTL_COMPAT | FUSE_IOCTL_32BIT) != 0 {
                        tracing::debug!(tid = caller.tid(), cmd = arg.cmd, "ioctl refused: {e}");
                    }
                    wire::reply_error(unique, e.errno())
                }
            }
        }
        // No poll method: the kernel then stops asking and reports the
        // device always ready, which it is (reads never block).
        Op::Poll(_) => wire::reply_error(unique, Errno::ENOSYS),
        // Every handler answers without blocking, so the interrupted
        // request is answered promptly anyway; the kernel wants no reply
        // to the interrupt itself and drops it once the request ends.
        Op::Interrupt(interrupt) => {
            tracing::debug!(
                request = interrupt.unique,
                "INTERRUPT (request answers promptly)"
            );
            return None;
        }
        Op::Destroy => wire::reply(unique, &[]),
        Op::NoReply(_) => return None,
        Op::CuseInit(_) => {
            tracing::warn!("CUSE_INIT after the handshake");
            wire::reply_error(unique, Errno::EPROTO)
        }
        Op::Other(opcode) => {
            tracing::debug!(opcode, "unsupported CUSE request");
            wire::reply_error(unique, Errno::ENOSYS)
        }
    };
    Some(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::mock::MockBackend;
    use crate::device::test_fixtures;
    use pfm_abi::numbers as n;
    use pfm_abi::{PFM_COUNTERS, PfCntrs};
    use pfm_model::Implementation;
    use zerocopy::{FromBytes, IntoBytes};

    const ARG: u64 = 0x7ffd_0000_0100;

    fn device() -> Device {
        test_fixtures::device(Implementation::Ev4, &MockBackend::default(), -1)
    }

    /// The test thread is the caller: its credentials come from /proc.
    fn tid() -> u32 {
        nix::unistd::gettid().as_raw() as u32
    }

    fn request(opcode: u32, unique: u64, body: &[&[u8]]) -> Vec<u8> {
        let len = size_of::<FuseInHeader>() + body.iter().map(|b| b.len()).sum::<usize>();
        let header = FuseInHeader {
            len: len as u32,
            opcode,
            unique,
            pid: tid(),
            ..Default::default()
        };
        let mut out = header.as_bytes().to_vec();
        for part in body {
            out.extend_from_slice(part);
        }
        out
    }

    fn ioctl_request(
        unique: u64,
        fh: u64,
        flags: u32,
        cmd: u32,
        iov: (usize, usize),
        data: &[u8],
    ) -> Vec<u8> {
        let arg = FuseIoctlIn {
            fh,
            flags,
            cmd,
            arg: ARG,
            in_size: iov.0 as u32,
            out_size: iov.1 as u32,
        };
        request(FUSE_IOCTL, unique, &[arg.as_bytes(), data])
    }

    /// Splits a reply into (error, unique, payload), checking its length.
    fn split(reply: &[u8]) -> (i32, u64, &[u8]) {
        let (header, payload) = FuseOutHeader::read_from_prefix(reply).unwrap();
        assert_eq!(header.len as usize, reply.len());
        (header.error, header.unique, payload)
    }

    fn ok(device: &Device, raw: &[u8]) -> Vec<u8> {
        let (reply, end) = answer(device, raw);
        assert!(!end);
        let reply = reply.expect("a reply");
        let (error, _, payload) = split(&reply);
        assert_eq!(error, 0, "unexpected error reply");
        payload.to_vec()
    }

    fn error(device: &Device, raw: &[u8]) -> Errno {
        let reply = answer(device, raw).0.expect("a reply");
        let (error, _, payload) = split(&reply);
        assert!(error < 0 && payload.is_empty());
        Errno::from_raw(-error)
    }

    fn open(device: &Device) -> u64 {
        let flags = (libc::O_RDONLY | libc::O_LARGEFILE) as u32;
        let payload = ok(
            device,
            &request(
                FUSE_OPEN,
                2,
                &[FuseOpenIn {
                    flags,
                    open_flags: 0,
                }
                .as_bytes()],
            ),
        );
        let out = FuseOpenOut::read_from_bytes(&payload).unwrap();
        assert_eq!(out.open_flags, OPEN_FLAGS);
        out.fh
    }

    fn ioctl_out(payload: &[u8]) -> (FuseIoctlOut, &[u8]) {
        FuseIoctlOut::read_from_prefix(payload).unwrap()
    }

    #[test]
    fn open_ioctls_read_release() {
        let d = device();
        let fh = open(&d);
        // A second open is EBUSY, whoever asks (docs/device.md §2).
        let busy = request(
            FUSE_OPEN,
            3,
            &[FuseOpenIn {
                flags: 0,
                open_flags: 0,
            }
            .as_bytes()],
        );
        assert_eq!(error(&d, &busy), Errno::EBUSY);

        // PCNTSETITEMS: the long comes with the request (restricted).
        let payload = ok(
            &d,
            &ioctl_request(
                5,
                fh,
                0,
                n::PCNTSETITEMS,
                (8, 0),
                &PFM_COUNTERS.to_ne_bytes(),
            ),
        );
        let (out, data) = ioctl_out(&payload);
        assert_eq!((out.result, out.flags), (0, 0));
        assert!(data.is_empty());

        // PCNTGETCNT: one request; the array goes to the pointer (here a
        // buffer of this test thread, the caller).
        let mut counts = PfCntrs {
            pf_cntr0: 9,
            pf_cntr1: 9,
            pr_cycle: 9,
        };
        let ptr = (&mut counts as *mut PfCntrs) as u64;
        let payload = ok(
            &d,
            &ioctl_request(7, fh, 0, n::PCNTGETCNT, (8, 0), &ptr.to_ne_bytes()),
        );
        let (out, data) = ioctl_out(&payload);
        assert_eq!((out.result, out.flags), (0, 0));
        assert!(data.is_empty());
        let counts = std::hint::black_box(counts);
        assert_eq!((counts.pf_cntr0, counts.pf_cntr1), (0, 0));
        // A pointer that faults is EFAULT.
        assert_eq!(
            error(
                &d,
                &ioctl_request(8, fh, 0, n::PCNTGETCNT, (8, 0), &8u64.to_ne_bytes())
            ),
            Errno::EFAULT
        );

        // PCNTGETRSIZE (_IOR long): 8 bytes back.
        let payload = ok(&d, &ioctl_request(10, fh, 0, n::PCNTGETRSIZE, (0, 8), &[]));
        assert_eq!(ioctl_out(&payload).1, 0u64.to_ne_bytes());

        // An unrestricted request (not what we ask the kernel for) retries
        // once for its argument.
        let payload = ok(
            &d,
            &ioctl_request(9, fh, FUSE_IOCTL_UNRESTRICTED, n::PCNTGETRSIZE, (0, 0), &[]),
        );
        let (out, iovs) = ioctl_out(&payload);
        assert_eq!(
            (out.flags, out.in_iovs, out.out_iovs),
            (FUSE_IOCTL_RETRY, 0, 1)
        );
        let iov = FuseIoctlIovec::read_from_bytes(iovs).unwrap();
        assert_eq!((iov.base, iov.len), (ARG, 8));

        // Unknown ioctl: EINVAL, as the original driver's default case.
        let unknown = n::ioc(n::IOC_NONE, 200, 0);
        assert_eq!(
            error(&d, &ioctl_request(11, fh, 0, unknown, (0, 0), &[])),
            Errno::EINVAL
        );
        // 32-bit callers: ENOTTY.
        let compat = ioctl_request(
            12,
            fh,
            FUSE_IOCTL_COMPAT | FUSE_IOCTL_32BIT,
            n::PCNTRENABLE,
            (0, 0),
            &[],
        );
        assert_eq!(error(&d, &compat), Errno::ENOTTY);

        // read(2): nothing while profiling is off.
        let read = FuseReadIn {
            fh,
            size: 4096,
            ..Default::default()
        };
        assert!(ok(&d, &request(FUSE_READ, 13, &[read.as_bytes()])).is_empty());
        // write(2): no write method.
        let write = FuseWriteIn {
            fh,
            size: 1,
            ..Default::default()
        };
        assert_eq!(
            error(&d, &request(FUSE_WRITE, 14, &[write.as_bytes(), b"x"])),
            Errno::EINVAL
        );
        let flush = FuseFlushIn {
            fh,
            ..Default::default()
        };
        assert!(ok(&d, &request(FUSE_FLUSH, 15, &[flush.as_bytes()])).is_empty());

        // Release frees the device for the next open.
        let release = FuseReleaseIn {
            fh,
            ..Default::default()
        };
        assert!(ok(&d, &request(FUSE_RELEASE, 16, &[release.as_bytes()])).is_empty());
        assert_eq!(
            error(&d, &ioctl_request(17, fh, 0, n::PCNTRENABLE, (0, 0), &[])),
            Errno::EINVAL
        );
        let again = open(&d);
        assert_ne!(again, fh);
    }

    #[test]
    fn getcnt_without_counters_fails_on_the_argument_step() {
        let d = device();
        let fh = open(&d);
        let ipl_only = pfm_abi::PFM_IPL.to_ne_bytes();
        ok(
            &d,
            &ioctl_request(4, fh, 0, n::PCNTSETITEMS, (8, 0), &ipl_only),
        );
        let raw = ioctl_request(5, fh, 0, n::PCNTGETCNT, (8, 0), &ARG.to_ne_bytes());
        assert_eq!(error(&d, &raw), Errno::EINVAL);
    }

    #[test]
    fn requests_without_a_device_method() {
        let d = device();
        let poll = FusePollIn::default();
        assert_eq!(
            error(&d, &request(FUSE_POLL, 2, &[poll.as_bytes()])),
            Errno::ENOSYS
        );
        assert_eq!(error(&d, &request(1, 3, &[b"name\0"])), Errno::ENOSYS); // LOOKUP
        let interrupt = FuseInterruptIn { unique: 2 };
        assert_eq!(
            answer(
                &d,
                &request(
                    FUSE_INTERRUPT,
                    4 | FUSE_INT_REQ_BIT,
                    &[interrupt.as_bytes()]
                )
            ),
            (None, false)
        );
        assert_eq!(
            answer(&d, &request(FUSE_FORGET, 5, &[&[0; 8]])),
            (None, false)
        );
        let (reply, end) = answer(&d, &request(FUSE_DESTROY, 6, &[]));
        assert!(end);
        assert_eq!(split(&reply.unwrap()), (0, 6, &[][..]));
        // A body too short for its opcode: EIO to that request.
        assert_eq!(error(&d, &request(FUSE_OPEN, 7, &[])), Errno::EIO);
        // A header we cannot read: nobody to answer.
        assert_eq!(answer(&d, &[0; 8]), (None, false));
    }
}
