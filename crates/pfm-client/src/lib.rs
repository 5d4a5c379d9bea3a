//! A typed, safe client of the pfm device, `/dev/pfcntr`, as `pfmd` serves
//! it on Linux.
//!
//! The device speaks the Tru64 `pfm` ioctls, several of which take a pointer
//! to an array the device fills, one element per CPU in EACH mode. Here every
//! call sizes its buffers from the open mode and the CPU count the device
//! reports (`PCNTGETINFO`), so no call can be handed a buffer the device
//! would write past. This crate is the only place outside the daemon with an
//! `unsafe` ioctl.
//!
//! ```no_run
//! use pfm_client::{Device, Items, OpenMode};
//! use pfm_client::abi::Iccsr;
//!
//! # fn main() -> Result<(), pfm_client::Error> {
//! // `$PFM_DEVICE`, else /dev/pfcntr.
//! let device = Device::open(pfm_client::device_path(None), OpenMode::All)?;
//! device.set_items(Items::COUNTERS)?;
//! device.log_select()?; // count this thread and what it starts from now on
//! // EV4: cycles on counter 0, one interrupt every 4096; counter 1 off.
//! device.set_mux(Iccsr::new(0xa, 0, 1, 0, 2))?;
//! device.clear_counts()?;
//! device.enable()?;
//! let work: u64 = (0..10_000_000u64).sum();
//! device.disable()?;
//! let counts = device.interrupt_counts()?;
//! println!("{work}: {} interrupts of 4096 cycles", counts[0].counters[0]);
//! # Ok(())
//! # }
//! ```
//!
//! [`spawn_counted`] starts a command that is counted from its first
//! instruction (the PME bit set in the child just before exec), the way
//! `pfmstat` and `pfmprof` run what they measure.

mod device;
mod error;
mod ioctl;
mod spawn;

pub use device::{CpuCounts, Device, device_path};
pub use error::{Error, describe};
pub use pfm_abi as abi;
pub use pfm_abi::{CounterMask, Family, Implementation, Items, OpenMode, RawCounters};
pub use spawn::{
    SpawnError, SpawnOptions, command_line, spawn_counted, stdout_to_stderr, wait_for_exec_stop,
};
