//! Coverage-guided, in-process fuzzing of what decides pfmd's answers (issue
//! 19): the FUSE/CUSE request decoder, the ioctl argument path and the
//! device state machine over the mock backend, for every Alpha model. The
//! out-of-process fuzzer (`tests/fuzz.rs`) keeps covering the transports
//! with a real daemon.
//!
//! `scripts/fuzz` builds `pfm-fuzz` with LLVM's coverage counters and runs
//! it; `corpus/` keeps the inputs that reached new coverage, and the
//! `corpus` test replays them in every `cargo test`.

pub mod coverage;
pub mod engine;
pub mod target;
