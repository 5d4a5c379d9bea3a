//! pfmd: the OSF/1 / Tru64 `pfm` performance-counter pseudo-device on Linux.
//!
//! Layers, outermost first: `device` (transports, open files, callers, caller
//! memory), `ioctl` (the C ABI and its decoding into typed requests), the Alpha
//! models `ev4`/`ev5`/`ev6` (mux codes, periods, widths, event tables over the
//! neutral host vocabulary in `model`), and `backend` (Linux `perf_event_open`).

pub mod backend;
pub mod cli;
pub mod device;
pub mod ev4;
pub mod ev5;
pub mod ev6;
pub mod ioctl;
pub mod model;
pub mod pfmstat;
pub mod profiler;
