//! What a test does when its environment cannot run it.
//!
//! Locally a missing prerequisite (no qemu and not root, no network for the
//! kernel download, ...) should not fail `cargo test`, but it must not pass
//! silently either; under CI the same condition means the CI machine is not
//! set up as it must be, so the test fails.

use std::fmt::Display;

/// The environment variable CI sets (`CI=true`).
pub const CI_ENV: &str = "CI";

/// True when running under CI (`CI=true`, or `CI=1`).
pub fn is_ci() -> bool {
    std::env::var(CI_ENV).is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// A test that cannot run here: under CI this panics (the test fails);
/// elsewhere it prints `SKIPPED: <test>: <why>` on the process's stderr
/// (past the test harness's output capture, so it shows even when the test
/// passes; `.ci/run` counts these lines) and returns, and the caller
/// returns from the test.
///
/// ```no_run
/// # fn vm_available() -> Result<(), String> { Ok(()) }
/// if let Err(why) = vm_available() {
///     xtask::ci::skip_or_fail("cuse_transport_in_a_vm", why);
///     return;
/// }
/// ```
#[track_caller]
pub fn skip_or_fail(test: &str, why: impl Display) {
    if is_ci() {
        panic!("{test}: cannot run, and {CI_ENV}=true makes that a failure: {why}");
    }
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {test}: {why}");
}

/// Records that a test really ran in a VM: `VM TEST RAN: <test>: <what>` on
/// the process's stderr, past the output capture. `.ci/run` counts these
/// lines and fails when there are none, so VM coverage cannot vanish
/// quietly.
pub fn vm_test_ran(test: &str, what: impl Display) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "VM TEST RAN: {test}: {what}");
}
