//! The C examples (`examples/c`) build with their Makefile against our
//! `<sys/pfcntr.h>` under `-std=c99 -Wall -Wextra -Werror`, clean up after
//! themselves, and behave sensibly with no device: a broken example fails
//! `cargo test`. Running them against a live pfmd is the daemon's tests' job.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c")
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("c_examples-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (make and gcc are required)"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `make BUILD=dir` with gcc; returns the build directory.
fn build(name: &str) -> PathBuf {
    let dir = scratch(name);
    let out = output(
        Command::new("make")
            .arg("-C")
            .arg(examples())
            .arg(format!("BUILD={}", dir.display()))
            .arg("CC=gcc"),
    );
    assert!(
        out.status.success(),
        "make failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    for prog in ["ev4count", "errno_contract"] {
        assert!(dir.join(prog).is_file(), "{prog} not built");
    }
    dir
}

#[test]
fn examples_build_warning_free_and_clean() {
    let dir = build("make");
    let out = output(
        Command::new("make")
            .arg("-C")
            .arg(examples())
            .arg(format!("BUILD={}", dir.display()))
            .arg("clean"),
    );
    assert!(out.status.success(), "make clean failed");
    for prog in ["ev4count", "errno_contract"] {
        assert!(!dir.join(prog).exists(), "make clean left {prog}");
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn examples_compile_as_strict_c99_with_the_header() {
    // The same flags the Makefile uses, plus -pedantic, without make.
    let dir = scratch("strict");
    for prog in ["ev4count", "errno_contract"] {
        let out = output(
            Command::new("gcc")
                .args([
                    "-std=c99",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-pedantic",
                    "-O2",
                ])
                .arg("-I")
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
                .arg("-o")
                .arg(dir.join(prog))
                .arg(examples().join(format!("{prog}.c"))),
        );
        assert!(out.status.success(), "{prog}.c:\n{}", text(&out.stderr));
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn examples_report_a_missing_device() {
    let dir = build("nodevice");
    let missing = dir.join("no-such-pfcntr");

    // ev4count: the failing call and the errno name on stderr, status 1.
    let out = output(Command::new(dir.join("ev4count")).env("PFM_DEVICE", &missing));
    assert_eq!(out.status.code(), Some(1), "ev4count exit status");
    let err = text(&out.stderr);
    assert!(
        err.contains("no-such-pfcntr") && err.contains("ENOENT"),
        "ev4count stderr: {err}"
    );
    assert!(
        out.stdout.is_empty(),
        "ev4count printed counts without a device"
    );

    // A bad option is a usage error.
    let out = output(Command::new(dir.join("ev4count")).arg("-bogus"));
    assert_eq!(out.status.code(), Some(2), "ev4count usage status");

    // errno_contract: a FAIL line for the open, then exactly "N passed, N
    // failed", status 1.
    let out = output(Command::new(dir.join("errno_contract")).env("PFM_DEVICE", &missing));
    assert_eq!(out.status.code(), Some(1), "errno_contract exit status");
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l == "FAIL open_all: expected 0 got ENOENT"),
        "errno_contract output:\n{stdout}"
    );
    assert_eq!(
        stdout.lines().last(),
        Some("0 passed, 1 failed"),
        "{stdout}"
    );
    let _ = fs::remove_dir_all(&dir);
}
