//! The one request handler: every answer the device gives over every
//! channel (CUSE, classic `/dev/fuse` readers, FUSE-over-io_uring queues) is
//! decided here, from a request decoded by [`wire`]. The channels only move
//! bytes: they read a request, hand it here, and deliver the [`Answer`].
//!
//! Requests and their answers:
//! - the one-file filesystem (FUSE only; a CUSE device has none): LOOKUP
//!   of `pfcntr` in the root, GETATTR, SETATTR (a truncation to 0, as
//!   `O_TRUNC` sends, is accepted and ignored; another size `EINVAL`; mode
//!   or owner `EPERM`), OPENDIR/READDIR/RELEASEDIR of the root, STATFS;
//!   FSYNC `EINVAL` (a character device has no fsync), CREATE/UNLINK
//!   `EPERM`, OPEN of the directory `EISDIR`;
//! - the device: OPEN → `Device::open` (an open that finds its own
//!   process's release in flight waits for it: [`Answer::WaitForRelease`]);
//!   READ → `Device::read`; WRITE → `EINVAL`; IOCTL → [`ioctl::step`]
//!   (32-bit callers `ENOTTY`; a pointer ioctl's bytes copied by the kernel
//!   on CUSE, stored by the store helper on FUSE:
//!   [`Answer::AfterStore`]); RELEASE → `Device::release`; FLUSH →
//!   `Device::flush`; POLL → `ENOSYS` (the kernel then takes the device as
//!   always ready, which it is); a READ or IOCTL that would wait for its
//!   open, or whose open follows many PME threads, is [`Answer::Later`] on a
//!   serving thread ([`Handler::answer`]) and answered in full by the open's
//!   worker ([`Handler::answer_waiting`]);
//! - INTERRUPT, FORGET and their kind: no reply (every handler answers
//!   without waiting, so an interrupted request is answered soon anyway);
//!   DESTROY: a reply, and the session ends; INIT or CUSE_INIT after the
//!   handshake: `EPROTO`; anything else `ENOSYS`.

use super::abi::*;
use super::ioctl::{self, IoctlAnswer};
use super::later::{LaterReply, LaterRequest, LaterServer};
use super::open_waiter::{Opened, PendingOpen, try_open};
use super::store::StoreJob;
use super::wire::{self, FsOp, Op, Request};
use crate::device::{Device, DeviceError, FileId, Waiting};
use crate::policy::Caller;
use nix::errno::Errno;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zerocopy::IntoBytes;

/// The device file's name in the FUSE mount.
pub const FILE_NAME: &str = "pfcntr";
pub const ROOT_INO: u64 = 1;
pub const DEVICE_INO: u64 = 2;
const TTL_SECS: u64 = 3600;

/// The open flags we answer: direct I/O and stream, so every read reaches
/// us and its offsets are ours to interpret (docs/device.md §6), and the
/// file is not seekable. CUSE ignores them (every CUSE read is direct, and
/// the device's llseek is a no-op) but they say the same there.
pub const OPEN_FLAGS: u32 = FOPEN_DIRECT_IO | FOPEN_NONSEEKABLE | FOPEN_STREAM;

/// The FUSE file's fixed attributes.
#[derive(Debug, Clone, Copy)]
pub struct FileFacts {
    /// Permission bits of the device file.
    pub mode: u16,
    /// Its times.
    pub started: SystemTime,
}

/// What a channel is, for the handler.
#[derive(Debug, Clone, Copy)]
pub enum ChannelKind {
    /// A CUSE character device: unrestricted ioctls, no filesystem.
    Cuse,
    /// A FUSE mount whose one file is the device: restricted ioctls.
    Fuse(FileFacts),
}

/// Decides every answer, for one channel.
#[derive(Clone)]
pub struct Handler {
    pub device: Arc<Device>,
    pub kind: ChannelKind,
    /// `PFM_INFO_*` bits this channel reports in `PCNTGETINFO`.
    pub channel_flags: u64,
    /// The per-open workers that serve [`Answer::Later`] requests, shared by
    /// every channel of a transport (an open's requests may come by any).
    pub later: LaterServer,
}

/// What to do with one request.
#[derive(Debug)]
pub enum Answer {
    Reply(Vec<u8>),
    /// The kernel wants no reply (FORGET, INTERRUPT).
    Nothing,
    /// DESTROY's reply: the session ends after it.
    Last(Vec<u8>),
    /// A device OPEN of user `uid` to answer when the caller's own release
    /// lands.
    WaitForRelease {
        unique: u64,
        uid: u32,
        open: PendingOpen,
    },
    /// The job's reply once its store is in the caller's memory (a pointer
    /// ioctl on a FUSE file); on a failed store, the errno with its
    /// `unique`. The channel sets the job's `tag` to find the request
    /// again.
    AfterStore(StoreJob),
    /// A READ or IOCTL that would wait for its open, or take long: the
    /// channel has it served by the open's worker
    /// ([`LaterServer`](super::later::LaterServer)), whose answer is
    /// one of the others. `uid` for a channel's per-user bounds.
    Later {
        uid: u32,
        request: LaterRequest,
    },
}

/// The OPEN reply for a new open file.
pub fn opened_reply(unique: u64, id: FileId) -> Vec<u8> {
    wire::reply_struct(
        unique,
        &FuseOpenOut {
            fh: id,
            open_flags: OPEN_FLAGS,
            padding: 0,
        },
    )
}

impl Handler {
    /// The answer to one request in the classic framing, on a thread that
    /// serves every caller: a request that would wait is [`Answer::Later`].
    pub fn answer(&self, raw: &[u8]) -> Answer {
        self.answer_as(raw, Waiting::Refused)
    }

    /// Serves a request [`Answer::Later`] deferred on its open's worker,
    /// which delivers the answer through `reply`.
    pub fn serve_later(self: &Arc<Self>, request: LaterRequest, reply: Box<dyn LaterReply>) {
        self.later.serve(self, request, reply);
    }

    /// The answer to a request [`Answer::Later`] deferred, on a thread of
    /// its open's own: it waits as it needs.
    pub fn answer_waiting(&self, raw: &[u8]) -> Answer {
        self.answer_as(raw, Waiting::Allowed)
    }

    fn answer_as(&self, raw: &[u8], waiting: Waiting) -> Answer {
        match wire::parse(raw) {
            Ok(request) => match self.handle(&request, waiting) {
                Answer::Later { uid, request } => Answer::Later {
                    uid,
                    request: LaterRequest {
                        raw: raw.to_vec(),
                        ..request
                    },
                },
                answer => answer,
            },
            Err(e) => {
                tracing::error!("malformed FUSE request: {e}");
                match e.unique() {
                    Some(unique) => Answer::Reply(wire::reply_error(unique, Errno::EIO)),
                    None => Answer::Nothing,
                }
            }
        }
    }

    fn caller(&self, request: &Request<'_>) -> Caller {
        let h = &request.header;
        Caller::from_request(h.pid as i32, h.uid, self.channel_flags)
    }

    fn handle(&self, request: &Request<'_>, waiting: Waiting) -> Answer {
        let h = &request.header;
        let unique = h.unique;
        // The raw bytes are filled in by `answer_as`.
        let later = |fh: u64| Answer::Later {
            uid: h.uid,
            request: LaterRequest {
                fh: fh as FileId,
                unique,
                raw: Vec::new(),
            },
        };
        tracing::trace!(
            op = wire::opcode_name(h.opcode),
            unique,
            tid = h.pid,
            "request"
        );
        let error = |errno| Answer::Reply(wire::reply_error(unique, errno));
        let reply = match &request.op {
            Op::Fs(op) => match self.kind {
                ChannelKind::Fuse(facts) => filesystem(&facts, h, op),
                // A character device has no filesystem around it.
                ChannelKind::Cuse => return error(Errno::ENOSYS),
            },
            Op::Open(_) if matches!(self.kind, ChannelKind::Fuse(_)) && h.nodeid != DEVICE_INO => {
                return error(Errno::EISDIR);
            }
            Op::Open(open) => match try_open(&self.device, self.caller(request), open.flags as i32)
            {
                Opened::Now(id) => opened_reply(unique, id),
                Opened::Refused(e) => {
                    tracing::debug!(tid = h.pid, "open refused: {e}");
                    return error(e.errno());
                }
                Opened::Wait(open) => {
                    return Answer::WaitForRelease {
                        unique,
                        uid: h.uid,
                        open,
                    };
                }
            },
            Op::Read(read) => {
                match self.device.read_as(
                    read.fh as FileId,
                    &self.caller(request),
                    read.offset,
                    read.size,
                    waiting,
                ) {
                    Ok(mut bytes) => {
                        bytes.truncate(read.size as usize);
                        wire::reply(unique, &[&bytes])
                    }
                    Err(DeviceError::ServeElsewhere) => return later(read.fh),
                    Err(e) => return error(e.errno()),
                }
            }
            Op::Write(write) => match self.device.write(write.fh as FileId) {
                // fuse_write_out: the size written and padding.
                Ok(n) => wire::reply(unique, &[&(n as u32).to_ne_bytes(), &[0; 4]]),
                Err(e) => return error(e.errno()),
            },
            Op::Release(release) => {
                self.device.release(release.fh as FileId);
                self.later.retire(release.fh as FileId);
                wire::reply(unique, &[])
            }
            // A close(2) of one descriptor (FUSE only: CUSE sends none).
            Op::Flush(flush) => {
                self.device.flush(flush.fh as FileId, &self.caller(request));
                wire::reply(unique, &[])
            }
            Op::Ioctl { arg, data } => match self.ioctl(request, arg, data, waiting) {
                Some(answer) => return answer,
                None => return later(arg.fh),
            },
            // No poll method: the kernel then stops asking and reports the
            // device always ready, which it is (reads never block).
            Op::Poll(_) => return error(Errno::ENOSYS),
            Op::Interrupt(interrupt) => {
                tracing::debug!(
                    request = interrupt.unique,
                    "INTERRUPT (request answers promptly)"
                );
                return Answer::Nothing;
            }
            Op::NoReply(_) => return Answer::Nothing,
            Op::Destroy => return Answer::Last(wire::reply(unique, &[])),
            Op::Init(_) | Op::CuseInit(_) => {
                tracing::warn!("INIT after the handshake");
                return error(Errno::EPROTO);
            }
            Op::Other(opcode) => {
                tracing::debug!(opcode, "unsupported request");
                return error(Errno::ENOSYS);
            }
        };
        Answer::Reply(reply)
    }

    /// The ioctl's answer; `None` where it is to be served elsewhere.
    fn ioctl(
        &self,
        request: &Request<'_>,
        arg: &FuseIoctlIn,
        data: &[u8],
        waiting: Waiting,
    ) -> Option<Answer> {
        let unique = request.header.unique;
        let caller = self.caller(request);
        // Only CUSE's pointer retry needs it: not worked out per ioctl.
        let max_store = || self.device.max_store_len().min(CUSE_MAX_TRANSFER);
        let answer = ioctl::step(arg, data, max_store, |bytes| {
            self.device
                .ioctl_as(arg.fh as FileId, &caller, arg.cmd, bytes, waiting)
        });
        Some(match answer {
            Err(DeviceError::ServeElsewhere) => return None,
            Ok(IoctlAnswer::Retry { in_iovs, out_iovs }) => {
                Answer::Reply(wire::ioctl_retry_reply(unique, &in_iovs, &out_iovs))
            }
            Ok(IoctlAnswer::Data(bytes)) => Answer::Reply(wire::ioctl_data_reply(unique, &bytes)),
            Ok(IoctlAnswer::Store { store, data }) => Answer::AfterStore(StoreJob {
                tag: 0,
                unique,
                uid: request.header.uid,
                tid: caller.tid(),
                addr: store.addr,
                bytes: store.bytes,
                reply: wire::ioctl_data_reply(unique, &data),
            }),
            Err(e) => {
                // The device logs its own refusals; these are ours.
                if arg.flags & (FUSE_IOCTL_COMPAT | FUSE_IOCTL_32BIT | FUSE_IOCTL_COMPAT_X32) != 0 {
                    tracing::debug!(tid = caller.tid(), cmd = arg.cmd, "ioctl refused: {e}");
                    // What a porter sees is only ENOTTY: say why, once.
                    pfmd_device::logging::once(
                        "compat-caller",
                        "a 32-bit program called a pfm ioctl and got ENOTTY: <sys/pfcntr.h> \
                         is the 64-bit (Alpha LP64) layout; build the program as 64-bit \
                         (without -m32)",
                    );
                }
                Answer::Reply(wire::reply_error(unique, e.errno()))
            }
        })
    }
}

/// The one-file filesystem's answers (FUSE channels only).
fn filesystem(facts: &FileFacts, h: &FuseInHeader, op: &FsOp<'_>) -> Vec<u8> {
    let unique = h.unique;
    let error = |errno| wire::reply_error(unique, errno);
    match op {
        FsOp::Lookup(name) if h.nodeid == ROOT_INO && *name == FILE_NAME.as_bytes() => {
            wire::reply_struct(
                unique,
                &FuseEntryOut {
                    nodeid: DEVICE_INO,
                    entry_valid: TTL_SECS,
                    attr_valid: TTL_SECS,
                    attr: attr(facts, DEVICE_INO),
                    ..Default::default()
                },
            )
        }
        FsOp::Lookup(_) => error(Errno::ENOENT),
        FsOp::Getattr if h.nodeid == ROOT_INO || h.nodeid == DEVICE_INO => {
            attr_reply(unique, facts, h.nodeid)
        }
        FsOp::Getattr => error(Errno::ENOENT),
        FsOp::Setattr(set)
            if h.nodeid != DEVICE_INO || set.valid & (FATTR_MODE | FATTR_UID | FATTR_GID) != 0 =>
        {
            error(Errno::EPERM)
        }
        FsOp::Setattr(set) if set.valid & FATTR_SIZE != 0 && set.size != 0 => error(Errno::EINVAL),
        FsOp::Setattr(_) => attr_reply(unique, facts, h.nodeid),
        FsOp::Opendir if h.nodeid == ROOT_INO => {
            wire::reply_struct(unique, &FuseOpenOut::default())
        }
        FsOp::Readdir(read) if h.nodeid == ROOT_INO => {
            wire::reply(unique, &[&directory(read.offset, read.size as usize)])
        }
        FsOp::Opendir | FsOp::Readdir(_) => error(Errno::ENOTDIR),
        FsOp::Releasedir => wire::reply(unique, &[]),
        FsOp::Statfs => wire::reply_struct(
            unique,
            &FuseStatfsOut {
                bsize: 512,
                namelen: 255,
                ..Default::default()
            },
        ),
        // A character device has no fsync method.
        FsOp::Fsync => error(Errno::EINVAL),
        // The one file is all there is.
        FsOp::Create | FsOp::Unlink => error(Errno::EPERM),
    }
}

fn attr(facts: &FileFacts, ino: u64) -> FuseAttr {
    let since = facts
        .started
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let (mode, nlink) = if ino == ROOT_INO {
        (libc::S_IFDIR | 0o755, 2)
    } else {
        (libc::S_IFREG | u32::from(facts.mode), 1)
    };
    FuseAttr {
        ino,
        atime: since.as_secs(),
        mtime: since.as_secs(),
        ctime: since.as_secs(),
        atimensec: since.subsec_nanos(),
        mtimensec: since.subsec_nanos(),
        ctimensec: since.subsec_nanos(),
        mode,
        nlink,
        blksize: 4096,
        ..Default::default()
    }
}

fn attr_reply(unique: u64, facts: &FileFacts, ino: u64) -> Vec<u8> {
    wire::reply_struct(
        unique,
        &FuseAttrOut {
            attr_valid: TTL_SECS,
            attr: attr(facts, ino),
            ..Default::default()
        },
    )
}

/// The READDIR reply from `offset`: ".", "..", and the device, each a
/// `fuse_dirent` padded to 8 bytes, as many as fit in `size`.
fn directory(offset: u64, size: usize) -> Vec<u8> {
    let entries = [
        (ROOT_INO, libc::DT_DIR, "."),
        (ROOT_INO, libc::DT_DIR, ".."),
        (DEVICE_INO, libc::DT_REG, FILE_NAME),
    ];
    let mut out = Vec::new();
    for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
        let record = (size_of::<FuseDirentHead>() + name.len()).next_multiple_of(8);
        if out.len() + record > size {
            break;
        }
        let head = FuseDirentHead {
            ino: *ino,
            off: i as u64 + 1,
            namelen: name.len() as u32,
            kind: u32::from(*kind),
        };
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(name.as_bytes());
        out.resize(out.len().next_multiple_of(8), 0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::mock::MockBackend;
    use crate::device::test_fixtures;
    use pfm_abi::numbers as n;
    use pfm_model::Implementation;
    use zerocopy::FromBytes;

    impl Answer {
        fn into_reply(self) -> Option<Vec<u8>> {
            match self {
                Answer::Reply(reply) | Answer::Last(reply) => Some(reply),
                Answer::Nothing => None,
                Answer::WaitForRelease { .. } => panic!("an open that waits"),
                Answer::AfterStore(_) => panic!("a store"),
                Answer::Later { .. } => panic!("a request served later"),
            }
        }
    }

    fn fs() -> Handler {
        Handler {
            device: Arc::new(test_fixtures::device(
                Implementation::Ev4,
                &MockBackend::default(),
                -1,
            )),
            kind: ChannelKind::Fuse(FileFacts {
                mode: 0o444,
                started: UNIX_EPOCH + Duration::new(1_700_000_000, 5),
            }),
            channel_flags: 0,
            later: LaterServer::default(),
        }
    }

    fn request(opcode: u32, nodeid: u64, body: &[&[u8]]) -> Vec<u8> {
        let len = 40 + body.iter().map(|b| b.len()).sum::<usize>();
        let h = FuseInHeader {
            len: len as u32,
            opcode,
            unique: 9,
            nodeid,
            pid: nix::unistd::gettid().as_raw() as u32,
            ..Default::default()
        };
        let mut out = h.as_bytes().to_vec();
        for part in body {
            out.extend_from_slice(part);
        }
        out
    }

    fn split(reply: &[u8]) -> (i32, &[u8]) {
        let (h, rest) = FuseOutHeader::read_from_prefix(reply).unwrap();
        assert_eq!(h.len as usize, reply.len());
        assert_eq!(h.unique, 9);
        (h.error, rest)
    }

    #[test]
    fn lookup_getattr_layouts() {
        let fs = fs();
        let reply = fs
            .answer(&request(FUSE_LOOKUP, ROOT_INO, &[b"pfcntr\0"]))
            .into_reply()
            .unwrap();
        let (error, body) = split(&reply);
        assert_eq!((error, body.len()), (0, 128));
        assert_eq!(&body[0..8], &DEVICE_INO.to_le_bytes()); // nodeid
        assert_eq!(&body[16..24], &3600u64.to_le_bytes()); // entry_valid
        assert_eq!(&body[40..48], &DEVICE_INO.to_le_bytes()); // attr.ino
        assert_eq!(&body[64..72], &1_700_000_000u64.to_le_bytes()); // attr.atime
        assert_eq!(&body[100..104], &(libc::S_IFREG | 0o444).to_le_bytes()); // attr.mode
        assert_eq!(&body[104..108], &1u32.to_le_bytes()); // attr.nlink

        let reply = fs
            .answer(&request(FUSE_LOOKUP, ROOT_INO, &[b"other\0"]))
            .into_reply()
            .unwrap();
        assert_eq!(split(&reply).0, -libc::ENOENT);

        let reply = fs
            .answer(&request(FUSE_GETATTR, ROOT_INO, &[&[0; 16]]))
            .into_reply()
            .unwrap();
        let (error, body) = split(&reply);
        assert_eq!((error, body.len()), (0, 104));
        assert_eq!(&body[16..24], &ROOT_INO.to_le_bytes());
        assert_eq!(&body[76..80], &(libc::S_IFDIR | 0o755).to_le_bytes());
    }

    #[test]
    fn readdir_lists_the_device_from_an_offset() {
        let fs = fs();
        let read = FuseReadIn {
            size: 4096,
            ..Default::default()
        };
        let reply = fs
            .answer(&request(FUSE_READDIR, ROOT_INO, &[read.as_bytes()]))
            .into_reply()
            .unwrap();
        let (_, body) = split(&reply);
        assert_eq!(body.len(), 3 * 32);
        assert_eq!(&body[64..72], &DEVICE_INO.to_le_bytes());
        assert_eq!(&body[72..80], &3u64.to_le_bytes()); // next offset
        assert_eq!(&body[80..84], &6u32.to_le_bytes()); // namelen
        assert_eq!(&body[84..88], &u32::from(libc::DT_REG).to_le_bytes());
        assert_eq!(&body[88..94], b"pfcntr");
        let read = FuseReadIn {
            offset: 3,
            size: 4096,
            ..Default::default()
        };
        let reply = fs
            .answer(&request(FUSE_READDIR, ROOT_INO, &[read.as_bytes()]))
            .into_reply()
            .unwrap();
        assert!(split(&reply).1.is_empty());
        // Too small for even one entry: nothing, not a truncated record.
        assert!(directory(0, 31).is_empty());
    }

    #[test]
    fn device_requests_reach_the_device() {
        let fs = fs();
        let open = FuseOpenIn {
            flags: libc::O_RDONLY as u32,
            open_flags: 0,
        };
        let reply = fs
            .answer(&request(FUSE_OPEN, ROOT_INO, &[open.as_bytes()]))
            .into_reply()
            .unwrap();
        assert_eq!(split(&reply).0, -libc::EISDIR);
        let reply = fs
            .answer(&request(FUSE_OPEN, DEVICE_INO, &[open.as_bytes()]))
            .into_reply()
            .unwrap();
        let (error, body) = split(&reply);
        assert_eq!(error, 0);
        let out = FuseOpenOut::read_from_bytes(body).unwrap();

        // A restricted _IOR ioctl: the kernel passes out_size = _IOC_SIZE.
        let ioctl = FuseIoctlIn {
            fh: out.fh,
            cmd: n::PCNTGETRSIZE,
            out_size: 8,
            ..Default::default()
        };
        let reply = fs
            .answer(&request(FUSE_IOCTL, DEVICE_INO, &[ioctl.as_bytes()]))
            .into_reply()
            .unwrap();
        let (error, body) = split(&reply);
        assert_eq!((error, body.len()), (0, 16 + 8));
        assert_eq!(
            FuseIoctlOut::read_from_prefix(body).unwrap().0,
            FuseIoctlOut::default()
        );

        let release = FuseReleaseIn {
            fh: out.fh,
            ..Default::default()
        };
        let reply = fs
            .answer(&request(FUSE_RELEASE, DEVICE_INO, &[release.as_bytes()]))
            .into_reply()
            .unwrap();
        assert_eq!(split(&reply), (0, &[][..]));
        // FORGET wants no reply.
        assert!(
            fs.answer(&request(2, DEVICE_INO, &[&[0; 8]]))
                .into_reply()
                .is_none()
        );
    }

    /// Once an open follows a PME thread (whose host events every thread it
    /// creates inherits, so a change or a read costs what the caller
    /// decides), a serving thread answers its requests [`Answer::Later`],
    /// with the request's bytes, and the open's worker answers them in full.
    #[test]
    fn an_open_following_threads_is_served_off_the_serving_threads() {
        let fs = Arc::new(fs());
        let reply = open_device(&fs).into_reply().unwrap();
        let fh = FuseOpenOut::read_from_bytes(split(&reply).1).unwrap().fh;
        let select = FuseIoctlIn {
            fh,
            cmd: n::PCNTLOGSELECT,
            ..Default::default()
        };
        let selecting = request(FUSE_IOCTL, DEVICE_INO, &[select.as_bytes()]);
        // Another thread's own request (the header names the caller) is
        // still answered at once: the open followed no thread before it.
        {
            let fs = Arc::clone(&fs);
            let reply = std::thread::spawn(move || {
                let raw = request(FUSE_IOCTL, DEVICE_INO, &[select.as_bytes()]);
                fs.answer(&raw).into_reply().unwrap()
            })
            .join()
            .unwrap();
            assert_eq!(split(&reply).0, 0);
        }
        let Answer::Later { request: later, .. } = fs.answer(&selecting) else {
            panic!("answered on the serving thread");
        };
        assert_eq!((later.fh, later.unique), (fh, 9));
        assert_eq!(later.raw, selecting);
        let reply = fs.answer_waiting(&later.raw).into_reply().unwrap();
        assert_eq!(split(&reply).0, 0, "answered by the worker");
        // The LaterServer serves it on the open's worker and delivers.
        struct Delivered(std::sync::mpsc::Sender<Answer>);
        impl crate::later::LaterReply for Delivered {
            fn deliver(self: Box<Self>, answer: Answer) {
                let _ = self.0.send(answer);
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        fs.serve_later(later, Box::new(Delivered(tx)));
        let reply = rx.recv().unwrap().into_reply().unwrap();
        assert_eq!(split(&reply).0, 0);
        // Its release retires the open's worker (which would otherwise live
        // on for `later::IDLE`).
        let release = FuseReleaseIn {
            fh,
            ..Default::default()
        };
        let reply = fs
            .answer(&request(FUSE_RELEASE, DEVICE_INO, &[release.as_bytes()]))
            .into_reply()
            .unwrap();
        assert_eq!(split(&reply).0, 0);
        assert!(!fs.later.has_worker(fh as FileId));
    }

    fn open_device(fs: &Handler) -> Answer {
        let open = FuseOpenIn {
            flags: libc::O_RDONLY as u32,
            open_flags: 0,
        };
        fs.answer(&request(FUSE_OPEN, DEVICE_INO, &[open.as_bytes()]))
    }

    #[test]
    fn a_close_then_open_waits_and_getinfo_carries_the_channel_flags() {
        let fs = Handler {
            channel_flags: pfm_abi::PFM_INFO_URING,
            later: LaterServer::default(),
            ..fs()
        };
        let reply = open_device(&fs).into_reply().unwrap();
        let fh = FuseOpenOut::read_from_bytes(split(&reply).1).unwrap().fh;
        // Opened twice by one process: EBUSY at once.
        let busy = open_device(&fs).into_reply().unwrap();
        assert_eq!(split(&busy).0, -libc::EBUSY);
        // PCNTGETINFO over this channel says so.
        let ioctl = FuseIoctlIn {
            fh,
            cmd: n::PCNTGETINFO,
            out_size: size_of::<pfm_abi::PfmInfo>() as u32,
            ..Default::default()
        };
        let reply = fs
            .answer(&request(FUSE_IOCTL, DEVICE_INO, &[ioctl.as_bytes()]))
            .into_reply()
            .unwrap();
        let (error, body) = split(&reply);
        assert_eq!(error, 0);
        let info = pfm_abi::PfmInfo::read_from_bytes(&body[16..]).unwrap();
        assert_eq!(
            info.pi_flags & pfm_abi::PFM_INFO_URING,
            pfm_abi::PFM_INFO_URING
        );
        // FLUSH is the close: the next open of this process waits for the
        // release instead of failing.
        let flush = FuseFlushIn {
            fh,
            ..Default::default()
        };
        let reply = fs
            .answer(&request(FUSE_FLUSH, DEVICE_INO, &[flush.as_bytes()]))
            .into_reply()
            .unwrap();
        assert_eq!(split(&reply), (0, &[][..]));
        match open_device(&fs) {
            Answer::WaitForRelease { unique, open, .. } => {
                assert_eq!(unique, 9);
                assert_eq!(open.error().errno(), Errno::EBUSY);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn setattr_accepts_only_a_truncation_to_zero() {
        let fs = fs();
        let set = |nodeid: u64, valid: u32, size: u64| {
            let body = FuseSetattrIn {
                valid,
                size,
                ..Default::default()
            };
            let reply = fs
                .answer(&request(FUSE_SETATTR, nodeid, &[body.as_bytes()]))
                .into_reply()
                .unwrap();
            split(&reply).0
        };
        assert_eq!(set(DEVICE_INO, FATTR_SIZE, 0), 0);
        assert_eq!(set(DEVICE_INO, 0, 0), 0);
        assert_eq!(set(DEVICE_INO, FATTR_SIZE, 1), -libc::EINVAL);
        assert_eq!(set(DEVICE_INO, FATTR_MODE, 0), -libc::EPERM);
        assert_eq!(set(DEVICE_INO, FATTR_UID, 0), -libc::EPERM);
        assert_eq!(set(ROOT_INO, FATTR_SIZE, 0), -libc::EPERM);
        let errno = |opcode: u32, body: &[u8]| {
            let reply = fs
                .answer(&request(opcode, DEVICE_INO, &[body]))
                .into_reply()
                .unwrap();
            split(&reply).0
        };
        assert_eq!(errno(FUSE_FSYNC, &[0; 16]), -libc::EINVAL);
        assert_eq!(errno(FUSE_CREATE, b"x\0"), -libc::EPERM);
        assert_eq!(errno(FUSE_UNLINK, b"pfcntr\0"), -libc::EPERM);
    }
}

/// The same handler as a CUSE channel sees it.
#[cfg(test)]
mod cuse_tests {
    use super::*;
    use crate::backend::mock::MockBackend;
    use crate::device::{Device, test_fixtures};
    use pfm_abi::numbers as n;
    use pfm_abi::{PFM_COUNTERS, PfCntrs};
    use pfm_model::Implementation;
    use std::sync::Arc;
    use zerocopy::{FromBytes, IntoBytes};

    fn cuse(device: Device) -> Handler {
        Handler {
            device: Arc::new(device),
            kind: ChannelKind::Cuse,
            channel_flags: 0,
            later: LaterServer::default(),
        }
    }

    /// The reply to one raw request (None: the kernel wants none), and
    /// whether the session ends after it.
    fn answer(h: &Handler, raw: &[u8]) -> (Option<Vec<u8>>, bool) {
        match h.answer(raw) {
            Answer::Reply(reply) => (Some(reply), false),
            Answer::Last(reply) => (Some(reply), true),
            Answer::Nothing => (None, false),
            other => panic!("{other:?}"),
        }
    }

    const ARG: u64 = 0x7ffd_0000_0100;

    fn device() -> Handler {
        cuse(test_fixtures::device(
            Implementation::Ev4,
            &MockBackend::default(),
            -1,
        ))
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

    fn ok(device: &Handler, raw: &[u8]) -> Vec<u8> {
        let (reply, end) = answer(device, raw);
        assert!(!end);
        let reply = reply.expect("a reply");
        let (error, _, payload) = split(&reply);
        assert_eq!(error, 0, "unexpected error reply");
        payload.to_vec()
    }

    fn error(device: &Handler, raw: &[u8]) -> Errno {
        let reply = answer(device, raw).0.expect("a reply");
        let (error, _, payload) = split(&reply);
        assert!(error < 0 && payload.is_empty());
        Errno::from_raw(-error)
    }

    fn open(device: &Handler) -> u64 {
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

        // PCNTGETCNT as the kernel sends it over CUSE (unrestricted): the
        // pointer is asked for, then the caller's array is named as the
        // out-iovec, then the counts are the reply, which the kernel
        // copies there in the caller's thread. pfmd writes no memory.
        let unrestricted = FUSE_IOCTL_UNRESTRICTED;
        let payload = ok(
            &d,
            &ioctl_request(6, fh, unrestricted, n::PCNTGETCNT, (0, 0), &[]),
        );
        let (out, iovs) = ioctl_out(&payload);
        assert_eq!(
            (out.flags, out.in_iovs, out.out_iovs),
            (FUSE_IOCTL_RETRY, 1, 0)
        );
        assert_eq!(
            FuseIoctlIovec::read_from_bytes(iovs).unwrap(),
            FuseIoctlIovec { base: ARG, len: 8 }
        );
        let ptr = 0x5555_0000_2000u64;
        let payload = ok(
            &d,
            &ioctl_request(
                7,
                fh,
                unrestricted,
                n::PCNTGETCNT,
                (8, 0),
                &ptr.to_ne_bytes(),
            ),
        );
        let (out, iovs) = ioctl_out(&payload);
        assert_eq!(
            (out.flags, out.in_iovs, out.out_iovs),
            (FUSE_IOCTL_RETRY, 1, 1)
        );
        let out_iov = FuseIoctlIovec::read_from_bytes(&iovs[16..]).unwrap();
        let max = d.device.max_store_len() as u64;
        assert_eq!((out_iov.base, out_iov.len), (ptr, max));
        let payload = ok(
            &d,
            &ioctl_request(
                8,
                fh,
                unrestricted,
                n::PCNTGETCNT,
                (8, max as usize),
                &ptr.to_ne_bytes(),
            ),
        );
        let (out, data) = ioctl_out(&payload);
        assert_eq!((out.result, out.flags), (0, 0));
        let counts = PfCntrs::read_from_bytes(data).unwrap();
        assert_eq!((counts.pf_cntr0, counts.pf_cntr1), (0, 0));

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
