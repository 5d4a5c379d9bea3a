//! Errors that say what went wrong and, where it is clear, what to do.

use nix::errno::Errno;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `open(2)` of the device failed.
    #[error("{}: {}{}", path.display(), describe(source), open_hint(source, path))]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An ioctl was refused.
    #[error("{op}: {errno}{hint}")]
    Ioctl {
        op: &'static str,
        errno: Errno,
        /// Said after the errno: what the device is, when that explains it.
        hint: String,
    },
    /// `read(2)` of the profile failed or came back short.
    #[error("read(2) of the profile: {0}")]
    Read(String),
    /// The device answered something this client does not understand.
    #[error("{0}")]
    Protocol(String),
}

impl Error {
    /// The errno of a refused open or ioctl.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Open { source, .. } => source.raw_os_error().map(Errno::from_raw),
            Error::Ioctl { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

/// An I/O error as a person reads it: the errno's description, without
/// Rust's "(os error N)".
pub fn describe(e: &std::io::Error) -> String {
    e.raw_os_error()
        .map_or_else(|| e.to_string(), |n| Errno::from_raw(n).desc().to_string())
}

/// ENOENT (no device), ENOTCONN / ECONNABORTED (a FUSE mount whose daemon
/// has gone): the daemon is not running.
pub(crate) fn daemon_gone(errno: Errno) -> bool {
    matches!(errno, Errno::ENOENT | Errno::ENOTCONN | Errno::ECONNABORTED)
}

fn open_hint(source: &std::io::Error, path: &std::path::Path) -> String {
    match source.raw_os_error().map(Errno::from_raw) {
        Some(e) if daemon_gone(e) => " (is pfmd running? systemctl start pfmd)".into(),
        // A CPU is held by one open at a time, as on Tru64: say how to find
        // the holder (only root sees every user's).
        Some(Errno::EBUSY) => format!(
            " (another open holds the counters of the CPUs this one needs, as on Tru64; \
             as root, `fuser -v {}` names its process; try again when it closes)",
            path.display()
        ),
        Some(Errno::EINVAL) => {
            " (PCNTOPENONE needs the calling thread bound to exactly one CPU, e.g. taskset -c 0)"
                .into()
        }
        Some(Errno::EACCES) => " (the device's mode or group does not let you open it)".into(),
        _ => String::new(),
    }
}
