//! pfmd: the OSF/1 / Tru64 `pfm` performance-counter pseudo-device,
//! `/dev/pfcntr`, on Linux. This crate wires the others into the daemon:
//!
//! - `pfmd-device`: open files, counts, callers and policy, and the
//!   host-counting trait;
//! - [`backend::perf`]: that trait on Linux `perf_event_open`;
//! - `pfmd-transport`: the FUSE/CUSE stack that carries kernel requests to
//!   the device;
//! - [`cli`]: the `pfmd` command line and the daemon's life.
//!
//! `docs/architecture.md` is the map of the workspace.

pub mod backend;
pub mod cli;

// The other crates' modules under the names this crate's paths use.
use pfmd_device::{device, logging, policy};
use pfmd_transport as transport;
