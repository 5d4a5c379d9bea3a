//! The one codec of the FUSE wire: requests as the kernel writes them (to
//! `/dev/cuse`, `/dev/fuse`, or a ring entry turned back into this framing),
//! decoded into [`Op`], and replies as it wants them back. Each request is a
//! header followed by the opcode's structure (and data).

use super::abi::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A request that cannot be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("request of {got} bytes is shorter than the {want}-byte header")]
    ShortHeader { got: usize, want: usize },
    #[error("header says {said} bytes but the read returned {got}")]
    LengthMismatch { said: usize, got: usize },
    #[error("opcode {opcode} (unique {unique}): body of {got} bytes, need {want}")]
    ShortBody {
        opcode: u32,
        unique: u64,
        got: usize,
        want: usize,
    },
    #[error("ioctl (unique {unique}) says in_size {said} but carries {got} bytes")]
    IoctlData {
        unique: u64,
        said: usize,
        got: usize,
    },
}

impl WireError {
    /// The request to answer with an error, when the header was readable.
    pub fn unique(&self) -> Option<u64> {
        match self {
            WireError::ShortHeader { .. } | WireError::LengthMismatch { .. } => None,
            WireError::ShortBody { unique, .. } | WireError::IoctlData { unique, .. } => {
                Some(*unique)
            }
        }
    }
}

/// What the kernel asks: every opcode the device sees, over any channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op<'a> {
    CuseInit(CuseInitIn),
    /// FUSE INIT: answered by the channel's handshake, never after it.
    Init(FuseInitIn),
    /// About the filesystem around the device file (FUSE only).
    Fs(FsOp<'a>),
    Open(FuseOpenIn),
    Read(FuseReadIn),
    /// The written bytes are not kept: the device has no write method.
    Write(FuseWriteIn),
    Release(FuseReleaseIn),
    Flush(FuseFlushIn),
    Ioctl {
        arg: FuseIoctlIn,
        /// `in_size` bytes the kernel copied from the caller's in-iovecs.
        data: &'a [u8],
    },
    Poll(FusePollIn),
    Interrupt(FuseInterruptIn),
    Destroy,
    /// FORGET, BATCH_FORGET, NOTIFY_REPLY: the kernel expects no reply.
    NoReply(u32),
    /// Anything else: ENOSYS.
    Other(u32),
}

/// A request about the filesystem around the device file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsOp<'a> {
    /// A name in the root directory (NUL excluded).
    Lookup(&'a [u8]),
    Getattr,
    Setattr(FuseSetattrIn),
    Opendir,
    Readdir(FuseReadIn),
    Releasedir,
    Statfs,
    Fsync,
    Create,
    Unlink,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub header: FuseInHeader,
    pub op: Op<'a>,
}

fn body<T: FromBytes>(header: &FuseInHeader, bytes: &[u8]) -> Result<T, WireError> {
    T::read_from_prefix(bytes)
        .map(|(value, _)| value)
        .map_err(|_| WireError::ShortBody {
            opcode: header.opcode,
            unique: header.unique,
            got: bytes.len(),
            want: size_of::<T>(),
        })
}

/// Parses one request exactly as read from the channel.
pub fn parse(buf: &[u8]) -> Result<Request<'_>, WireError> {
    let (header, rest) =
        FuseInHeader::read_from_prefix(buf).map_err(|_| WireError::ShortHeader {
            got: buf.len(),
            want: size_of::<FuseInHeader>(),
        })?;
    if header.len as usize != buf.len() {
        return Err(WireError::LengthMismatch {
            said: header.len as usize,
            got: buf.len(),
        });
    }
    let h = &header;
    let op = match header.opcode {
        CUSE_INIT => Op::CuseInit(body(h, rest)?),
        FUSE_INIT => Op::Init(body(h, rest)?),
        FUSE_LOOKUP => Op::Fs(FsOp::Lookup(
            rest.split(|&b| b == 0).next().unwrap_or_default(),
        )),
        FUSE_GETATTR => Op::Fs(FsOp::Getattr),
        FUSE_SETATTR => Op::Fs(FsOp::Setattr(body(h, rest)?)),
        FUSE_OPENDIR => Op::Fs(FsOp::Opendir),
        FUSE_READDIR => Op::Fs(FsOp::Readdir(body(h, rest)?)),
        FUSE_RELEASEDIR => Op::Fs(FsOp::Releasedir),
        FUSE_STATFS => Op::Fs(FsOp::Statfs),
        FUSE_FSYNC => Op::Fs(FsOp::Fsync),
        FUSE_CREATE => Op::Fs(FsOp::Create),
        FUSE_UNLINK => Op::Fs(FsOp::Unlink),
        FUSE_OPEN => Op::Open(body(h, rest)?),
        FUSE_READ => Op::Read(body(h, rest)?),
        FUSE_WRITE => Op::Write(body(h, rest)?),
        FUSE_RELEASE => Op::Release(body(h, rest)?),
        FUSE_FLUSH => Op::Flush(body(h, rest)?),
        FUSE_IOCTL => {
            let arg: FuseIoctlIn = body(h, rest)?;
            let data = &rest[size_of::<FuseIoctlIn>()..];
            if data.len() != arg.in_size as usize {
                return Err(WireError::IoctlData {
                    unique: header.unique,
                    said: arg.in_size as usize,
                    got: data.len(),
                });
            }
            Op::Ioctl { arg, data }
        }
        FUSE_POLL => Op::Poll(body(h, rest)?),
        FUSE_INTERRUPT => Op::Interrupt(body(h, rest)?),
        FUSE_DESTROY => Op::Destroy,
        FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_NOTIFY_REPLY => Op::NoReply(header.opcode),
        other => Op::Other(other),
    };
    Ok(Request { header, op })
}

/// Opcode names for the log.
pub fn opcode_name(opcode: u32) -> &'static str {
    match opcode {
        CUSE_INIT => "CUSE_INIT",
        FUSE_INIT => "INIT",
        FUSE_LOOKUP => "LOOKUP",
        FUSE_GETATTR => "GETATTR",
        FUSE_SETATTR => "SETATTR",
        FUSE_OPENDIR => "OPENDIR",
        FUSE_READDIR => "READDIR",
        FUSE_RELEASEDIR => "RELEASEDIR",
        FUSE_STATFS => "STATFS",
        FUSE_CREATE => "CREATE",
        FUSE_UNLINK => "UNLINK",
        FUSE_OPEN => "OPEN",
        FUSE_READ => "READ",
        FUSE_WRITE => "WRITE",
        FUSE_RELEASE => "RELEASE",
        FUSE_FSYNC => "FSYNC",
        FUSE_FLUSH => "FLUSH",
        FUSE_IOCTL => "IOCTL",
        FUSE_POLL => "POLL",
        FUSE_INTERRUPT => "INTERRUPT",
        FUSE_DESTROY => "DESTROY",
        FUSE_FORGET => "FORGET",
        FUSE_BATCH_FORGET => "BATCH_FORGET",
        FUSE_NOTIFY_REPLY => "NOTIFY_REPLY",
        _ => "?",
    }
}

/// A successful reply: the out header then `parts` back to back.
pub fn reply(unique: u64, parts: &[&[u8]]) -> Vec<u8> {
    let len = size_of::<FuseOutHeader>() + parts.iter().map(|p| p.len()).sum::<usize>();
    let header = FuseOutHeader {
        len: len as u32,
        error: 0,
        unique,
    };
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(header.as_bytes());
    for part in parts {
        out.extend_from_slice(part);
    }
    out
}

/// An error reply: the out header alone with `-errno`.
pub fn reply_error(unique: u64, errno: nix::errno::Errno) -> Vec<u8> {
    let header = FuseOutHeader {
        len: size_of::<FuseOutHeader>() as u32,
        error: -(errno as i32),
        unique,
    };
    header.as_bytes().to_vec()
}

/// A reply made of one structure.
pub fn reply_struct<T: IntoBytes + Immutable + KnownLayout>(unique: u64, value: &T) -> Vec<u8> {
    reply(unique, &[value.as_bytes()])
}

/// The CUSE_INIT reply: `cuse_init_out` then the NUL-terminated
/// `key=value` device-info strings (`DEVNAME=<name>`).
pub fn init_reply(unique: u64, out: &CuseInitOut, dev_name: &str) -> Vec<u8> {
    let info = format!("DEVNAME={dev_name}\0");
    reply(unique, &[out.as_bytes(), info.as_bytes()])
}

/// An IOCTL reply asking the kernel to retry with these iovecs.
pub fn ioctl_retry_reply(
    unique: u64,
    in_iovs: &[FuseIoctlIovec],
    out_iovs: &[FuseIoctlIovec],
) -> Vec<u8> {
    let out = FuseIoctlOut {
        result: 0,
        flags: FUSE_IOCTL_RETRY,
        in_iovs: in_iovs.len() as u32,
        out_iovs: out_iovs.len() as u32,
    };
    reply(
        unique,
        &[out.as_bytes(), in_iovs.as_bytes(), out_iovs.as_bytes()],
    )
}

/// A final IOCTL reply: result 0 and the bytes for the out-iovecs, in order.
pub fn ioctl_data_reply(unique: u64, data: &[u8]) -> Vec<u8> {
    let out = FuseIoctlOut::default();
    reply(unique, &[out.as_bytes(), data])
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    fn header(len: usize, opcode: u32, unique: u64, pid: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(&opcode.to_le_bytes());
        b.extend_from_slice(&unique.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes()); // nodeid
        b.extend_from_slice(&1000u32.to_le_bytes()); // uid
        b.extend_from_slice(&100u32.to_le_bytes()); // gid
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&[0, 0, 0, 0]); // total_extlen, padding
        assert_eq!(b.len(), 40);
        b
    }

    #[test]
    fn parses_cuse_init() {
        let mut b = header(56, CUSE_INIT, 2, 0);
        for v in [7u32, 38, 0, CUSE_UNRESTRICTED_IOCTL] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let r = parse(&b).unwrap();
        assert_eq!(r.header.unique, 2);
        assert_eq!(r.header.uid, 1000);
        assert_eq!(
            r.op,
            Op::CuseInit(CuseInitIn {
                major: 7,
                minor: 38,
                unused: 0,
                flags: CUSE_UNRESTRICTED_IOCTL
            })
        );
    }

    #[test]
    fn parses_open_with_mode_bits() {
        let flags = (libc::O_RDONLY | libc::O_DSYNC | libc::O_LARGEFILE) as u32;
        let mut b = header(48, FUSE_OPEN, 4, 321);
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        let r = parse(&b).unwrap();
        assert_eq!(r.header.pid, 321);
        assert_eq!(
            r.op,
            Op::Open(FuseOpenIn {
                flags,
                open_flags: 0
            })
        );
    }

    #[test]
    fn parses_read_release_flush_poll_interrupt() {
        let mut b = header(80, FUSE_READ, 6, 9);
        b.extend_from_slice(&7u64.to_le_bytes()); // fh
        b.extend_from_slice(&4096u64.to_le_bytes()); // offset
        b.extend_from_slice(&131072u32.to_le_bytes()); // size
        b.extend_from_slice(&[0; 4 + 8 + 4 + 4]);
        let Op::Read(read) = parse(&b).unwrap().op else {
            panic!()
        };
        assert_eq!((read.fh, read.offset, read.size), (7, 4096, 131072));

        let mut b = header(64, FUSE_RELEASE, 8, 0);
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&[0; 16]);
        assert!(matches!(parse(&b).unwrap().op, Op::Release(r) if r.fh == 7));

        let mut b = header(64, FUSE_FLUSH, 10, 9);
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&[0; 16]);
        assert!(matches!(parse(&b).unwrap().op, Op::Flush(r) if r.fh == 7));

        let mut b = header(64, FUSE_POLL, 12, 9);
        b.extend_from_slice(&[0; 24]);
        assert!(matches!(parse(&b).unwrap().op, Op::Poll(_)));

        let mut b = header(48, FUSE_INTERRUPT, 13 | FUSE_INT_REQ_BIT, 0);
        b.extend_from_slice(&12u64.to_le_bytes());
        assert_eq!(
            parse(&b).unwrap().op,
            Op::Interrupt(FuseInterruptIn { unique: 12 })
        );
    }

    #[test]
    fn parses_ioctl_with_and_without_data() {
        let cmd = 0x4008_5006u32; // _IOW('P', 6, 8)
        let mut b = header(72, FUSE_IOCTL, 14, 9);
        b.extend_from_slice(&3u64.to_le_bytes()); // fh
        b.extend_from_slice(&FUSE_IOCTL_UNRESTRICTED.to_le_bytes());
        b.extend_from_slice(&cmd.to_le_bytes());
        b.extend_from_slice(&0x7fff_0000_1000u64.to_le_bytes()); // arg
        b.extend_from_slice(&0u32.to_le_bytes()); // in_size
        b.extend_from_slice(&0u32.to_le_bytes()); // out_size
        let r = parse(&b).unwrap();
        let Op::Ioctl { arg, data } = r.op else {
            panic!()
        };
        assert_eq!((arg.fh, arg.cmd, arg.arg), (3, cmd, 0x7fff_0000_1000));
        assert!(data.is_empty());

        // The retried request carries in_size bytes after fuse_ioctl_in.
        let mut b = header(80, FUSE_IOCTL, 15, 9);
        b.extend_from_slice(&3u64.to_le_bytes());
        b.extend_from_slice(&FUSE_IOCTL_UNRESTRICTED.to_le_bytes());
        b.extend_from_slice(&cmd.to_le_bytes());
        b.extend_from_slice(&0x7fff_0000_1000u64.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0xdead_beefu64.to_le_bytes());
        let Op::Ioctl { arg, data } = parse(&b).unwrap().op else {
            panic!()
        };
        assert_eq!(arg.in_size, 8);
        assert_eq!(data, 0xdead_beefu64.to_le_bytes());
    }

    #[test]
    fn rejects_malformed_requests() {
        assert_eq!(
            parse(&[0; 10]),
            Err(WireError::ShortHeader { got: 10, want: 40 })
        );
        let b = header(41, FUSE_OPEN, 4, 1);
        assert_eq!(
            parse(&b),
            Err(WireError::LengthMismatch { said: 41, got: 40 })
        );
        let b = header(40, FUSE_OPEN, 4, 1);
        let err = parse(&b).unwrap_err();
        assert_eq!(err.unique(), Some(4));
        let mut b = header(80, FUSE_IOCTL, 16, 9);
        b.extend_from_slice(&[0; 24]); // fh, flags, cmd, arg
        b.extend_from_slice(&4u32.to_le_bytes()); // in_size 4, but 8 follow
        b.extend_from_slice(&[0; 4 + 8]); // out_size, data
        assert!(matches!(
            parse(&b),
            Err(WireError::IoctlData {
                unique: 16,
                said: 4,
                got: 8
            })
        ));
    }

    #[test]
    fn no_reply_and_unknown_opcodes() {
        let b = header(40, FUSE_DESTROY, 20, 0);
        assert_eq!(parse(&b).unwrap().op, Op::Destroy);
        let mut b = header(48, FUSE_FORGET, 21, 0);
        b.extend_from_slice(&[0; 8]);
        assert_eq!(parse(&b).unwrap().op, Op::NoReply(FUSE_FORGET));
        let b = header(40, 13, 22, 0); // FUSE_MKNOD: nothing we serve
        assert_eq!(parse(&b).unwrap().op, Op::Other(13));
    }

    #[test]
    fn parses_filesystem_requests() {
        let mut b = header(47, FUSE_LOOKUP, 23, 9);
        b.extend_from_slice(b"pfcntr\0");
        assert_eq!(parse(&b).unwrap().op, Op::Fs(FsOp::Lookup(b"pfcntr")));
        let mut b = header(128, FUSE_SETATTR, 24, 9);
        let mut set = [0u8; 88];
        set[0..4].copy_from_slice(&FATTR_SIZE.to_le_bytes());
        set[16..24].copy_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&set);
        let Op::Fs(FsOp::Setattr(set)) = parse(&b).unwrap().op else {
            panic!()
        };
        assert_eq!((set.valid, set.size), (FATTR_SIZE, 5));
        let b = header(40, FUSE_GETATTR, 25, 9);
        assert_eq!(parse(&b).unwrap().op, Op::Fs(FsOp::Getattr));
        let b = header(40, FUSE_STATFS, 26, 9);
        assert_eq!(parse(&b).unwrap().op, Op::Fs(FsOp::Statfs));
        let mut b = header(104, FUSE_INIT, 27, 0);
        let mut init = [0u8; 64];
        init[0..4].copy_from_slice(&7u32.to_le_bytes());
        init[4..8].copy_from_slice(&45u32.to_le_bytes());
        b.extend_from_slice(&init);
        assert!(matches!(parse(&b).unwrap().op, Op::Init(i) if i.minor == 45));
        // A SETATTR too short for fuse_setattr_in: answered EIO.
        let b = header(40, FUSE_SETATTR, 28, 9);
        assert_eq!(parse(&b).unwrap_err().unique(), Some(28));
    }

    #[test]
    fn error_reply_layout() {
        let r = reply_error(0x1122_3344_5566_7788, Errno::ENOTTY);
        assert_eq!(
            r,
            [
                16, 0, 0, 0, // len
                0xe7, 0xff, 0xff, 0xff, // -25
                0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // unique
            ]
        );
    }

    #[test]
    fn open_reply_layout() {
        let r = reply_struct(
            5,
            &FuseOpenOut {
                fh: 9,
                open_flags: FOPEN_DIRECT_IO | FOPEN_NONSEEKABLE | FOPEN_STREAM,
                padding: 0,
            },
        );
        assert_eq!(r.len(), 32);
        assert_eq!(&r[0..4], &32u32.to_le_bytes());
        assert_eq!(&r[4..8], &0i32.to_le_bytes());
        assert_eq!(&r[8..16], &5u64.to_le_bytes());
        assert_eq!(&r[16..24], &9u64.to_le_bytes());
        assert_eq!(&r[24..28], &0x15u32.to_le_bytes());
    }

    #[test]
    fn init_reply_layout() {
        let out = CuseInitOut {
            major: 7,
            minor: 31,
            flags: CUSE_UNRESTRICTED_IOCTL,
            max_read: 131072,
            max_write: 4096,
            ..Default::default()
        };
        let r = init_reply(2, &out, "pfcntr");
        let info = b"DEVNAME=pfcntr\0";
        assert_eq!(r.len(), 16 + 72 + info.len());
        assert_eq!(&r[0..4], &(r.len() as u32).to_le_bytes());
        assert_eq!(&r[16..20], &7u32.to_le_bytes());
        assert_eq!(&r[20..24], &31u32.to_le_bytes());
        assert_eq!(&r[28..32], &1u32.to_le_bytes());
        assert_eq!(&r[32..36], &131072u32.to_le_bytes());
        assert_eq!(&r[36..40], &4096u32.to_le_bytes());
        assert_eq!(&r[40..48], &[0; 8]); // dev_major, dev_minor: allocate
        assert_eq!(&r[88..], info);
    }

    #[test]
    fn ioctl_retry_reply_layout() {
        let r = ioctl_retry_reply(
            7,
            &[FuseIoctlIovec {
                base: 0x1000,
                len: 8,
            }],
            &[
                FuseIoctlIovec {
                    base: 0x1000,
                    len: 8,
                },
                FuseIoctlIovec {
                    base: 0x2000,
                    len: 48,
                },
            ],
        );
        assert_eq!(r.len(), 16 + 16 + 3 * 16);
        assert_eq!(&r[16..20], &0i32.to_le_bytes()); // result
        assert_eq!(&r[20..24], &FUSE_IOCTL_RETRY.to_le_bytes());
        assert_eq!(&r[24..28], &1u32.to_le_bytes()); // in_iovs
        assert_eq!(&r[28..32], &2u32.to_le_bytes()); // out_iovs
        assert_eq!(&r[32..40], &0x1000u64.to_le_bytes());
        assert_eq!(&r[40..48], &8u64.to_le_bytes());
        assert_eq!(&r[64..72], &0x2000u64.to_le_bytes());
        assert_eq!(&r[72..80], &48u64.to_le_bytes());
    }

    #[test]
    fn ioctl_data_reply_layout() {
        let r = ioctl_data_reply(9, &[1, 2, 3]);
        assert_eq!(r.len(), 16 + 16 + 3);
        assert_eq!(&r[16..32], &[0; 16]);
        assert_eq!(&r[32..], &[1, 2, 3]);
    }
}
