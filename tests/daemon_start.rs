//! Starting and stopping pfmd next to another: a second daemon never takes
//! over or removes a device link it did not make, a link to a device that
//! is gone is replaced, and a start without root says what it needs.

use crate::common;

use common::{Daemon, can_run, run, text};
use std::process::Command;

#[test]
fn a_second_daemon_leaves_the_first_ones_link_alone() {
    if !can_run() {
        return;
    }
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("pfcntr");
    let link_arg = link.to_str().unwrap();
    let mut first = Daemon::start(&["--dev-link", link_arg]);
    assert_eq!(std::fs::read_link(&link).unwrap(), first.device);

    let second_mount = tempfile::tempdir().unwrap();
    let out = run(Command::new(common::bin("pfmd")).args([
        "--transport",
        "fuse",
        "--mountpoint",
        second_mount.path().join("mnt").to_str().unwrap(),
        "--dev-link",
        link_arg,
    ]));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("another pfmd serves"),
        "says why: {}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_link(&link).unwrap(),
        first.device,
        "the first daemon's link is untouched"
    );
    let ok = run(first
        .client("ev4count")
        .env("PFM_DEVICE", &link)
        .args(["-ms", "10"]));
    assert!(ok.status.success(), "{}", text(&ok));

    // The first daemon stops and removes its link; a link left dangling by
    // a daemon that died is replaced by the next one.
    assert!(first.stop().success());
    assert!(
        std::fs::symlink_metadata(&link).is_err(),
        "link removed at stop"
    );
    std::os::unix::fs::symlink("/nonexistent/pfcntr", &link).unwrap();
    let third = Daemon::start(&["--dev-link", link_arg]);
    assert_eq!(std::fs::read_link(&link).unwrap(), third.device);
}

/// A daemon claims its mountpoint directory (an exclusive `flock`, held
/// while it lives) before it looks for a mount there and mounts: of two
/// daemons started at the same instant, which both found no mount, the one
/// without the claim is refused with status 1 (both once mounted and
/// served, one over the other, and stopping them could leave a dead
/// mount). The test holds the claim itself, as the other daemon would.
#[test]
fn a_mountpoint_another_daemon_claimed_is_refused() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().join("mnt");
    std::fs::create_dir(&mountpoint).unwrap();
    let pfmd = || {
        let mut c = Command::new(common::bin("pfmd"));
        c.args(["--transport", "fuse", "--dev-link", "none", "--mountpoint"])
            .arg(&mountpoint);
        c
    };
    let claim = nix::fcntl::Flock::lock(
        std::fs::File::open(&mountpoint).unwrap(),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .unwrap();
    let mut refused = pfmd()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = xtask::pfmd::wait_for_exit(&mut refused, std::time::Duration::from_secs(60));
    if status.is_none() {
        let _ = refused.kill();
        let _ = refused.wait();
        let _ = nix::mount::umount2(&mountpoint, nix::mount::MntFlags::MNT_DETACH);
        panic!("pfmd served a mountpoint another daemon claimed");
    }
    let mut why = String::new();
    std::io::Read::read_to_string(&mut refused.stderr.take().unwrap(), &mut why).unwrap();
    assert_eq!(status.unwrap().code(), Some(1), "{why}");
    assert!(why.contains("already served"), "{why}");
    drop(claim);
    let mut daemon = Daemon::start_at(dir, mountpoint.clone(), &[]);
    assert!(daemon.stop().success(), "{}", daemon.log());
}

#[test]
fn without_root_pfmd_says_what_it_needs() {
    if !can_run() {
        return;
    }
    let out = run(common::as_nobody(common::bin("pfmd")).args(["--dev-link", "none"]));
    assert!(!out.status.success());
    assert!(text(&out).contains("must run as root"), "{}", text(&out));
    let listing = run(common::as_nobody(common::bin("pfmd")).arg("--list-events"));
    assert!(listing.status.success(), "{}", text(&listing));
    assert!(
        listing.stderr.is_empty(),
        "a listing prints nothing on stderr: {}",
        String::from_utf8_lossy(&listing.stderr)
    );
}

/// A process that execs with the device open close-on-exec closes it inside
/// `execve`, where the kernel holds locks that reading its `/proc` entries
/// needs; the daemon answers that close without touching `/proc` (it once
/// deadlocked there, and every later `ps` with it).
#[test]
fn exec_with_the_device_open_close_on_exec_completes() {
    if !can_run() {
        return;
    }
    const SOURCE: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/pfcntr.h>
#include <unistd.h>
int main(int argc, char **argv) {
    const char *dev = getenv("PFM_DEVICE");
    int fd = open(dev, O_RDONLY | O_CLOEXEC | PCNTOPENALL);
    if (fd < 0) { perror(dev); return 1; }
    if (argc > 1) {
        /* Also from a second descriptor of the same open. */
        if (fcntl(fd, F_DUPFD_CLOEXEC, 10) < 0) { perror("dup"); return 1; }
    }
    execl("/bin/true", "true", (char *)0);
    perror("execl");
    return 1;
}
"#;
    let daemon = Daemon::start(&[]);
    let program = common::client_source("exec_cloexec", SOURCE, &[]);
    for args in [&[][..], &["dup"][..]] {
        let out = run(Command::new("timeout")
            .arg("60")
            .arg(&program)
            .args(args)
            .env("PFM_DEVICE", &daemon.device));
        assert!(
            out.status.success(),
            "exit {:?} (124: it hung in execve): {}",
            out.status.code(),
            text(&out)
        );
    }
    let after = run(daemon.client("ev4count").args(["-ms", "10"]));
    assert!(after.status.success(), "{}", text(&after));
}

/// The daemon ends when its device does: a FUSE mount detached under it
/// (`umount -l`), once nothing holds the file, ends the connection, and pfmd
/// logs it and exits non-zero so that its unit restarts it. Over both FUSE
/// channels; a client that held the device until then gets an error.
#[test]
fn a_detached_mount_ends_the_daemon_with_an_error() {
    if !can_run() {
        return;
    }
    for channel in ["off", "on"] {
        let guard = (channel == "on").then(common::EnableUring::set);
        let mut daemon = Daemon::start(&["--fuse-uring", channel]);
        drop(guard);
        let held = pfm_client::Device::open(&daemon.device, pfm_abi::OpenMode::All)
            .unwrap_or_else(|e| panic!("{e}\n{}", daemon.log()));
        nix::mount::umount2(&daemon.mountpoint, nix::mount::MntFlags::MNT_DETACH).unwrap();
        // Still served while held.
        held.info()
            .unwrap_or_else(|e| panic!("{channel}: held device after umount -l: {e}"));
        // A refusal pending when the daemon ends this way is still summed
        // up in the log.
        assert!(held.set_items(pfm_client::Items::empty()).is_err());
        drop(held);
        let status = daemon.wait();
        assert_eq!(
            status.code(),
            Some(1),
            "{channel}: {status}\n{}",
            daemon.log()
        );
        let log = daemon.log();
        assert!(
            log.contains("FUSE connection lost")
                && log.contains("the FUSE connection ended while pfmd was serving"),
            "{channel}: {log}"
        );
        assert!(
            log.contains("1 request refused in the last"),
            "{channel}: the pending refusal: {log}"
        );
    }
}
