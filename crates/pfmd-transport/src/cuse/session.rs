//! The CUSE session: the CUSE_INIT handshake, then reader threads
//! ([`crate::reader`]) that take requests off the channel and deliver the
//! [`Handler`](crate::handler::Handler)'s answers.

use super::CuseError;
use crate::abi::*;
use crate::life::Life;
use crate::open_waiter::PendingOpen;
use crate::reader::{self, Ended, Reader, Received, Waits};
use crate::store::StoreJob;
use crate::wire::{self, Op};
use nix::errno::Errno;
use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Bytes a read of a request needs: the largest is an ioctl carrying a full
/// CUSE transfer of argument bytes.
pub const REQUEST_BUFFER: usize = CUSE_MAX_TRANSFER + 4096;
/// The largest piece of a `read(2)` we accept in one request; the kernel
/// caps it to its 32-page limit anyway (docs/device.md §6: big reads arrive in
/// pieces).
pub const MAX_READ: u32 = CUSE_MAX_TRANSFER as u32;
/// The device has no write method; the kernel wants at least a page.
pub const MAX_WRITE: u32 = 4096;

/// Answers the kernel's CUSE_INIT so it creates `/dev/<dev_name>`.
pub fn handshake(channel: &File, dev_name: &str) -> Result<(), CuseError> {
    let mut buf = vec![0u8; REQUEST_BUFFER];
    let n = match reader::receive(channel, &mut buf, &AtomicBool::new(false))
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
        let _ = reader::send(channel, &reply);
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
        // Unrestricted ioctls: a pointer ioctl's array is named in a retry
        // and the kernel copies it in the caller's thread (ioctl.rs).
        flags: CUSE_UNRESTRICTED_IOCTL,
        max_read: MAX_READ,
        max_write: MAX_WRITE,
        ..Default::default()
    };
    reader::send(
        channel,
        &wire::init_reply(request.header.unique, &out, dev_name),
    )
    .map_err(CuseError::io("answering CUSE_INIT"))
}

/// How a CUSE reader delivers answers that wait: none does here.
pub struct CuseWaits;

impl Waits for CuseWaits {
    // CUSE sends no FLUSH, so no open waits for its own release here.
    fn wait_for_release(&self, _: &Arc<File>, unique: u64, open: PendingOpen) -> Option<Vec<u8>> {
        Some(wire::reply_error(unique, open.error().errno()))
    }

    // Unrestricted ioctls never store from here; a kernel that sent a
    // restricted one anyway is answered EIO rather than written from this
    // thread.
    fn store(&self, job: StoreJob, _: usize) -> Option<Vec<u8>> {
        tracing::error!("a restricted ioctl over CUSE: not storing from a reader");
        Some(wire::reply_error(job.unique, Errno::EIO))
    }
}

/// One reader thread's life: serves until pfmd stops it or the connection
/// ends.
pub fn serve(reader: &Reader<CuseWaits>, life: &Life) {
    if let Ended::Lost(why) = reader.serve(REQUEST_BUFFER, life.stopping_flag()) {
        life.ended("CUSE", &why);
    }
}
