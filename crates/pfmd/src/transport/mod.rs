//! The transports that carry kernel requests to the device: CUSE where the
//! kernel has it (a real character device), else FUSE (a one-file
//! filesystem), over io_uring queues where the kernel offers them. None
//! decides an errno or knows an Alpha event.

pub mod cuse;
pub mod fuse;
pub mod fuse_uring;
pub mod open_waiter;
