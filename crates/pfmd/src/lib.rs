//! pfmd: the OSF/1 / Tru64 `pfm` performance-counter pseudo-device,
//! `/dev/pfcntr`, on Linux.
//!
//! - [`transport`]: CUSE (a real character device) or FUSE (a one-file
//!   filesystem); they turn kernel requests into calls on the device and
//!   store pointer arguments into the caller's memory.
//! - [`device`]: open files, their settings and counts; decodes ioctls with
//!   the `pfm-abi` crate and selections with the `pfm-model` crate.
//! - [`policy`]: who is calling and what the host's perf rules let them do.
//! - [`backend`]: Linux `perf_event_open` counting and sampling.
//! - [`cli`]: the `pfmd` command line.
//!
//! `docs/architecture.md` is the map of the workspace.

pub mod backend;
pub mod cli;
pub mod device;
mod logging;
pub mod policy;
pub mod transport;
