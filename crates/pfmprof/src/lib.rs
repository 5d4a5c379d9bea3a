//! `pfmprof`: a uprofile/kprofile-style PC profiler over `/dev/pfcntr`.
//!
//! It profiles on every Alpha model `pfmd` emulates: the EV4 family through
//! `PCNTSETMUX`, the EV5 family (EV5, EV56, PCA56) through `PCNT5MUX`,
//! `PCNT5FREQ` and `PCNT5CTXTS`, the EV6 through `PCNT6MUX`, and the EV67
//! through its `PCNT6MUX` pairs or profile-me mode with a `PF67_PM_*`
//! statistic. The report has the same form on every model.
//!
//! The pure parts live in their own modules and are unit tested: command-line
//! parsing ([`args`]), which event is sampled on the daemon's model and the
//! ioctl words that select it ([`event`]), `/proc/PID/maps` ([`maps`]),
//! `/proc/kallsyms` parsing ([`kallsyms`]), symbol lookup ([`symbols`]),
//! bucket-to-function aggregation and report formatting ([`report`]), and the
//! `-o` file format ([`profile_file`]). [`symbolize`] names addresses and
//! finds source lines through the `blazesym` crate (executables, shared
//! libraries, separate debug files, the kernel), [`rotation`] profiles
//! several ranges in turn on the one open the device allows, and [`run`]
//! starts the program and drives the device through `pfm_client`.

pub mod args;
pub mod event;
pub mod export;
pub mod kallsyms;
pub mod maps;
pub mod profile_file;
pub mod report;
pub mod rotation;
pub mod run;
pub mod symbolize;
pub mod symbols;

use std::path::PathBuf;

/// Why `pfmprof` could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ProfError {
    #[error("{0}")]
    Usage(String),
    /// `-e`, `-period` or `-pm` names nothing the daemon's model has.
    #[error("{0}")]
    Event(String),
    /// The daemon refused the chosen event or statistic: this host cannot
    /// count it (`EOPNOTSUPP`), or the period needs privilege (`EPERM`).
    #[error("{0}")]
    Refused(String),
    #[error("{what}: {}", pfm_client::describe(source))]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Opening or driving the device.
    #[error("{0}")]
    Device(#[from] pfm_client::Error),
    /// The program could not be given the PME bit (or stopped at exec).
    #[error("{0}")]
    Spawn(pfm_client::SpawnError),
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
    /// An output file (`-o`, `--output`) cannot be created; the program
    /// was not run.
    #[error("{option} {path}: {why}; the program was not run (name a file pfmprof may create)")]
    Output {
        option: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error("{0}")]
    Program(String),
    /// The device is not one pfmprof can drive, or its answers disagree
    /// with what pfmprof asked for.
    #[error("{0}")]
    Incompatible(String),
}

impl ProfError {
    /// Checks before the program runs that the file `option` names can be
    /// written, so that a path that cannot be written costs no run. It
    /// opens nothing (a FIFO's reader would see an end of file, an existing
    /// file must keep its contents if the run is refused): `access(2)` on the
    /// file, or on its directory where the file (or a link's target) is not
    /// there yet.
    pub fn check_output(option: &'static str, path: &std::path::Path) -> Result<(), ProfError> {
        use nix::unistd::{AccessFlags, access};
        let checked = match std::fs::metadata(path) {
            Ok(_) => access(path, AccessFlags::W_OK),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let dir = match path.parent() {
                    Some(dir) if !dir.as_os_str().is_empty() => dir,
                    _ => std::path::Path::new("."),
                };
                access(dir, AccessFlags::W_OK | AccessFlags::X_OK)
            }
            Err(e) => return Err(Self::output_refused(option, path, &e)),
        };
        checked.map_err(|errno| Self::output_refused(option, path, &errno.into()))
    }

    fn output_refused(option: &'static str, path: &std::path::Path, e: &std::io::Error) -> Self {
        ProfError::Output {
            option,
            path: path.to_path_buf(),
            why: pfm_client::describe(e),
        }
    }

    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProfError {
        let what = what.into();
        move |source| ProfError::Io { what, source }
    }
}
