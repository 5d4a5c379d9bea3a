//! pfmd's integration tests, one binary: each suite is a module (a file
//! beside this one), run alone with a filter, `cargo test -p pfm-tests
//! hostile::`. They use a real pfmd on a private FUSE mount (or CUSE in a
//! VM), the real kernel's perf_event, and gcc-built C clients; `common` is
//! the harness every suite shares, `common_hostile` the hostile suites'.

#[macro_use]
mod common;
mod common_hostile;

mod c_examples_build;
mod cli;
mod cuse_vm;
mod daemon_start;
mod examples_models;
mod fuse_ev4;
mod fuse_uring;
mod fuzz;
mod header_abi;
mod hostile;
mod install;
mod models;
mod pfmprof_models;
mod pfmprof_whole;
mod pfmstat;
mod pmu_vm;
mod restart;
mod sampling;
