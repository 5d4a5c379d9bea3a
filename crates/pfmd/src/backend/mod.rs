//! Host counting on Linux `perf_event_open`: the daemon's implementation
//! of the device's [`Backend`](pfmd_device::backend::Backend) trait.

pub use pfmd_device::backend::*;
pub mod perf;
