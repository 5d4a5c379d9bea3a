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
//! Why `-s` reads instead of disabling: counting never needs to change
//! the device's state at the edges of a window, so no edge can make the
//! daemon open host counters anew (perf's `inherit` reaches only tasks
//! created after that). Counting therefore never stops; pfmstat reads the counters at each SIGUSR1 and
//! SIGUSR2 and counts only the differences inside the windows. `-a` has
//! to reprogram (that is what multiplexing is): the command stops at its
//! exec while every configuration is programmed once, so the daemon keeps
//! each one's host events, opened before the command created anything,
//! and a switch takes them back ([`open_every_config`]). pfmstat warns
//! when the daemon had to open any anew (`pi_reopened`) while the command
//! had other tasks.
//!
//! `--pid` ([`Target::Pid`]): the device counts only threads that select
//! themselves, and another process cannot be made to, so the device counts
//! everything (LOGALL scope, set up by the caller) while the target lives.
//! Counting ends when the target exits (its pidfd turns readable), when the
//! command ends, or at SIGINT, SIGTERM or SIGHUP (passed on to the
//! command). The command runs without the PME bit: a `PCNTLOGSELECT` would
//! change the open's scope.

use super::Error;
use super::accounting::{Ledger, delta};
use super::client::{CountingDevice, Reading};
use super::command_clock::CommandClock;
use super::events::Config;
use super::procs::{TaskClock, Tracker};
use super::report::{Ending, Exit};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use pfm_client::{SpawnOptions, spawn_counted};
use std::ffi::OsString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

/// Whose events are counted.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// The command and its descendants: the child selects itself.
    Command(&'a [OsString]),
    /// `--pid`: the device counts system-wide while `pid` lives; `command`,
    /// if any, bounds the time.
    Pid {
        pid: i32,
        command: Option<&'a [OsString]>,
    },
}

/// Called at each `--interval-print` period's end (and once at the end of
/// counting) with the ledger so far and the time since counting began.
pub type OnInterval<'a> = dyn FnMut(&Ledger, Duration) -> Result<(), Error> + 'a;

/// What to do while the command runs.
pub struct Plan<'a> {
    pub configs: &'a [Config],
    /// `-a`: switch configurations every slice.
    pub slice: Option<Duration>,
    /// `-s`: count only inside SIGUSR1..SIGUSR2 windows.
    pub signals: bool,
    /// `-mp`: poll the process tree this often.
    pub track: Option<Duration>,
    /// `--interval-print`: read and report this often.
    pub interval: Option<Duration>,
    /// Give the command pfmstat's stderr as its stdout: machine output owns
    /// pfmstat's stdout and must not be mixed with the command's.
    pub command_stdout_to_stderr: bool,
}

pub struct Outcome {
    /// The command's pid; `None` with `--pid` and no command.
    pub pid: Option<i32>,
    pub exit: Option<Exit>,
    /// What ended counting (`--pid`; a command's end otherwise).
    pub ending: Ending,
    /// `--pid`: the target's CPU time while counted, ns.
    pub target_cpu_ns: Option<u64>,
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
    /// Times the daemon opened host events anew on the command's thread
    /// after it started (`pi_reopened`); `None` where it could not be read.
    pub reopened: Option<u64>,
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

/// A pidfd for `pid`: readable once the process has exited.
fn pidfd(pid: i32) -> Result<OwnedFd, Error> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(match Errno::last() {
            Errno::ESRCH => Error::NoSuchProcess(pid),
            errno => Error::Sys {
                what: "pidfd_open",
                errno,
            },
        });
    }
    // SAFETY: the descriptor was just created for us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `command` as a `Command`, its stdout as the plan says.
fn command_of(command: &[OsString], plan: &Plan) -> Result<Command, Error> {
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    if plan.command_stdout_to_stderr {
        pfm_client::stdout_to_stderr(&mut cmd).map_err(|source| Error::Io {
            what: "duplicating stderr for the command's stdout".into(),
            source,
        })?;
    }
    Ok(cmd)
}

fn spawn_error(command: &[OsString]) -> impl FnOnce(pfm_client::SpawnError) -> Error + '_ {
    move |source| Error::Spawn {
        command: command[0].to_string_lossy().into_owned(),
        source,
    }
}

/// Runs the target under the counters (see the module docs). The device
/// must be prepared for the target's scope, programmed with
/// `plan.configs[0]` and started.
pub fn run(
    device: &mut CountingDevice,
    target: Target,
    plan: &Plan,
    on_interval: &mut OnInterval,
) -> Result<Outcome, Error> {
    let mask = handled(plan.signals);
    // They stay blocked until pfmstat exits: a SIGUSR2 arriving after the
    // command's end must not kill pfmstat before it reports.
    mask.thread_block().map_err(sys("blocking signals"))?;
    run_blocked(device, target, plan, &mask, on_interval)
}

const SIGNALS: u64 = 0;
const TARGET_EXIT: u64 = 1;
/// How often `--pid` samples the target's CPU time.
const TARGET_SAMPLE: Duration = Duration::from_millis(100);

fn run_blocked(
    device: &mut CountingDevice,
    target: Target,
    plan: &Plan,
    mask: &SigSet,
    on_interval: &mut OnInterval,
) -> Result<Outcome, Error> {
    let signalfd = SignalFd::with_flags(mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(sys("signalfd"))?;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(sys("epoll_create"))?;
    epoll
        .add(&signalfd, EpollEvent::new(EpollFlags::EPOLLIN, SIGNALS))
        .map_err(sys("epoll_ctl"))?;
    if plan.track.is_some() {
        // Orphans of the command become our children, so -mp can still see
        // them in the tree (we reap them).
        nix::sys::prctl::set_child_subreaper(true).map_err(sys("PR_SET_CHILD_SUBREAPER"))?;
    }
    let watched = match target {
        Target::Pid { pid, .. } => {
            let fd = pidfd(pid)?;
            epoll
                .add(&fd, EpollEvent::new(EpollFlags::EPOLLIN, TARGET_EXIT))
                .map_err(sys("epoll_ctl"))?;
            Some((pid, fd))
        }
        Target::Command(_) => None,
    };
    let mut target_clock = TaskClock::default();
    let target_cpu_before = watched
        .as_ref()
        .map(|(pid, _)| target_clock.sample(&[*pid]));

    let rotate = plan.slice.filter(|_| plan.configs.len() > 1);
    let first = device.read()?;
    let started = Instant::now();
    // -a weighs intervals by the command's CPU time: the clock follows what
    // the command creates once it is open (opened while the command is
    // stopped at its exec, before it can create anything).
    let mut command_time = None;
    let pid = match target {
        Target::Command(command) => {
            // The command gets the PME bit before exec, with every signal
            // unblocked (pfmstat blocks its own for the signalfd); under -a
            // it stops at its exec (where ptrace is refused, it does not,
            // and the warning below says what that costs).
            let spawn = |stop_at_exec| {
                let options = SpawnOptions {
                    stop_at_exec,
                    unblock_signals: true,
                };
                spawn_counted(device.device(), command_of(command, plan)?, options)
                    .map_err(spawn_error(command))
            };
            let (child, traced) = match spawn(rotate.is_some()) {
                Err(Error::Spawn {
                    source: pfm_client::SpawnError::TraceMe(_),
                    ..
                }) => (spawn(false)?, false),
                spawned => (spawned?, rotate.is_some()),
            };
            let pid = child.id() as i32;
            command_time = rotate.map(|_| CommandTime::for_command(pid));
            if traced {
                open_every_config(device, plan.configs, pid)?;
            }
            Some(pid)
        }
        Target::Pid {
            command: Some(command),
            ..
        } => {
            // No PME bit: the scope is everything already. std resets the
            // signal mask in the child.
            let child = command_of(command, plan)?
                .spawn()
                .map_err(|e| spawn_error(command)(pfm_client::SpawnError::Spawn(e)))?;
            Some(child.id() as i32)
        }
        Target::Pid { command: None, .. } => None,
    };
    // We wait for the child ourselves (waitid/wait4): the Child is dropped.
    let reopened_before = device.device().info().map(|i| i.pi_reopened);
    let mut timeline = Timeline {
        device,
        ledger: Ledger::new(first.per_cpu.len()),
        last: first,
        last_cpu: 0,
        // System-wide counters count all the time: wall time weighs them.
        clock: command_time,
        current: 0,
        in_window: !plan.signals,
    };
    for config in plan.configs {
        for (c, e) in config.events() {
            timeline.ledger.register(e, c);
        }
    }
    // The command's tree, for -mp and for -a's warning (a system-wide
    // count loses no tasks at a switch).
    let tree_root = match target {
        Target::Command(_) => pid,
        Target::Pid { .. } => None,
    };
    let mut tracker =
        tree_root.and_then(|root| plan.track.or(plan.slice).map(|_| Tracker::new(root)));
    let track_every = tree_root.and(
        plan.track
            .or(plan.slice.map(|_| Duration::from_millis(100))),
    );
    let mut next_switch = rotate.map(|s| Instant::now() + s);
    let mut next_track = track_every.map(|t| Instant::now() + t);
    let mut next_interval = plan.interval.map(|i| started + i);
    // --pid: the target's CPU time is sampled as it runs, so that little
    // is lost when it exits and is reaped before pfmstat's last look.
    let mut next_target_sample = watched.as_ref().map(|_| started + TARGET_SAMPLE);
    let mut ending: Option<Ending> = None;
    let mut switches = 0u64;
    let mut switch_time = Duration::ZERO;
    let mut windows = 0u32;
    let mut failure: Option<Error> = None;
    let mut exited = false;
    if let Some(t) = tracker.as_mut() {
        t.poll();
    }
    let pids = |tracker: &Option<Tracker>| {
        tracker
            .as_ref()
            .map_or_else(|| pid.into_iter().collect(), Tracker::pids)
    };

    while !exited {
        let deadline = [next_switch, next_track, next_interval, next_target_sample]
            .into_iter()
            .flatten()
            .min();
        let timeout = match deadline {
            None => EpollTimeout::NONE,
            Some(d) => {
                let ms = d.saturating_duration_since(Instant::now()).as_millis();
                EpollTimeout::try_from(ms.min(60_000) as u32).unwrap_or(EpollTimeout::ZERO)
            }
        };
        let mut events = [EpollEvent::empty(); 2];
        let ready = match epoll.wait(&mut events, timeout) {
            Ok(n) => n,
            Err(Errno::EINTR) => 0,
            Err(e) => return Err(sys("epoll_wait")(e)),
        };
        if events[..ready].iter().any(|e| e.data() == TARGET_EXIT) {
            ending.get_or_insert(Ending::TargetExited);
            exited = true;
        }
        while let Ok(Some(info)) = signalfd.read_signal() {
            let Ok(signal) = Signal::try_from(info.ssi_signo as i32) else {
                continue;
            };
            match signal {
                Signal::SIGCHLD => {
                    if let Some(pid) = pid
                        && reap_others_and_peek(pid)
                    {
                        ending.get_or_insert(Ending::CommandEnded);
                        exited = true;
                    }
                }
                Signal::SIGINT | Signal::SIGQUIT | Signal::SIGTERM | Signal::SIGHUP
                    if watched.is_some() =>
                {
                    // --pid: the signal ends counting; the command gets it too.
                    if let Some(pid) = pid {
                        let _ = kill(Pid::from_raw(pid), signal);
                    }
                    ending.get_or_insert(Ending::Signal(signal as i32));
                    exited = true;
                }
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
                    if let Some(pid) = pid {
                        let _ = kill(Pid::from_raw(pid), signal);
                    }
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
        if let (Some(at), Some(every)) = (next_interval, plan.interval)
            && now >= at
        {
            if failure.is_none() {
                match timeline.mark(plan.configs, &pids(&tracker)) {
                    Ok(()) => on_interval(&timeline.ledger, started.elapsed())?,
                    Err(e) => failure = Some(e),
                }
            }
            // Periods keep to the start's grid unless pfmstat fell behind.
            next_interval = Some((at + every).max(Instant::now()));
        }
        if let (Some(at), Some((target, _))) = (next_target_sample, &watched)
            && now >= at
        {
            target_clock.sample(&[*target]);
            next_target_sample = Some(Instant::now() + TARGET_SAMPLE);
        }
        // A SIGCHLD may have been merged with one we already consumed.
        if !exited
            && let Some(pid) = pid
            && reap_others_and_peek(pid)
        {
            ending.get_or_insert(Ending::CommandEnded);
            exited = true;
        }
    }
    let elapsed = started.elapsed();
    let reopened = (reopened_before.as_ref().ok())
        .zip(timeline.device.device().info().ok())
        .map(|(before, now)| now.pi_reopened.saturating_sub(*before));
    if failure.is_none() {
        match timeline.mark(plan.configs, &pids(&tracker)) {
            Ok(()) if plan.interval.is_some() => on_interval(&timeline.ledger, elapsed)?,
            Ok(()) => {}
            Err(e) => failure = Some(e),
        }
    }
    let target_cpu_ns = watched
        .as_ref()
        .zip(target_cpu_before)
        .map(|((pid, _), before)| target_clock.sample(&[*pid]).saturating_sub(before));
    if let Some(t) = tracker.as_mut() {
        t.poll(); // the command is a zombie: its /proc entry is still there
    }
    // With --pid the command may still run (counting ended for the target
    // or a signal): its status is still the one pfmstat exits with.
    let (exit, tree_cpu_ns) = match pid {
        Some(pid) => {
            let (exit, ns) = reap(pid)?;
            (Some(exit), ns)
        }
        None => (None, 0),
    };
    Ok(Outcome {
        pid,
        exit,
        ending: ending.unwrap_or(Ending::CommandEnded),
        target_cpu_ns,
        elapsed,
        tree_cpu_ns,
        ledger: timeline.ledger,
        switches,
        switch_time,
        windows,
        tracker,
        failure,
        reopened,
    })
}

/// `-a`: programs every configuration once, the first last, while the
/// command is stopped at its exec (`PTRACE_TRACEME`), then lets it run.
/// Under `PCNTLOGSELECT` the daemon keeps each configuration's host events,
/// switched off, and a later switch takes them back: opened on the command's
/// thread before it created anything, they follow every task it creates
/// (docs/device.md §3). A command that did not stop is killed.
fn open_every_config(
    device: &mut CountingDevice,
    configs: &[Config],
    pid: i32,
) -> Result<(), Error> {
    let opened = pfm_client::wait_for_exec_stop(pid)
        .map_err(|why| Error::Io {
            what: "-a: waiting for the command's exec".into(),
            source: std::io::Error::other(why),
        })
        .and_then(|()| {
            (configs[1..].iter())
                .chain(&configs[..1])
                .try_for_each(|config| device.program(config))
                .map_err(|source| Error::Program {
                    what: "opening every -a configuration",
                    source,
                })
        });
    let pid = Pid::from_raw(pid);
    let opened =
        opened.and_then(|()| nix::sys::ptrace::detach(pid, None).map_err(sys("PTRACE_DETACH")));
    if opened.is_err() {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
    }
    opened
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
