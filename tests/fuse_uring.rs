//! The FUSE transport over io_uring (`--fuse-uring`), end to end: the errno
//! contract program over the rings, `PFM_INFO_URING` in `PCNTGETINFO`, a
//! process's close-then-open answered without `EBUSY`, and the module's
//! own classic loop (its fallback).
//!
//! The kernel offers io_uring to a FUSE connection only while
//! `/sys/module/fuse/parameters/enable_uring` is `Y`; a connection that
//! negotiated it keeps it. Each test turns it on for the daemon's start and
//! puts the previous value back right after, also when the start panics.
//! Where the kernel has no FUSE io_uring, the tests print `SKIPPED` (and
//! fail under `CI=true`, where the machine is known to have it).

use crate::common;

use common::{Channel, Daemon, can_run, run, text};
use pfm_abi as abi;
use pfm_client::{Device, OpenMode};

/// `pi_flags` of a fresh ALL open of the daemon's device.
fn info_flags(daemon: &Daemon) -> u64 {
    let device = Device::open(&daemon.device, OpenMode::All)
        .unwrap_or_else(|e| panic!("{e}\n{}", daemon.log()));
    device.info().unwrap().pi_flags
}

/// A daemon whose FUSE connection negotiated io_uring.
fn uring_daemon() -> Daemon {
    Daemon::on(Channel::Uring, &[])
}

fn assert_contract_passes(daemon: &Daemon) {
    let out = run(&mut daemon.client("errno_contract"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.ends_with(" 0 failed") && !last.starts_with("0 passed"),
        "{}",
        text(&out)
    );
}

#[test]
fn errno_contract_over_io_uring() {
    if !can_run() || !Channel::Uring.available() {
        return;
    }
    let daemon = uring_daemon();
    assert_contract_passes(&daemon);
    // The same program as an unprivileged user reaches the EACCES rows.
    let out =
        run(common::as_nobody(common::c_program("errno_contract"))
            .env("PFM_DEVICE", &daemon.device));
    assert!(
        out.status.success(),
        "as nobody: {}\n{}",
        text(&out),
        daemon.log()
    );
}

#[test]
fn getinfo_says_io_uring_and_close_then_open_never_ebusy() {
    if !can_run() || !Channel::Uring.available() {
        return;
    }
    let daemon = uring_daemon();
    assert_ne!(info_flags(&daemon) & abi::PFM_INFO_URING, 0);
    // FUSE sends RELEASE after close(2) returns: each open here may find
    // the last one still held by this process, and must wait for it
    // rather than fail.
    for round in 0..200 {
        let file = Device::open(&daemon.device, OpenMode::All)
            .unwrap_or_else(|e| panic!("open {round} after a close: {e}\n{}", daemon.log()));
        drop(file);
    }
}

#[test]
fn errno_contract_over_the_classic_channel() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::on(Channel::Classic, &[]);
    assert!(daemon.log().contains("classic channel"), "{}", daemon.log());
    assert_eq!(info_flags(&daemon) & abi::PFM_INFO_URING, 0);
    assert_contract_passes(&daemon);
}

/// A process that closes its descriptor while a child still holds the open
/// file, then opens again (the child's close is the release).
const REOPEN: &str = r#"#define _GNU_SOURCE
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/wait.h>
#include <sys/pfcntr.h>
/* A process closes its descriptor while a child still holds the open, and
 * opens again: its open waits for the release the child's close brings. */
int main(int argc, char **argv) {
	int fd = open(argv[1], O_RDONLY | PCNTOPENALL);
	if (fd < 0) { perror("open"); return 2; }
	pid_t child = fork();
	if (child == 0) { usleep(atoi(argv[2]) * 1000); close(fd); _exit(0); }
	close(fd);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	int again = open(argv[1], O_RDONLY | PCNTOPENALL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
	if (again < 0) { perror("reopen"); printf("reopen failed after %ld ms\n", ms); waitpid(child, 0, 0); return 1; }
	printf("reopened after %ld ms\n", ms);
	close(again);
	waitpid(child, 0, 0);
	return 0;
}
"#;

/// The open that must wait for its own process's release keeps its ring
/// entry and is answered through the queue's mailbox when the release
/// lands, or `EBUSY` once the grace is over; the queue serves meanwhile.
#[test]
fn an_open_waiting_for_its_release_is_answered_through_the_ring() {
    if !can_run() || !Channel::Uring.available() {
        return;
    }
    let daemon = uring_daemon();
    let reopen = common::client_source("reopen", REOPEN, &[]);
    let out = run(std::process::Command::new(&reopen)
        .arg(&daemon.device)
        .arg("5"));
    assert!(out.status.success(), "{}\n{}", text(&out), daemon.log());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("reopened"),
        "{}",
        text(&out)
    );
    // A release that comes long after the grace (1 s): EBUSY, and the device
    // still answers afterwards.
    let out = run(std::process::Command::new(&reopen)
        .arg(&daemon.device)
        .arg("3000"));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}",
        text(&out),
        daemon.log()
    );
    assert!(
        text(&out).contains("Device or resource busy"),
        "{}",
        text(&out)
    );
    // The child's close of its inherited copy was the last: its release
    // follows soon, but an open meanwhile is refused at once (a child's
    // close does not say the release is on its way, docs/device.md §2).
    let mut flags = 0;
    common::wait_until(
        "the device answers once the child's release landed",
        std::time::Duration::from_secs(30),
        || match Device::open(&daemon.device, OpenMode::All) {
            Ok(device) => {
                flags = device.info().unwrap().pi_flags;
                true
            }
            Err(e) => {
                assert_eq!(
                    e.errno(),
                    Some(nix::errno::Errno::EBUSY),
                    "{e}\n{}",
                    daemon.log()
                );
                false
            }
        },
        || daemon.log(),
    );
    assert_ne!(flags & abi::PFM_INFO_URING, 0);
}

/// A 32-bit caller gets `ENOTTY` for every ioctl over both FUSE channels,
/// as over CUSE (`cuse_vm.rs`): the one handler decides it for all three.
#[test]
fn a_32_bit_caller_gets_enotty_over_classic_and_io_uring() {
    if !can_run() || !Channel::Uring.available() {
        return;
    }
    for uring in [false, true] {
        let daemon = if uring {
            uring_daemon()
        } else {
            Daemon::on(Channel::Classic, &[])
        };
        let Some(program) = common::compat32_program(&daemon.device) else {
            return;
        };
        let status = std::process::Command::new(&program).status().unwrap();
        assert_eq!(
            status.code(),
            Some(libc::ENOTTY),
            "uring {uring}: {status}\n{}",
            daemon.log()
        );
        // The porter is told why, in the daemon's log.
        let log = daemon.log();
        assert!(log.contains("build the program as 64-bit"), "{log}");
    }
}
