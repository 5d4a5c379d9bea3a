//! The `/dev/cuse` channel: one open file is one CUSE connection, and closing
//! it is what removes the device. Requests are read one per `read(2)`,
//! replies written one per `write(2)`. The only `unsafe` is `poll(2)`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Mutex;

/// What a wait for the next request produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A request of this many bytes is in the buffer.
    Request(usize),
    /// The transport is stopping.
    Stopped,
    /// The kernel ended the connection (aborted, or the device refused).
    Gone,
}

pub struct Channel {
    file: File,
    /// Readable once `stop()` has been called; never drained, so every
    /// reader sees it.
    stop_rx: UnixStream,
    stop_tx: UnixStream,
    /// Only one thread waits in poll/read at a time (leader/follower), so a
    /// request wakes one thread, not all of them; handling and replying
    /// happen outside it, concurrently.
    reader: Mutex<()>,
}

impl Channel {
    /// Opens `path` (normally `/dev/cuse`): the kernel creates a connection
    /// and queues CUSE_INIT on it.
    pub fn open(path: &Path) -> io::Result<Channel> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        let (stop_rx, stop_tx) = UnixStream::pair()?;
        Ok(Channel {
            file,
            stop_rx,
            stop_tx,
            reader: Mutex::new(()),
        })
    }

    /// Wakes every reader for good.
    pub fn stop(&self) {
        if let Err(e) = (&self.stop_tx).write_all(&[1]) {
            tracing::warn!("cannot wake the CUSE readers: {e}");
        }
    }

    /// Waits for the next request and reads it into `buf`.
    pub fn receive(&self, buf: &mut [u8]) -> io::Result<Received> {
        let _leader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let (channel, stop) = poll2(self.file.as_raw_fd(), self.stop_rx.as_raw_fd())?;
            if stop {
                return Ok(Received::Stopped);
            }
            if channel.error {
                return Ok(Received::Gone);
            }
            if !channel.readable {
                continue;
            }
            match (&self.file).read(buf) {
                Ok(0) => return Ok(Received::Gone),
                Ok(n) => return Ok(Received::Request(n)),
                Err(e) => match e.raw_os_error() {
                    // Nothing queued after all, a signal, or a request that
                    // was interrupted before we read it: wait again.
                    Some(libc::EAGAIN | libc::EINTR | libc::ENOENT) => continue,
                    Some(libc::ENODEV | libc::ECONNABORTED) => return Ok(Received::Gone),
                    _ => return Err(e),
                },
            }
        }
    }

    /// Writes one reply. `ENOENT` means the request is gone (its caller was
    /// interrupted and the kernel already answered it): not an error for us.
    pub fn send(&self, reply: &[u8]) -> io::Result<()> {
        match (&self.file).write(reply) {
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

    /// True if the kernel has ended the connection (without waiting).
    pub fn is_gone(&self) -> io::Result<bool> {
        let (channel, _) = poll_fds(self.file.as_raw_fd(), self.stop_rx.as_raw_fd(), 0)?;
        Ok(channel.error)
    }
}

#[derive(Debug, Clone, Copy)]
struct Events {
    readable: bool,
    error: bool,
}

/// Blocks until the channel or the stop socket has something.
fn poll2(channel: RawFd, stop: RawFd) -> io::Result<(Events, bool)> {
    loop {
        match poll_fds(channel, stop, -1) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            other => return other,
        }
    }
}

fn poll_fds(channel: RawFd, stop: RawFd, timeout_ms: i32) -> io::Result<(Events, bool)> {
    let mut fds = [
        libc::pollfd {
            fd: channel,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stop,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: `fds` is a live, writable array of two pollfd structures and
    // its length is passed with it; both descriptors are owned by the
    // Channel borrowed for the duration of the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let channel = Events {
        readable: fds[0].revents & libc::POLLIN != 0,
        error: fds[0].revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0,
    };
    Ok((channel, fds[1].revents != 0))
}
