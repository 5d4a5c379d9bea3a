//! The pfm device without its transports: open files, their settings and
//! counts, the callers and what the host's perf rules let them do, and the
//! [`backend::Backend`] trait host counting implements.
//!
//! - [`device`]: open files, their settings and counts; decodes ioctls with
//!   the `pfm-abi` crate and selections with the `pfm-model` crate.
//! - [`policy`]: who is calling and what the host's perf rules let them do.
//! - [`backend`]: the host-counting interface (and, with the
//!   `test-fixtures` feature, a mock).
//! - [`logging`]: notices logged once, refusals summarized per user.
//!
//! The crate knows no transport and no perf call: `pfmd-transport` carries
//! kernel requests to [`device::Device`], and the `pfmd` crate implements
//! the backend on `perf_event_open` and wires them.

pub mod backend;
pub mod device;
pub mod logging;
pub mod policy;
