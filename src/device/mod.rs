//! The device: open files, callers, caller memory, and the transports that
//! carry requests to it (CUSE where the kernel has it, else FUSE).

pub mod caller;
mod core;
pub mod cuse;
mod ev4_ioctl;
mod ev5_ioctl;
mod ev6_ioctl;
pub mod fuse;
mod histogram;
pub mod memory;
mod open_file;
mod tally;
#[cfg(test)]
mod test_fixtures;

pub use self::core::{CallerStore, Device, DeviceConfig, FileId, IoctlReply};
pub use open_file::OpenMode;
