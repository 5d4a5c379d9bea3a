//! `pfmprof`: a uprofile/kprofile-style PC profiler over `/dev/pfcntr`.
//!
//! The pure parts live in their own modules and are unit tested: command-line
//! parsing ([`args`]), `/proc/PID/maps` and load-bias arithmetic ([`maps`]),
//! `/proc/kallsyms` parsing ([`kallsyms`]), symbol lookup ([`symbols`]),
//! bucket-to-function aggregation and report formatting ([`report`]), and the
//! `-o` file format ([`profile_file`]). [`elf`] reads executables with the
//! `object` crate (and source lines with `addr2line`), [`device`] is the
//! ioctl edge, and [`run`] forks, execs and drives the device.

pub mod args;
pub mod device;
pub mod elf;
pub mod kallsyms;
pub mod maps;
pub mod profile_file;
pub mod report;
pub mod run;
pub mod symbols;

use std::path::PathBuf;

/// Why `pfmprof` could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ProfError {
    #[error("{0}")]
    Usage(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {errno} ({desc})", desc = errno.desc())]
    Ioctl {
        what: &'static str,
        errno: nix::errno::Errno,
    },
    #[error("{path}: {reason}")]
    Elf { path: PathBuf, reason: String },
    #[error("{0}")]
    Kallsyms(String),
    #[error("{path}: line {line}: {reason}")]
    ProfileFormat {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("{0}")]
    Program(String),
    #[error("{0}")]
    Device(String),
}

impl ProfError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProfError {
        let what = what.into();
        move |source| ProfError::Io { what, source }
    }
}
