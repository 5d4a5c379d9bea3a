//! The device: open files, callers, caller memory, and the transports that
//! carry requests to it (CUSE where the kernel has it, else FUSE).

pub mod caller;
mod core;
pub mod cuse;
mod ev4_ioctl;
pub mod fuse;
pub mod memory;
mod open_file;
mod tally;

pub use self::core::{CallerStore, Device, DeviceConfig, FileId, IoctlReply};
pub use open_file::OpenMode;
