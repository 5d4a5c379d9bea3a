//! The transports that carry kernel requests to the device: one wire-level
//! stack. [`abi`] mirrors the kernel's FUSE/CUSE ABI once, [`wire`] decodes
//! each request into an operation, and [`handler`] decides every answer
//! (file operations, device operations, the ioctl argument path of
//! [`ioctl`]). The channels only move bytes: [`cuse`] (a real character
//! device, where the kernel has CUSE) and [`fuse`] (a one-file filesystem,
//! classic readers or io_uring queues); CUSE's readers and FUSE's classic
//! ones are one loop, [`reader`]. Answers that wait are delivered
//! by the channel when ready: an open waiting for its own release
//! ([`open_waiter`]), a store into a FUSE caller's memory ([`store`]).

pub mod abi;
pub mod cuse;
pub mod fuse;
pub mod handler;
pub mod ioctl;
pub mod later;
pub mod life;
pub mod open_waiter;
pub mod reader;
pub mod store;
pub mod wire;

// The device crate's modules under the names this crate's paths use.
#[cfg(test)]
use pfmd_device::backend;
use pfmd_device::{device, policy};
