//! The CUSE session: the CUSE_INIT handshake, then reader threads that take
//! requests off the channel and deliver the [`Handler`]'s answers.

use super::CuseError;
use super::channel::{Channel, Received};
use crate::abi::*;
use crate::handler::{Answer, Handler};
use crate::later::LaterReply;
use crate::life::Life;
use crate::wire::{self, Op};
use nix::errno::Errno;
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
        // Unrestricted ioctls: a pointer ioctl's array is named in a retry
        // and the kernel copies it in the caller's thread (ioctl.rs).
        flags: CUSE_UNRESTRICTED_IOCTL,
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
    pub handler: Arc<Handler>,
    pub channel: Arc<Channel>,
    pub life: Life,
}

/// The reply to a request its open's worker served, written by the worker.
struct CuseLater {
    channel: Arc<Channel>,
    unique: u64,
}

impl LaterReply for CuseLater {
    fn deliver(self: Box<Self>, answer: Answer) {
        let reply = match reply_of(answer) {
            (Some(reply), _) => reply,
            (None, _) => wire::reply_error(self.unique, Errno::EIO),
        };
        if let Err(e) = self.channel.send(&reply)
            && e.raw_os_error() != Some(libc::ENODEV)
        {
            tracing::error!("writing a CUSE reply: {e}");
        }
    }
}

/// The reply to send for `answer`, and whether the session ends after it.
fn reply_of(answer: Answer) -> (Option<Vec<u8>>, bool) {
    match answer {
        Answer::Reply(reply) => (Some(reply), false),
        Answer::Last(reply) => (Some(reply), true),
        Answer::Nothing => (None, false),
        // CUSE sends no FLUSH, so no open waits for its own release here.
        Answer::WaitForRelease { unique, open, .. } => {
            (Some(wire::reply_error(unique, open.error().errno())), false)
        }
        // Unrestricted ioctls never store from here; a kernel that sent a
        // restricted one anyway is answered EIO rather than written from
        // this thread.
        Answer::AfterStore(job) => {
            tracing::error!("a restricted ioctl over CUSE: not storing from a reader");
            (Some(wire::reply_error(job.unique, Errno::EIO)), false)
        }
        Answer::Later { request, .. } => (Some(request.unexpected()), false),
    }
}

impl Session {
    /// One reader thread's life.
    pub fn serve(&self, index: usize) {
        let mut buf = vec![0u8; REQUEST_BUFFER];
        loop {
            match self.channel.receive(&mut buf, self.life.stopping_flag()) {
                Ok(Received::Request(n)) => {
                    let (reply, end) = match self.handler.answer(&buf[..n]) {
                        Answer::Later { request, .. } => {
                            let reply = CuseLater {
                                channel: Arc::clone(&self.channel),
                                unique: request.unique,
                            };
                            self.handler.serve_later(request, Box::new(reply));
                            continue;
                        }
                        answer => reply_of(answer),
                    };
                    if let Some(reply) = reply
                        && let Err(e) = self.channel.send(&reply)
                    {
                        if e.raw_os_error() == Some(libc::ENODEV) {
                            self.life.ended("CUSE", "the kernel closed the connection");
                            return;
                        }
                        tracing::error!(thread = index, "writing a CUSE reply: {e}");
                    }
                    if end {
                        self.life.ended("CUSE", "the kernel sent DESTROY");
                        return;
                    }
                }
                Ok(Received::Stopped) => return,
                Ok(Received::Gone) => {
                    self.life.ended("CUSE", "the kernel closed the connection");
                    return;
                }
                Err(e) => {
                    self.life.ended("CUSE", &format!("reading /dev/cuse: {e}"));
                    return;
                }
            }
        }
    }
}
