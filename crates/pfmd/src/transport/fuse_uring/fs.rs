//! The one-file filesystem at the wire level: what the fuser-based
//! transport (`super::super::fuse`) answers, for requests in the classic
//! framing. The directory operations, SETATTR and the device's OPEN are
//! answered here (an OPEN that waits for its own process's release comes
//! back as [`Answer::Later`] for the channel to hand to the
//! [`open_waiter`](crate::transport::open_waiter)); everything else on the
//! device file (READ, WRITE, IOCTL, RELEASE, FLUSH, INTERRUPT, …) goes to
//! the CUSE session's request handler, which speaks the same wire protocol
//! to the same [`Device`].

use super::abi::*;
use crate::device::{Device, FileId};
use crate::policy::Caller;
use crate::transport::cuse::abi::{
    FUSE_FSYNC, FUSE_OPEN, FuseInHeader, FuseOpenIn, FuseOpenOut, FuseReadIn,
};
use crate::transport::cuse::session::OPEN_FLAGS;
use crate::transport::cuse::{session, wire};
use crate::transport::fuse::FILE_NAME;
use crate::transport::open_waiter::{Opened, PendingOpen, try_open};
use nix::errno::Errno;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zerocopy::{FromBytes, IntoBytes};

pub const ROOT_INO: u64 = 1;
pub const DEVICE_INO: u64 = 2;
const TTL_SECS: u64 = 3600;

/// What the reader threads and ring queues share.
#[derive(Clone)]
pub struct Filesystem {
    pub device: Arc<Device>,
    /// Permission bits of the device file.
    pub mode: u16,
    pub started: SystemTime,
    /// `PFM_INFO_*` bits this channel adds to `PCNTGETINFO` replies.
    pub info_flags: u64,
}

/// What to do with one request.
#[derive(Debug)]
pub enum Answer {
    Reply(Vec<u8>),
    /// The kernel wants no reply (FORGET, INTERRUPT).
    Nothing,
    /// A device OPEN to answer when the caller's own release lands.
    Later {
        unique: u64,
        open: PendingOpen,
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

impl Filesystem {
    fn attr(&self, ino: u64) -> FuseAttr {
        let since = self
            .started
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let (mode, nlink) = if ino == ROOT_INO {
            (libc::S_IFDIR | 0o755, 2)
        } else {
            (libc::S_IFREG | u32::from(self.mode), 1)
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

    /// The answer to one request in the classic framing.
    pub fn answer(&self, raw: &[u8]) -> Answer {
        let Ok((h, body)) = FuseInHeader::read_from_prefix(raw) else {
            tracing::error!(len = raw.len(), "FUSE request shorter than its header");
            return Answer::Nothing;
        };
        let unique = h.unique;
        let reply = match h.opcode {
            FUSE_LOOKUP => {
                let name = body.split(|&b| b == 0).next().unwrap_or_default();
                if h.nodeid != ROOT_INO || name != FILE_NAME.as_bytes() {
                    return Answer::Reply(wire::reply_error(unique, Errno::ENOENT));
                }
                let entry = FuseEntryOut {
                    nodeid: DEVICE_INO,
                    entry_valid: TTL_SECS,
                    attr_valid: TTL_SECS,
                    attr: self.attr(DEVICE_INO),
                    ..Default::default()
                };
                wire::reply_struct(unique, &entry)
            }
            FUSE_GETATTR => {
                if h.nodeid != ROOT_INO && h.nodeid != DEVICE_INO {
                    return Answer::Reply(wire::reply_error(unique, Errno::ENOENT));
                }
                let out = FuseAttrOut {
                    attr_valid: TTL_SECS,
                    attr: self.attr(h.nodeid),
                    ..Default::default()
                };
                wire::reply_struct(unique, &out)
            }
            FUSE_OPENDIR if h.nodeid == ROOT_INO => {
                wire::reply_struct(unique, &FuseOpenOut::default())
            }
            FUSE_OPENDIR => wire::reply_error(unique, Errno::ENOTDIR),
            FUSE_READDIR => match FuseReadIn::read_from_prefix(body) {
                Ok((read, _)) if h.nodeid == ROOT_INO => {
                    wire::reply(unique, &[&directory(read.offset, read.size as usize)])
                }
                Ok(_) => wire::reply_error(unique, Errno::ENOTDIR),
                Err(_) => wire::reply_error(unique, Errno::EIO),
            },
            FUSE_RELEASEDIR => wire::reply(unique, &[]),
            FUSE_STATFS => {
                // What fuser answers by default.
                let out = FuseStatfsOut {
                    bsize: 512,
                    namelen: 255,
                    ..Default::default()
                };
                wire::reply_struct(unique, &out)
            }
            FUSE_INIT => {
                tracing::warn!("INIT after the handshake");
                wire::reply_error(unique, Errno::EPROTO)
            }
            FUSE_SETATTR => self.setattr(&h, body),
            // As the fuser transport answers: a character device has no
            // fsync method; the one file is all there is.
            FUSE_FSYNC => wire::reply_error(unique, Errno::EINVAL),
            FUSE_CREATE | FUSE_UNLINK => wire::reply_error(unique, Errno::EPERM),
            FUSE_OPEN if h.nodeid != DEVICE_INO => wire::reply_error(unique, Errno::EISDIR),
            FUSE_OPEN => match FuseOpenIn::read_from_prefix(body) {
                Ok((open, _)) => {
                    let caller = Caller::from_tid(h.pid as i32);
                    match try_open(&self.device, caller, open.flags as i32) {
                        Opened::Now(id) => opened_reply(unique, id),
                        Opened::Refused(e) => wire::reply_error(unique, e.errno()),
                        Opened::Wait(open) => return Answer::Later { unique, open },
                    }
                }
                Err(_) => wire::reply_error(unique, Errno::EIO),
            },
            // The device file: the CUSE session's handler, same wire.
            _ => {
                return match session::answer_with(&self.device, raw, self.info_flags).0 {
                    Some(reply) => Answer::Reply(reply),
                    None => Answer::Nothing,
                };
            }
        };
        Answer::Reply(reply)
    }

    /// `O_TRUNC` reaches FUSE as a truncation to 0, which a character
    /// device ignores (the attributes are answered unchanged); a truncation
    /// to any other size is `EINVAL`; a change of mode or owner `EPERM`, as
    /// the fuser transport answers.
    fn setattr(&self, h: &FuseInHeader, body: &[u8]) -> Vec<u8> {
        let Ok((set, _)) = FuseSetattrIn::read_from_prefix(body) else {
            return wire::reply_error(h.unique, Errno::EIO);
        };
        if h.nodeid != DEVICE_INO || set.valid & (FATTR_MODE | FATTR_UID | FATTR_GID) != 0 {
            return wire::reply_error(h.unique, Errno::EPERM);
        }
        if set.valid & FATTR_SIZE != 0 && set.size != 0 {
            return wire::reply_error(h.unique, Errno::EINVAL);
        }
        let out = FuseAttrOut {
            attr_valid: TTL_SECS,
            attr: self.attr(h.nodeid),
            ..Default::default()
        };
        wire::reply_struct(h.unique, &out)
    }
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
    use crate::transport::cuse::abi::{
        FUSE_FLUSH, FUSE_IOCTL, FUSE_RELEASE, FuseFlushIn, FuseIoctlIn, FuseIoctlOut,
        FuseOutHeader, FuseReleaseIn,
    };
    use pfm_abi::numbers as n;
    use pfm_model::Implementation;

    impl Answer {
        fn into_reply(self) -> Option<Vec<u8>> {
            match self {
                Answer::Reply(reply) => Some(reply),
                Answer::Nothing => None,
                Answer::Later { .. } => panic!("an open that waits"),
            }
        }
    }

    fn fs() -> Filesystem {
        Filesystem {
            device: Arc::new(test_fixtures::device(
                Implementation::Ev4,
                &MockBackend::default(),
                -1,
            )),
            mode: 0o444,
            started: UNIX_EPOCH + Duration::new(1_700_000_000, 5),
            info_flags: 0,
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

    fn open_device(fs: &Filesystem) -> Answer {
        let open = FuseOpenIn {
            flags: libc::O_RDONLY as u32,
            open_flags: 0,
        };
        fs.answer(&request(FUSE_OPEN, DEVICE_INO, &[open.as_bytes()]))
    }

    #[test]
    fn a_close_then_open_waits_and_getinfo_carries_the_channel_flags() {
        let fs = Filesystem {
            info_flags: pfm_abi::PFM_INFO_URING,
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
            Answer::Later { unique, open } => {
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
