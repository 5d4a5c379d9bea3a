//! The C ABI of `/dev/pfcntr`: ioctl numbers, `#[repr(C)]` structures, and the
//! decoding of a raw `(cmd, bytes)` pair into a typed [`Request`]. Errors
//! carry their errno here so transports never decide one.

pub mod abi;
mod error;
pub mod numbers;
mod request;

pub use error::DeviceError;
pub use request::{Ev4Request, Ev5Request, Ev6Request, Request, decode};
