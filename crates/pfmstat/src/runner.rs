//! Running the command under the counters.
//!
//! Who is counted: before the command starts, the device counts for the
//! *selected* threads with none selected (see `CountingDevice::prepare`) and is
//! already enabled. The forked child, before `exec`, issues
//! `PCNTLOGSELECT` on the inherited file descriptor: the daemon takes the
//! caller from the FUSE request's thread id, so the child's thread gets the
//! PME bit, and with it every thread and process it creates afterwards
//! (perf `inherit`). pfmstat's own work (waiting, reading, reprogramming)
//! is never counted; the command's `exec` and everything after it is.
//!
//! Why `-s` reads instead of disabling: re-enabling or reprogramming makes
//! the daemon reopen its host counters on the PME thread, and perf's
//! `inherit` only reaches tasks created after that, so a disable/enable
//! would silently drop every descendant that already exists. Counting
//! therefore never stops; pfmstat reads the counters at each SIGUSR1 and
//! SIGUSR2 and counts only the differences inside the windows. `-a` has
//! to reprogram (that is what multiplexing is): it warns when the command
//! had other tasks when the mux was switched.

use super::Error;
use super::accounting::{Ledger, delta};
use super::client::{CountingDevice, Reading};
use super::command_clock::CommandClock;
use super::events::Config;
use super::procs::{TaskClock, Tracker};
use super::report::Exit;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use pfm_client::{SpawnOptions, spawn_counted};
use std::ffi::OsString;
use std::process::Command;
use std::time::{Duration, Instant};

/// What to do while the command runs.
pub struct Plan<'a> {
    pub configs: &'a [Config],
    /// `-a`: switch configurations every slice.
    pub slice: Option<Duration>,
    /// `-s`: count only inside SIGUSR1..SIGUSR2 windows.
    pub signals: bool,
    /// `-mp`: poll the process tree this often.
    pub track: Option<Duration>,
}

pub struct Outcome {
    pub pid: i32,
    pub exit: Exit,
    pub elapsed: Duration,
    /// CPU time of the command and its waited-for descendants (wait4).
    pub tree_cpu_ns: u64,
    pub ledger: Ledger,
    pub switches: u64,
    pub switch_time: Duration,
    pub windows: u32,
    pub tracker: Option<Tracker>,
    /// A device error after the command started: counting stopped there,
    /// the command ran to its end.
    pub failure: Option<Error>,
}

fn sys(what: &'static str) -> impl Fn(Errno) -> Error {
    move |errno| Error::Sys { what, errno }
}

/// The signals pfmstat takes through its signalfd.
fn handled(signals: bool) -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGHUP,
    ] {
        set.add(s);
    }
    if signals {
        set.add(Signal::SIGUSR1);
        set.add(Signal::SIGUSR2);
    }
    set
}

/// CPU time the command may run across one multiplexing read (a read takes
/// some 20 µs) before it is taken again, up to `READ_TRIES` times.
const READ_BRACKET_NS: u64 = 100_000;
const READ_TRIES: usize = 8;

/// The command's CPU time, to weigh `-a` intervals by: exact at each read
/// from a perf task-clock on the command (`command_clock`), or, where perf
/// refuses it, summed from the processes' CPU-time clocks, which lag by up
/// to a scheduler tick.
enum CommandTime {
    Perf {
        clock: CommandClock,
        /// What the command ran before the counter opened, ns.
        before: u64,
        last: u64,
    },
    Proc(TaskClock),
}

impl CommandTime {
    fn for_command(pid: i32) -> CommandTime {
        match CommandClock::open(pid) {
            Ok(clock) => {
                let before = TaskClock::default().sample(&[pid]);
                CommandTime::Perf {
                    clock,
                    before,
                    last: before,
                }
            }
            Err(_) => CommandTime::Proc(TaskClock::default()),
        }
    }

    /// The command's cumulative CPU time, ns.
    fn sample(&mut self, pids: &[i32]) -> u64 {
        match self {
            CommandTime::Perf {
                clock,
                before,
                last,
            } => {
                if let Ok(ns) = clock.read_ns() {
                    *last = (*before + ns).max(*last);
                }
                *last
            }
            CommandTime::Proc(clock) => clock.sample(pids),
        }
    }
}

/// Counting state between two reads.
struct Timeline<'a> {
    device: &'a mut CountingDevice,
    ledger: Ledger,
    last: Reading,
    /// The command's CPU time at `last` (multiplexing only), ns.
    last_cpu: u64,
    /// Multiplexing: weigh intervals by the command's CPU time.
    clock: Option<CommandTime>,
    current: usize,
    in_window: bool,
}

impl Timeline<'_> {
    /// Reads the counters (and the command's CPU time when weighing by it);
    /// returns the reading, the interval's wall time and its weight.
    fn read(&mut self, pids: &[i32]) -> Result<(Reading, Duration, Duration), Error> {
        let Some(clock) = self.clock.as_mut() else {
            let now = self.device.read()?;
            let wall = now.at - self.last.at;
            return Ok((now, wall, wall));
        };
        // The device's snapshot lies somewhere inside the read, so the
        // command's CPU time is taken on both sides and the midpoint used.
        // The bracket's width is the weight's error: when pfmstat or the
        // daemon waited for a CPU inside it while the command ran (a loaded
        // machine), the read is taken again and the narrowest one kept.
        let mut bracketed = || -> Result<(Reading, u64, u64), Error> {
            let before = clock.sample(pids);
            let now = self.device.read()?;
            let after = clock.sample(pids);
            let width = after.saturating_sub(before);
            Ok((now, before + width / 2, width))
        };
        let mut best = bracketed()?;
        for _ in 1..READ_TRIES {
            if best.2 <= READ_BRACKET_NS {
                break;
            }
            let again = bracketed()?;
            if again.2 < best.2 {
                best = again;
            }
        }
        let (now, cpu, _) = best;
        let wall = now.at - self.last.at;
        let weight = Duration::from_nanos(cpu.saturating_sub(self.last_cpu));
        self.last_cpu = cpu;
        Ok((now, wall, weight))
    }

    /// Reads and credits the interval since the last read to the current
    /// configuration.
    fn mark(&mut self, configs: &[Config], pids: &[i32]) -> Result<(), Error> {
        let (now, wall, weight) = self.read(pids)?;
        let config = &configs[self.current];
        let d = delta(&self.last.per_cpu, &now.per_cpu);
        self.ledger
            .credit(config, config, &d, wall, weight, self.in_window);
        self.last = now;
        Ok(())
    }

    /// Read, reprogram, read: the slice before is clean; the switch
    /// interval is credited only where a counter kept its event.
    fn switch(&mut self, configs: &[Config], pids: &[i32]) -> Result<Duration, Error> {
        self.mark(configs, pids)?;
        let before = self.last.at;
        let next = (self.current + 1) % configs.len();
        self.device
            .program(&configs[next])
            .map_err(|source| Error::Program {
                what: "reprogramming the mux (-a)",
                source,
            })?;
        let (now, wall, weight) = self.read(pids)?;
        let d = delta(&self.last.per_cpu, &now.per_cpu);
        self.ledger.credit(
            &configs[self.current],
            &configs[next],
            &d,
            wall,
            weight,
            self.in_window,
        );
        self.last = now;
        self.current = next;
        Ok(self.last.at - before)
    }
}

/// Forks, has the child select itself for counting, execs `command`, and
/// follows it to its end. The device must be prepared, programmed with
/// `plan.configs[0]` and started.
pub fn run(
    device: &mut CountingDevice,
    command: &[OsString],
    plan: &Plan,
) -> Result<Outcome, Error> {
    let mask = handled(plan.signals);
    // They stay blocked until pfmstat exits: a SIGUSR2 arriving after the
    // command's end must not kill pfmstat before it reports.
    mask.thread_block().map_err(sys("blocking signals"))?;
    run_blocked(device, command, plan, &mask)
}

fn run_blocked(
    device: &mut CountingDevice,
    command: &[OsString],
    plan: &Plan,
    mask: &SigSet,
) -> Result<Outcome, Error> {
    let signalfd = SignalFd::with_flags(mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(sys("signalfd"))?;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(sys("epoll_create"))?;
    epoll
        .add(&signalfd, EpollEvent::new(EpollFlags::EPOLLIN, 0))
        .map_err(sys("epoll_ctl"))?;
    if plan.track.is_some() {
        // Orphans of the command become our children, so -mp can still see
        // them in the tree (we reap them).
        nix::sys::prctl::set_child_subreaper(true).map_err(sys("PR_SET_CHILD_SUBREAPER"))?;
    }

    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    let first = device.read()?;
    let started = Instant::now();
    // The command gets the PME bit before exec, with every signal unblocked
    // (pfmstat blocks its own for the signalfd).
    let options = SpawnOptions {
        stop_at_exec: false,
        unblock_signals: true,
    };
    let child = spawn_counted(device.device(), cmd, options).map_err(|source| Error::Spawn {
        command: command[0].to_string_lossy().into_owned(),
        source,
    })?;
    let pid = child.id() as i32;
    drop(child); // we wait for it ourselves (waitid/wait4)

    let rotate = plan.slice.filter(|_| plan.configs.len() > 1);
    let mut timeline = Timeline {
        device,
        ledger: Ledger::new(first.per_cpu.len()),
        last: first,
        last_cpu: 0,
        clock: rotate.map(|_| CommandTime::for_command(pid)),
        current: 0,
        in_window: !plan.signals,
    };
    for config in plan.configs {
        for (c, e) in config.events() {
            timeline.ledger.register(e, c);
        }
    }
    let mut tracker = plan
        .track
        .map(|_| Tracker::new(pid))
        .or_else(|| plan.slice.map(|_| Tracker::new(pid)));
    let track_every = plan
        .track
        .or(plan.slice.map(|_| Duration::from_millis(100)));
    let mut next_switch = rotate.map(|s| Instant::now() + s);
    let mut next_track = track_every.map(|t| Instant::now() + t);
    let mut switches = 0u64;
    let mut switch_time = Duration::ZERO;
    let mut windows = 0u32;
    let mut failure: Option<Error> = None;
    let mut exited = false;
    if let Some(t) = tracker.as_mut() {
        t.poll();
    }
    let pids =
        |tracker: &Option<Tracker>| tracker.as_ref().map_or_else(|| vec![pid], Tracker::pids);

    while !exited {
        let deadline = [next_switch, next_track].into_iter().flatten().min();
        let timeout = match deadline {
            None => EpollTimeout::NONE,
            Some(d) => {
                let ms = d.saturating_duration_since(Instant::now()).as_millis();
                EpollTimeout::try_from(ms.min(60_000) as u32).unwrap_or(EpollTimeout::ZERO)
            }
        };
        let mut events = [EpollEvent::empty(); 1];
        match epoll.wait(&mut events, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(sys("epoll_wait")(e)),
        }
        while let Ok(Some(info)) = signalfd.read_signal() {
            let Ok(signal) = Signal::try_from(info.ssi_signo as i32) else {
                continue;
            };
            match signal {
                Signal::SIGCHLD => exited |= reap_others_and_peek(pid),
                Signal::SIGUSR1 if !timeline.in_window => {
                    if failure.is_none()
                        && let Err(e) = timeline.mark(plan.configs, &pids(&tracker))
                    {
                        failure = Some(e);
                    }
                    timeline.in_window = true;
                    windows += 1;
                }
                Signal::SIGUSR2 if timeline.in_window => {
                    if failure.is_none()
                        && let Err(e) = timeline.mark(plan.configs, &pids(&tracker))
                    {
                        failure = Some(e);
                    }
                    timeline.in_window = false;
                }
                Signal::SIGTERM | Signal::SIGHUP => {
                    let _ = kill(Pid::from_raw(pid), signal);
                }
                // SIGINT/SIGQUIT from the terminal reach the command too; we
                // stay to report, as time(1) does. Repeated USR1/USR2 are no-ops.
                _ => {}
            }
        }
        if exited {
            break;
        }
        let now = Instant::now();
        if let (Some(at), Some(slice)) = (next_switch, rotate)
            && now >= at
        {
            if failure.is_none() {
                match timeline.switch(plan.configs, &pids(&tracker)) {
                    Ok(took) => {
                        switches += 1;
                        switch_time += took;
                    }
                    Err(e) => failure = Some(e),
                }
            }
            next_switch = Some(Instant::now() + slice);
        }
        if let (Some(at), Some(every)) = (next_track, track_every)
            && now >= at
        {
            if let Some(t) = tracker.as_mut() {
                t.poll();
            }
            next_track = Some(Instant::now() + every);
        }
        // A SIGCHLD may have been merged with one we already consumed.
        if !exited {
            exited = reap_others_and_peek(pid);
        }
    }
    let elapsed = started.elapsed();
    if failure.is_none()
        && let Err(e) = timeline.mark(plan.configs, &pids(&tracker))
    {
        failure = Some(e);
    }
    if let Some(t) = tracker.as_mut() {
        t.poll(); // the command is a zombie: its /proc entry is still there
    }
    let (exit, tree_cpu_ns) = reap(pid)?;
    Ok(Outcome {
        pid,
        exit,
        elapsed,
        tree_cpu_ns,
        ledger: timeline.ledger,
        switches,
        switch_time,
        windows,
        tracker,
        failure,
    })
}

/// Reaps any exited child other than the command (orphans that became ours
/// under `-mp`); true when the command itself has exited (left unreaped,
/// so its /proc entry can still be read).
fn reap_others_and_peek(pid: i32) -> bool {
    loop {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::All, flags) {
            Ok(WaitStatus::Exited(p, _)) | Ok(WaitStatus::Signaled(p, _, _)) => {
                if p.as_raw() == pid {
                    return true;
                }
                let _ = waitpid(p, None);
            }
            _ => return false,
        }
    }
}

/// Reaps the command: its exit and the CPU time of it and its waited-for
/// descendants.
fn reap(pid: i32) -> Result<(Exit, u64), Error> {
    let mut status = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    loop {
        // SAFETY: wait4 writes the status and a whole `struct rusage` into
        // memory we own; `usage` is zero-initialised.
        let r = unsafe { libc::wait4(pid, &mut status, 0, usage.as_mut_ptr()) };
        if r == pid {
            break;
        }
        let errno = Errno::last();
        if errno != Errno::EINTR {
            return Err(Error::Sys {
                what: "wait4",
                errno,
            });
        }
    }
    // SAFETY: zero-initialised, and filled by the successful wait4.
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    let cpu = tv(usage.ru_utime) + tv(usage.ru_stime);
    let exit = if libc::WIFSIGNALED(status) {
        Exit::Signal(libc::WTERMSIG(status))
    } else {
        Exit::Code(libc::WEXITSTATUS(status))
    };
    Ok((exit, cpu))
}
