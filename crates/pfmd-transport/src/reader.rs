//! The read(2)/write(2) channel that CUSE (`/dev/cuse`) and classic FUSE (a
//! `/dev/fuse` clone per reader) share: a request per read(2), a reply per
//! write(2), each read by one of several reader threads (the kernel wakes
//! one reader per request). What differs between them is only what a
//! reader does with an answer that waits: its [`Waits`].

use crate::handler::{Answer, Handler};
use crate::later::LaterReply;
use crate::open_waiter::PendingOpen;
use crate::store::StoreJob;
use crate::wire;
use nix::errno::Errno;
use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a wait for the next request produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A request of this many bytes is in the buffer.
    Request(usize),
    /// The transport is stopping.
    Stopped,
    /// The kernel ended the connection (unmounted, aborted, or the device
    /// refused).
    Gone,
}

/// Blocks for the next request and reads it into `buf`, unless `stop` is
/// set (checked before each read, and after each interruption).
pub fn receive(file: &File, buf: &mut [u8], stop: &AtomicBool) -> io::Result<Received> {
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(Received::Stopped);
        }
        match (&*file).read(buf) {
            Ok(0) => return Ok(Received::Gone),
            Ok(n) => return Ok(Received::Request(n)),
            Err(e) => match e.raw_os_error() {
                // A signal (perhaps a wake-up), or a request that was
                // interrupted before we read it: look again.
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                Some(libc::ENODEV | libc::ECONNABORTED) => return Ok(Received::Gone),
                _ => return Err(e),
            },
        }
    }
}

/// Writes one reply. `ENOENT` means the request is gone (its caller was
/// interrupted and the kernel already answered it): not an error for us.
/// `ENODEV`: the connection is gone.
pub fn send(file: &File, reply: &[u8]) -> io::Result<()> {
    match (&*file).write(reply) {
        Ok(n) if n == reply.len() => Ok(()),
        Ok(n) => Err(io::Error::other(format!(
            "short reply write: {n} of {} bytes",
            reply.len()
        ))),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            tracing::debug!("reply to a request that no longer exists (interrupted caller)");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Sends a reply from a thread that is not a reader: a connection that is
/// gone is the readers' to report.
pub fn send_aside(file: &File, reply: &[u8]) {
    if let Err(e) = send(file, reply)
        && e.raw_os_error() != Some(libc::ENODEV)
    {
        tracing::error!("writing a reply: {e}");
    }
}

/// How a channel delivers the answers that wait. Each returns the reply to
/// send now, if any.
pub trait Waits: Send + Sync + 'static {
    /// An open to answer when its caller's own release lands (FUSE sends
    /// RELEASE after close(2) returns).
    fn wait_for_release(&self, file: &Arc<File>, unique: u64, open: PendingOpen)
    -> Option<Vec<u8>>;
    /// A store into the caller's memory, then the job's reply (through
    /// the store helper, which writes the reply to reader `reader`'s file).
    fn store(&self, job: StoreJob, reader: usize) -> Option<Vec<u8>>;
}

/// Why a reader stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// pfmd is stopping it.
    Stopped,
    /// The connection ended: why.
    Lost(String),
}

/// One reader thread's share of a channel.
pub struct Reader<W> {
    pub file: Arc<File>,
    pub handler: Arc<Handler>,
    pub waits: Arc<W>,
    /// Which reader (the store helper writes a store's reply to its file).
    pub index: usize,
}

impl<W: Waits> Reader<W> {
    /// Reads and answers requests until the connection ends, or `stop` is
    /// set and the reader woken.
    pub fn serve(&self, buffer: usize, stop: &AtomicBool) -> Ended {
        let mut buf = vec![0u8; buffer];
        loop {
            let n = match receive(&self.file, &mut buf, stop) {
                Ok(Received::Request(n)) => n,
                Ok(Received::Stopped) => return Ended::Stopped,
                Ok(Received::Gone) => {
                    return Ended::Lost("the kernel closed the connection".into());
                }
                Err(e) => return Ended::Lost(format!("reading a request: {e}")),
            };
            let answer = match self.handler.answer(&buf[..n]) {
                Answer::WaitForRelease { unique, open, .. } => {
                    self.waits.wait_for_release(&self.file, unique, open)
                }
                Answer::Later { request, .. } => {
                    let reply = Box::new(Reader {
                        file: Arc::clone(&self.file),
                        handler: Arc::clone(&self.handler),
                        waits: Arc::clone(&self.waits),
                        index: self.index,
                    });
                    self.handler.serve_later(request, reply);
                    None
                }
                Answer::Last(reply) => {
                    let _ = send(&self.file, &reply);
                    return Ended::Lost("the kernel sent DESTROY".into());
                }
                answer => self.reply_to(answer),
            };
            if let Some(reply) = answer
                && let Err(e) = send(&self.file, &reply)
            {
                if e.raw_os_error() == Some(libc::ENODEV) {
                    return Ended::Lost("the kernel closed the connection".into());
                }
                tracing::error!(reader = self.index, "writing a reply: {e}");
            }
        }
    }

    /// The reply to send for an answer that does not end or defer the
    /// request here (a store goes to the helper, which sends the reply).
    fn reply_to(&self, answer: Answer) -> Option<Vec<u8>> {
        match answer {
            Answer::Reply(reply) | Answer::Last(reply) => Some(reply),
            Answer::Nothing => None,
            Answer::AfterStore(job) => self.waits.store(job, self.index),
            // A worker's answer is neither (the handler waits there).
            Answer::WaitForRelease { unique, .. } => Some(wire::reply_error(unique, Errno::EIO)),
            Answer::Later { request, .. } => Some(request.unexpected()),
        }
    }
}

/// A request its open's worker served, answered by the worker on the
/// reader's file.
impl<W: Waits> LaterReply for Reader<W> {
    fn deliver(self: Box<Self>, answer: Answer) {
        if let Some(reply) = self.reply_to(answer) {
            send_aside(&self.file, &reply);
        }
    }
}
