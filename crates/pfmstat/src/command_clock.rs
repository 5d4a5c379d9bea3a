//! The command's CPU time, exact at the moment it is read: a perf
//! `task-clock` counter pfmstat opens on its own child, inherited by every
//! thread and process the child creates (exited ones add theirs).
//!
//! Why not the process CPU-time clock (`clock_getcpuclockid`): for another
//! process the kernel sums each thread's run time as last accounted, at the
//! running thread's scheduler tick or switch, so it lags by up to a tick
//! (4 ms at HZ=250). The device's counts are exact at the read, so with
//! 10 ms slices on a loaded machine the weights were off by a tick per
//! interval, and `-a` estimates by up to 15 %.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};

/// The first 64 bytes of `struct perf_event_attr` (PERF_ATTR_SIZE_VER0),
/// all a software counter needs.
#[repr(C)]
struct PerfEventAttrVer0 {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const FLAG_INHERIT: u64 = 1 << 1;
/// Asked for so that `perf_event_paranoid` 2 allows it; a clock counter
/// counts kernel time all the same (the flag only filters samples).
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

#[derive(Debug)]
pub struct CommandClock {
    counter: File,
}

impl CommandClock {
    /// Counts `pid` and its descendants from now on.
    pub fn open(pid: i32) -> io::Result<CommandClock> {
        let attr = PerfEventAttrVer0 {
            kind: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttrVer0>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: 0,
            sample_type: 0,
            read_format: 0,
            flags: FLAG_INHERIT | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
            wakeup_events: 0,
            bp_type: 0,
            config1: 0,
        };
        // SAFETY: perf_event_open reads `size` bytes of `attr`, a live,
        // fully initialised repr(C) value of exactly that size; the other
        // arguments are plain integers.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttrVer0,
                pid,
                -1,
                -1,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = i32::try_from(fd).map_err(|_| io::Error::other("perf_event_open: fd"))?;
        // SAFETY: the kernel just returned this descriptor to us alone.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(CommandClock {
            counter: File::from(owned),
        })
    }

    /// CPU time of the command's tree since `open`, ns.
    pub fn read_ns(&self) -> io::Result<u64> {
        let mut value = [0u8; 8];
        (&self.counter).read_exact(&mut value)?;
        Ok(u64::from_ne_bytes(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_is_the_kernels_first_version() {
        assert_eq!(std::mem::size_of::<PerfEventAttrVer0>(), 64);
    }

    /// A child that burns CPU and forks: the clock follows it while it
    /// runs, between the scheduler's ticks, and takes in what its exited
    /// children ran.
    #[test]
    fn follows_a_running_child_and_its_children() {
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; \
                 sh -c 'j=0; while [ $j -lt 100000 ]; do j=$((j+1)); done'",
            ])
            .spawn()
            .unwrap();
        let clock = CommandClock::open(child.id() as i32).expect("perf_event_open on our child");
        let first = clock.read_ns().unwrap();
        let mut later = first;
        for _ in 0..1000 {
            later = clock.read_ns().unwrap();
            if later > first {
                break;
            }
            std::thread::yield_now();
        }
        assert!(later > first, "moves while the child runs");
        let status = child.wait().unwrap();
        assert!(status.success());
        let done = clock.read_ns().unwrap();
        assert!(
            done > later,
            "{done} <= {later}: the grandchild's loop counts"
        );
    }
}
