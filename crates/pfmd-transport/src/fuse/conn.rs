//! The FUSE connection on `/dev/fuse`: mount(2), the INIT handshake (always
//! over read/write: io_uring commands are `EAGAIN` before it), cloned files
//! for the classic readers ([`crate::reader`]), and how those deliver the
//! replies that wait (an open for its release, a store in the caller's
//! memory): written by the thread that has them when they are ready.

use super::FuseError;
use crate::abi::*;
use crate::device::{DeviceError, FileId};
use crate::handler::opened_reply;
use crate::open_waiter::{OpenReply, OpenWaiter, PendingOpen};
use crate::reader::{self, Waits};
use crate::store::{ClassicLink, StoreJob};
use crate::wire;
use nix::mount::{MsFlags, mount};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use zerocopy::FromBytes;

/// The FUSE control device.
pub const FUSE_DEVICE: &str = "/dev/fuse";
/// Pages per request: the kernel's default, 128 KiB, the size of each piece
/// a large read(2) arrives in.
pub const MAX_PAGES: u16 = 32;
/// The device has no write method; the kernel's minimum.
pub const MAX_WRITE: u32 = 4096;
/// The payload buffer of a ring entry: the kernel wants at least
/// max(8 KiB, max_write, max_pages pages).
pub const RING_PAYLOAD: usize = MAX_PAGES as usize * 4096;
/// A classic read buffer: the largest request (an ioctl or a write of
/// `RING_PAYLOAD`) and its headers.
pub const READ_BUFFER: usize = RING_PAYLOAD + 4096;

/// What INIT settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub minor: u32,
    /// The kernel offered FUSE_OVER_IO_URING and we took it.
    pub uring: bool,
}

fn open_device() -> Result<File, FuseError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(FUSE_DEVICE)
        .map_err(FuseError::io(format!("opening {FUSE_DEVICE}")))
}

/// Opens `/dev/fuse` and mounts it on `mountpoint` (nosuid, nodev, noexec,
/// default_permissions, allow_other: every user reaches the file, and the
/// kernel checks its mode). Needs root: `EPERM` is [`FuseError::Mount`].
pub fn mount_device(mountpoint: &Path) -> Result<File, FuseError> {
    let dev = open_device()?;
    let data = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,default_permissions,allow_other",
        dev.as_raw_fd()
    );
    mount(
        Some("pfm"),
        mountpoint,
        Some("fuse.pfmd"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(data.as_str()),
    )
    .map_err(|errno| FuseError::Mount {
        path: mountpoint.to_path_buf(),
        source: io::Error::from(errno),
    })?;
    Ok(dev)
}

/// Reads INIT and answers it, taking FUSE_OVER_IO_URING when `want_uring`
/// and the kernel offers it (only while `enable_uring` is `Y`).
pub fn handshake(dev: &File, want_uring: bool) -> Result<Negotiated, FuseError> {
    let mut buf = vec![0u8; READ_BUFFER];
    let n = (&*dev)
        .read(&mut buf)
        .map_err(FuseError::io("reading INIT"))?;
    let (h, rest) = FuseInHeader::read_from_prefix(&buf[..n])
        .map_err(|_| FuseError::Protocol(format!("INIT of {n} bytes")))?;
    if h.opcode != FUSE_INIT {
        return Err(FuseError::Protocol(format!(
            "first request has opcode {}, not INIT",
            h.opcode
        )));
    }
    let (init, _) = FuseInitIn::read_from_prefix(rest)
        .map_err(|_| FuseError::Protocol("INIT shorter than fuse_init_in".into()))?;
    let (reply, negotiated) = init_reply(h.unique, &init, want_uring)?;
    tracing::debug!(
        kernel = format!("{}.{}", init.major, init.minor),
        speaking = format!("{FUSE_KERNEL_VERSION}.{}", negotiated.minor),
        uring = negotiated.uring,
        "FUSE INIT"
    );
    (&*dev)
        .write_all(&reply)
        .map_err(FuseError::io("answering INIT"))?;
    Ok(negotiated)
}

/// The INIT reply for what the kernel sent.
pub fn init_reply(
    unique: u64,
    init: &FuseInitIn,
    want_uring: bool,
) -> Result<(Vec<u8>, Negotiated), FuseError> {
    // 7.23 is the first minor whose INIT reply carries max_pages.
    if init.major != FUSE_KERNEL_VERSION || init.minor < 23 {
        return Err(FuseError::Protocol(format!(
            "the kernel speaks FUSE {}.{}; pfmd needs 7.23",
            init.major, init.minor
        )));
    }
    let ext = init.flags & FUSE_INIT_EXT != 0;
    let uring = want_uring && ext && init.flags2 & FUSE_OVER_IO_URING_FLAGS2 != 0;
    let minor = init.minor.min(PFMD_FUSE_MINOR);
    let out = FuseInitOut {
        major: FUSE_KERNEL_VERSION,
        minor,
        max_readahead: init.max_readahead,
        flags: FUSE_MAX_PAGES | if ext { FUSE_INIT_EXT } else { 0 },
        flags2: if uring { FUSE_OVER_IO_URING_FLAGS2 } else { 0 },
        max_background: 16,
        congestion_threshold: 12,
        max_write: MAX_WRITE,
        time_gran: 1,
        max_pages: MAX_PAGES,
        ..Default::default()
    };
    Ok((
        wire::reply_struct(unique, &out),
        Negotiated { minor, uring },
    ))
}

/// A further file on the connection (`FUSE_DEV_IOC_CLONE`), so that each
/// classic reader has its own.
pub fn clone_device(master: &File) -> Result<File, FuseError> {
    let dev = open_device()?;
    nix::ioctl_write_ptr_bad!(fuse_dev_ioc_clone, FUSE_DEV_IOC_CLONE, u32);
    let id = master.as_raw_fd() as u32;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one u32, the master's descriptor,
    // from the pointer, which points at a live u32; both files are open.
    unsafe { fuse_dev_ioc_clone(dev.as_raw_fd(), &id) }.map_err(|e| FuseError::Io {
        what: "FUSE_DEV_IOC_CLONE".into(),
        source: io::Error::from(e),
    })?;
    Ok(dev)
}

/// An open answered later on the classic channel: any thread may write a
/// reply to `/dev/fuse`.
pub struct ClassicReply {
    pub dev: Arc<File>,
    pub unique: u64,
}

impl OpenReply for ClassicReply {
    fn opened(self, id: FileId) {
        reader::send_aside(&self.dev, &opened_reply(self.unique, id));
    }
    fn refused(self, error: &DeviceError) {
        reader::send_aside(&self.dev, &wire::reply_error(self.unique, error.errno()));
    }
}

/// How a classic reader delivers answers that wait: an open through the
/// open waiter, a store through the store helper, which writes the reply
/// to the clone the request was read from.
pub struct ClassicWaits {
    pub waiter: OpenWaiter<ClassicReply>,
    pub stores: ClassicLink,
}

impl Waits for ClassicWaits {
    fn wait_for_release(
        &self,
        file: &Arc<File>,
        unique: u64,
        open: PendingOpen,
    ) -> Option<Vec<u8>> {
        let dev = Arc::clone(file);
        self.waiter.wait(open, ClassicReply { dev, unique });
        None
    }

    fn store(&self, job: StoreJob, reader: usize) -> Option<Vec<u8>> {
        let job = StoreJob {
            tag: reader as u64,
            ..job
        };
        match self.stores.submit(&job) {
            Ok(()) => None,
            Err(errno) => Some(wire::reply_error(job.unique, errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn init(minor: u32, flags: u32, flags2: u32) -> FuseInitIn {
        FuseInitIn {
            major: 7,
            minor,
            max_readahead: 131072,
            flags,
            flags2,
            ..Default::default()
        }
    }

    #[test]
    fn init_reply_takes_io_uring_only_when_offered_and_wanted() {
        let offered = init(45, FUSE_INIT_EXT, FUSE_OVER_IO_URING_FLAGS2);
        let (reply, n) = init_reply(3, &offered, true).unwrap();
        assert_eq!(
            n,
            Negotiated {
                minor: 42,
                uring: true
            }
        );
        assert_eq!(reply.len(), 16 + 64);
        assert_eq!(&reply[0..4], &80u32.to_le_bytes());
        assert_eq!(&reply[8..16], &3u64.to_le_bytes());
        let out = FuseInitOut::read_from_bytes(&reply[16..]).unwrap();
        assert_eq!((out.major, out.minor), (7, 42));
        assert_eq!(out.flags, FUSE_MAX_PAGES | FUSE_INIT_EXT);
        assert_eq!(out.flags2, FUSE_OVER_IO_URING_FLAGS2);
        assert_eq!(&reply[16 + 32..16 + 36], &(1u32 << 9).to_le_bytes()); // flags2
        assert_eq!(&reply[16 + 28..16 + 30], &32u16.to_le_bytes()); // max_pages
        assert_eq!(out.max_readahead, 131072);

        let (reply, n) = init_reply(3, &offered, false).unwrap();
        assert!(!n.uring);
        assert_eq!(
            FuseInitOut::read_from_bytes(&reply[16..]).unwrap().flags2,
            0
        );

        // enable_uring=N: not offered.
        let (_, n) = init_reply(3, &init(45, FUSE_INIT_EXT, 0), true).unwrap();
        assert!(!n.uring);
        // No FUSE_INIT_EXT: flags2 means nothing.
        let (reply, n) = init_reply(3, &init(38, 0, FUSE_OVER_IO_URING_FLAGS2), true).unwrap();
        assert_eq!(
            n,
            Negotiated {
                minor: 38,
                uring: false
            }
        );
        assert_eq!(
            FuseInitOut::read_from_bytes(&reply[16..]).unwrap().flags,
            FUSE_MAX_PAGES
        );

        assert!(init_reply(3, &init(22, 0, 0), true).is_err());
    }
}
