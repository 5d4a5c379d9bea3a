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

use perf_event::Builder;
use perf_event::events::Software;
use std::io;

#[derive(Debug)]
pub struct CommandClock {
    counter: perf_event::Counter,
}

impl CommandClock {
    /// Counts `pid` and its descendants from now on.
    pub fn open(pid: i32) -> io::Result<CommandClock> {
        let counter = Builder::new(Software::TASK_CLOCK)
            .observe_pid(pid)
            .any_cpu()
            .inherit(true)
            // Asked for so that `perf_event_paranoid` 2 allows it; a clock
            // counter counts kernel time all the same (the flag only
            // filters samples).
            .exclude_kernel(true)
            .exclude_hv(true)
            .enabled(true)
            .build()?;
        Ok(CommandClock { counter })
    }

    /// CPU time of the command's tree since `open`, ns.
    pub fn read_ns(&mut self) -> io::Result<u64> {
        self.counter.read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut clock =
            CommandClock::open(child.id() as i32).expect("perf_event_open on our child");
        let first = clock.read_ns().unwrap();
        // Poll until the clock moves or the child is gone: on a loaded
        // machine the child may wait long for a CPU.
        let mut later = first;
        while child.try_wait().unwrap().is_none() {
            later = clock.read_ns().unwrap();
            if later > first {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
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
