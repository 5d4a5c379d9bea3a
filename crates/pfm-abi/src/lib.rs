//! The C ABI of the Tru64 `pfm` device, `/dev/pfcntr`, as pfmd serves it on
//! Linux: ioctl numbers ([`numbers`]), the `#[repr(C)]` mirrors of the
//! structures in `include/sys/pfcntr.h` ([`structs`]), the open-mode and item
//! flag words, and the decoding of a raw `(cmd, argument bytes)` pair into a
//! typed [`Request`].
//!
//! This crate knows shapes and numbers only: what an Alpha event means is the
//! model crate's business, what a request does is the daemon's. It has no
//! `unsafe`; `tests/header_abi.rs` checks every number, size and offset here
//! against the C header, both ways.

#![forbid(unsafe_code)]

mod counters;
mod flags;
mod implementation;
#[macro_use]
mod table;
pub mod numbers;
mod request;
pub mod structs;

pub use counters::{CounterMask, CounterOp, RawCounters};
pub use flags::{Items, OpenMode};
pub use implementation::{Family, Implementation, UnknownModel};
pub use numbers::{decode, family_of};
pub use request::{DecodeError, RangeRequest, Request};
pub use structs::*;
