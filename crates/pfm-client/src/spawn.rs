//! Starting a command that the device counts from its first instruction.
//!
//! The child calls `PCNTLOGSELECT` on the inherited descriptor between fork
//! and exec, so the PME bit is set on it (and inherited by everything it
//! starts) before the program runs, and nothing of the parent is counted.

use crate::Device;
use nix::errno::Errno;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

/// What else the child does before exec.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpawnOptions {
    /// `PTRACE_TRACEME`: the child stops at exec (SIGTRAP) until the parent
    /// lets it go, so the parent can set up before its first instruction
    /// (a profiler learning where a PIE program was loaded).
    pub stop_at_exec: bool,
    /// Unblock every signal in the child, for a parent that blocks some
    /// for itself (`sigwait`).
    pub unblock_signals: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The device refused the child's `PCNTLOGSELECT`.
    #[error("PCNTLOGSELECT in the child: {} ({})", .0, .0.desc())]
    LogSelect(Errno),
    /// `PTRACE_TRACEME` failed in the child.
    #[error("PTRACE_TRACEME in the child: {} ({})", .0, .0.desc())]
    TraceMe(Errno),
    /// The command could not be started.
    #[error("{}", spawn_failure(.0))]
    Spawn(#[source] std::io::Error),
}

/// `args` as a shell command line (quoted where needed), for reports: it
/// can be pasted back.
pub fn command_line<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| {
            let word = a.as_ref().to_string_lossy();
            shlex::try_quote(&word).map_or_else(|_| word.to_string(), |q| q.into_owned())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Sends `command`'s standard output to this process's standard error: a
/// tool whose report has its own standard output keeps the two apart.
pub fn stdout_to_stderr(command: &mut std::process::Command) -> std::io::Result<()> {
    use std::os::fd::AsFd;
    let stderr = std::io::stderr().as_fd().try_clone_to_owned()?;
    command.stdout(std::process::Stdio::from(stderr));
    Ok(())
}

/// Waits until `pid`, spawned with [`SpawnOptions::stop_at_exec`], stops
/// at its exec; the description of what it did instead where it did not
/// (it is then left as it was: exited, killed, or still running).
pub fn wait_for_exec_stop(pid: i32) -> Result<(), String> {
    use nix::sys::signal::Signal;
    use nix::sys::wait::{WaitStatus, waitpid};
    match waitpid(nix::unistd::Pid::from_raw(pid), None) {
        Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => Ok(()),
        Ok(other) => Err(format!("the program did not stop at exec: {other:?}")),
        Err(errno) => Err(format!("waitpid: {errno}")),
    }
}

/// Why a command did not start, as a shell says it.
fn spawn_failure(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "command not found".into(),
        std::io::ErrorKind::PermissionDenied => {
            "permission denied (not an executable file, or not this user's to run)".into()
        }
        _ => crate::error::describe(e),
    }
}

const STEP_LOGSELECT: u8 = 1;
const STEP_TRACEME: u8 = 2;

/// Spawns `command` with the PME bit of `device` set in it.
pub fn spawn_counted(
    device: &Device,
    mut command: Command,
    options: SpawnOptions,
) -> Result<Child, SpawnError> {
    // The child says which step failed on a close-on-exec pipe; exec closes
    // it, so an empty pipe means every step passed.
    let (report_read, report_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SpawnError::Spawn(e.into()))?;
    let device_fd = device.as_fd().as_raw_fd();
    let report_fd = report_write.as_raw_fd();
    let logselect = pfm_abi::numbers::PCNTLOGSELECT as libc::c_ulong;
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe calls (sigemptyset, pthread_sigmask, ioctl,
    // ptrace, write) on memory it owns; it allocates nothing. PCNTLOGSELECT
    // takes no argument, so the ioctl's null argument is what it expects.
    unsafe {
        command.pre_exec(move || {
            let fail = |step: u8| {
                let errno = *libc::__errno_location();
                let mut record = [0u8; 5];
                record[0] = step;
                record[1..].copy_from_slice(&errno.to_ne_bytes());
                libc::write(report_fd, record.as_ptr().cast(), record.len());
                Err(std::io::Error::from_raw_os_error(errno))
            };
            if options.unblock_signals {
                let mut empty = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
                libc::sigemptyset(empty.as_mut_ptr());
                libc::pthread_sigmask(libc::SIG_SETMASK, empty.as_ptr(), std::ptr::null_mut());
            }
            if libc::ioctl(device_fd, logselect, std::ptr::null_mut::<libc::c_void>()) < 0 {
                return fail(STEP_LOGSELECT);
            }
            if options.stop_at_exec
                && libc::ptrace(
                    libc::PTRACE_TRACEME,
                    0,
                    std::ptr::null_mut::<libc::c_void>(),
                    0,
                ) < 0
            {
                return fail(STEP_TRACEME);
            }
            Ok(())
        });
    }
    let spawned = command.spawn();
    drop(report_write);
    match spawned {
        Ok(child) => Ok(child),
        Err(source) => {
            let mut record = [0u8; 5];
            let mut reader = std::fs::File::from(report_read);
            if reader.read_exact(&mut record).is_ok() {
                let errno = Errno::from_raw(i32::from_ne_bytes([
                    record[1], record[2], record[3], record[4],
                ]));
                return Err(match record[0] {
                    STEP_LOGSELECT => SpawnError::LogSelect(errno),
                    _ => SpawnError::TraceMe(errno),
                });
            }
            Err(SpawnError::Spawn(source))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::command_line;

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        assert_eq!(
            command_line(&["sh", "-c", "echo a; true", "it's"]),
            r#"sh -c 'echo a; true' "it's""#
        );
        assert_eq!(command_line(&["./work", "burn", "100"]), "./work burn 100");
    }
}
