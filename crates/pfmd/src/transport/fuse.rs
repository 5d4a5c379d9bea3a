//! The FUSE transport: a one-file filesystem whose `pfcntr` file is the
//! device. FUSE ioctls on regular files are restricted, so pointer arguments
//! are stored with `process_vm_writev` on the calling thread (docs/device.md
//! §1).
//!
//! FUSE sends RELEASE after `close(2)` has returned, so an open right after a
//! close (by the same process, or the next one of a script) can find the
//! device still held; such an open is answered by the
//! [`super::open_waiter`] thread when the release arrives.

use super::cuse::ioctl::check_store;
use super::open_waiter::{OpenReply, OpenWaiter, Opened, try_open};
use crate::device::memory::store_to_caller;
use crate::device::{Device, FileId};
use crate::policy::Caller;
use fuser::{
    BackgroundSession, BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, IoctlFlags, KernelConfig, LockOwner, MountOption, OpenFlags,
    PollEvents, PollFlags, PollNotifier, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock, ReplyOpen, ReplyPoll, ReplyWrite, ReplyXattr,
    Request, SessionACL, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub const FILE_NAME: &str = "pfcntr";
const ROOT: INodeNo = INodeNo(1);
const DEVICE_INO: INodeNo = INodeNo(2);
const TTL: Duration = Duration::from_secs(3600);

/// The open flags of the device file: direct I/O and stream, so every read
/// reaches us and its offsets are ours to interpret (docs/device.md §6), and
/// the file is not seekable.
const OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_DIRECT_IO
    .union(FopenFlags::FOPEN_NONSEEKABLE)
    .union(FopenFlags::FOPEN_STREAM);

#[derive(Debug, Clone)]
pub struct FuseOptions {
    pub mountpoint: PathBuf,
    /// Permission bits of the `pfcntr` file.
    pub mode: u16,
    /// Reader threads: more than one so a slow request never stalls the others.
    pub threads: usize,
}

struct PfmFs {
    device: Arc<Device>,
    mode: u16,
    started: SystemTime,
    waiter: OpenWaiter<ReplyOpen>,
}

impl OpenReply for ReplyOpen {
    fn opened(self, id: FileId) {
        ReplyOpen::opened(self, FileHandle(id), OPEN_FLAGS);
    }
    fn refused(self, error: &crate::device::DeviceError) {
        self.error(errno(error));
    }
}

impl PfmFs {
    fn attr(&self, ino: INodeNo) -> FileAttr {
        let (kind, perm, nlink) = if ino == ROOT {
            (FileType::Directory, 0o755, 2)
        } else {
            (FileType::RegularFile, self.mode, 1)
        };
        FileAttr {
            ino,
            size: 0,
            blocks: 0,
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

fn errno(e: &crate::device::DeviceError) -> Errno {
    Errno::from_i32(e.errno() as i32)
}

fn caller_of(req: &Request) -> Caller {
    Caller::from_tid(req.pid() as i32)
}

impl Filesystem for PfmFs {
    fn init(&mut self, _req: &Request, _config: &mut KernelConfig) -> io::Result<()> {
        tracing::debug!("FUSE session initialised");
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent == ROOT && name == FILE_NAME {
            reply.entry(&TTL, &self.attr(DEVICE_INO), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino == ROOT || ino == DEVICE_INO {
            reply.attr(&TTL, &self.attr(ino));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino != ROOT {
            reply.error(Errno::ENOTDIR);
            return;
        }
        let entries = [
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
            (DEVICE_INO, FileType::RegularFile, FILE_NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(*ino, i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if ino != DEVICE_INO {
            reply.error(Errno::EISDIR);
            return;
        }
        match try_open(&self.device, caller_of(req), flags.0) {
            Opened::Now(id) => reply.opened(FileHandle(id), OPEN_FLAGS),
            Opened::Refused(e) => reply.error(errno(&e)),
            Opened::Wait(pending) => self.waiter.wait(pending, reply),
        }
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self
            .device
            .read(fh.0 as FileId, &caller_of(req), offset, size)
        {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.device.write(fh.0 as FileId) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.device.flush(fh.0 as FileId, &caller_of(req));
        reply.ok();
    }

    /// `O_TRUNC` reaches FUSE as a truncation to 0, which a character
    /// device ignores; everything else about the file is fixed.
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if ino == DEVICE_INO && mode.is_none() && uid.is_none() && gid.is_none() {
            if size.is_some_and(|s| s != 0) {
                reply.error(Errno::EINVAL);
            } else {
                reply.attr(&TTL, &self.attr(ino));
            }
        } else {
            reply.error(Errno::EPERM);
        }
    }

    /// No extended attributes; ENOSYS makes the kernel stop asking.
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    /// A character device has no fsync method.
    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _data: bool,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EINVAL);
    }

    /// ENOSYS: the kernel keeps POSIX locks itself, as for a device.
    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn setlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        _start: u64,
        _end: u64,
        _typ: i32,
        _pid: u32,
        _sleep: bool,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    /// ENOSYS: the kernel then takes the device as always ready, which it is.
    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: PollNotifier,
        _events: PollEvents,
        _flags: PollFlags,
        reply: ReplyPoll,
    ) {
        reply.error(Errno::ENOSYS);
    }

    /// The one file is all there is.
    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::EPERM);
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EPERM);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.device.release(fh.0 as FileId);
        reply.ok();
    }

    fn ioctl(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let caller = caller_of(req);
        let result = self
            .device
            .ioctl(fh.0 as FileId, &caller, cmd, in_data)
            .and_then(|r| {
                if let Some(store) = r.store.as_ref().filter(|s| !s.bytes.is_empty()) {
                    check_store(cmd, in_data, store)?;
                    store_to_caller(caller.tid(), store.addr, &store.bytes)?;
                }
                Ok(r)
            });
        match result {
            Ok(r) => {
                // The kernel copies exactly _IOC_SIZE(cmd) bytes back.
                let mut out = r.out;
                out.resize(out_size as usize, 0);
                reply.ioctl(0, &out);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}

/// A mounted device. Dropping it unmounts.
pub struct FuseTransport {
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
    pub device_path: PathBuf,
}

impl FuseTransport {
    /// Mounts the filesystem, replacing a stale mount a crashed pfmd left.
    pub fn mount(device: Arc<Device>, options: &FuseOptions) -> io::Result<FuseTransport> {
        prepare_mountpoint(&options.mountpoint)?;
        let waiter = OpenWaiter::start(Arc::clone(&device), "pfm-open-waiter")?;
        let fs = PfmFs {
            device,
            mode: options.mode,
            started: SystemTime::now(),
            waiter,
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("pfm".into()),
            MountOption::Subtype("pfmd".into()),
            MountOption::DefaultPermissions,
            MountOption::NoSuid,
            MountOption::NoDev,
            MountOption::NoExec,
        ];
        config.acl = SessionACL::All;
        config.n_threads = Some(options.threads.max(2));
        config.clone_fd = true;
        let session = fuser::spawn_mount(fs, &options.mountpoint, &config)?;
        let device_path = options.mountpoint.join(FILE_NAME);
        tracing::info!(path = %device_path.display(), "FUSE transport mounted");
        Ok(FuseTransport {
            session: Some(session),
            mountpoint: options.mountpoint.clone(),
            device_path,
        })
    }

    /// Unmounts. With clients still holding the device a plain unmount is
    /// EBUSY: then the mount is detached, and the connection ends when this
    /// process exits (those clients get ENOTCONN from then on).
    pub fn unmount(mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        match session.umount_and_join() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                tracing::warn!("clients still hold the device: detaching the mount");
                nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH)
                    .map_err(io::Error::from)
            }
            other => other,
        }
    }
}

impl Drop for FuseTransport {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let _ = session.umount_and_join();
        }
    }
}

/// Makes `path` a usable mountpoint: created if missing; a dead FUSE mount
/// (ENOTCONN after a crash) lazily unmounted; a live pfm mount refused.
/// `statfs` always reaches the FUSE server (attributes may be cached), so it
/// tells a dead mount from a live one without opening the device.
pub(super) fn prepare_mountpoint(path: &Path) -> io::Result<()> {
    match nix::sys::statfs::statfs(path) {
        Err(nix::errno::Errno::ENOTCONN) => {
            tracing::warn!(path = %path.display(), "stale FUSE mount from a crashed daemon: detaching it");
            nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH).map_err(io::Error::from)?;
            Ok(())
        }
        Err(nix::errno::Errno::ENOENT) => std::fs::create_dir_all(path),
        Err(e) => Err(io::Error::from(e)),
        Ok(fs)
            if fs.filesystem_type() == nix::sys::statfs::FUSE_SUPER_MAGIC
                && std::fs::symlink_metadata(path.join(FILE_NAME)).is_ok() =>
        {
            Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{} is already served (is another pfmd running?)",
                    path.display()
                ),
            ))
        }
        Ok(_) => Ok(()),
    }
}
