//! The `/dev/cuse` file: one open file is one CUSE connection, and closing
//! it is what removes the device. Its readers are [`crate::reader`]'s.
//!
//! Every reader thread blocks in `read(2)` on the one file: the kernel wakes
//! exactly one reader per request (an exclusive wait), so nothing herds and
//! no request waits behind another. (CUSE refuses FUSE_DEV_IOC_CLONE, so
//! there is no per-thread clone as the FUSE transport has.) To stop, the
//! readers are flagged and then kicked out of `read(2)` with [`WAKE_SIGNAL`],
//! whose handler does nothing and is installed without SA_RESTART.

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::thread::JoinHandleExt;
use std::path::Path;
use std::sync::Once;
use std::thread::JoinHandle;

/// Interrupts a reader's `read(2)` so it sees the stop flag.
pub const WAKE_SIGNAL: Signal = Signal::SIGUSR1;

extern "C" fn on_wake_signal(_: libc::c_int) {}

/// Makes [`WAKE_SIGNAL`] interrupt blocking calls instead of killing us.
pub fn install_wake_handler() -> io::Result<()> {
    static INSTALL: Once = Once::new();
    let mut result = Ok(());
    INSTALL.call_once(|| {
        let action = SigAction::new(
            SigHandler::Handler(on_wake_signal),
            SaFlags::empty(),
            SigSet::empty(),
        );
        // SAFETY: the handler does nothing, so it is async-signal-safe; no
        // other part of pfmd uses WAKE_SIGNAL.
        if let Err(e) = unsafe { sigaction(WAKE_SIGNAL, &action) } {
            result = Err(io::Error::from(e));
        }
    });
    result
}

/// Interrupts `thread` if it is blocked in a system call.
pub fn wake(thread: &JoinHandle<()>) {
    // SAFETY: the pthread_t comes from a JoinHandle we hold, so the thread
    // has not been joined or detached and the id is valid; WAKE_SIGNAL's
    // handler is installed (install_wake_handler) before any reader starts.
    let rc = unsafe { libc::pthread_kill(thread.as_pthread_t(), WAKE_SIGNAL as libc::c_int) };
    if rc != 0 {
        tracing::debug!("pthread_kill: {}", io::Error::from_raw_os_error(rc));
    }
}

/// Opens `path` (normally `/dev/cuse`): the kernel creates a connection and
/// queues CUSE_INIT on it.
pub fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// True if the kernel has ended the connection (`POLLERR`), without waiting.
pub fn is_gone(file: &File) -> io::Result<bool> {
    let mut fds = [libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: `fds` is a live, writable array of one pollfd and its length
    // is passed with it; the descriptor is open for the call (`file`).
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fds[0].revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0)
}
