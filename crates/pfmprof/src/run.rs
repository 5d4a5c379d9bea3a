//! Running a program under the profiler.
//!
//! User profiling (uprofile) needs the program's text at run-time addresses
//! before the first sample, and the PME bit on the program's own thread:
//!
//! 1. pfmprof opens the device, learns its model (PCNTGETINFO), resolves
//!    `-e`/`-period`/`-pm` on it ([`crate::event`]), selects
//!    PFM_COUNTERS|PFM_IPL|PFM_PROFILING (with the EV67 profile-me statistic)
//!    and the event through the model's family ioctls with every other
//!    counter off, and starts the program with `pfm_client::spawn_counted`.
//! 2. Between fork and exec the child calls PCNTLOGSELECT on the inherited
//!    descriptor (so the PME bit is its own: the FUSE request carries its
//!    tid) and PTRACE_TRACEME, then execs. A refused LOGSELECT or exec is an
//!    error; a refused TRACEME starts the program again without it (4).
//! 3. The kernel stops a traced child with SIGTRAP once exec has completed:
//!    the executable and the dynamic loader are mapped and not one
//!    instruction of the program has run. pfmprof reads /proc/PID/maps (of
//!    the newest process of the tree with `-f`), makes each executable file
//!    mapping a range, adds the kernel text where kallsyms shows addresses,
//!    sets the first range, PCNTCLEARCNT, PCNTRENABLE (the host sampling
//!    events are opened now, on the child's thread with `inherit`, so every
//!    thread and process it creates from here on is counted) and detaches.
//! 4. Without ptrace (`--no-ptrace`, or PTRACE_TRACEME refused, e.g. by a
//!    seccomp policy) the child execs at once and pfmprof polls
//!    /proc/PID/exe until it is no longer pfmprof's own (the spawn returns
//!    when its close-on-exec pipe closes, *before* the kernel maps the new
//!    image, so that alone is not enough), then does the same. Samples taken
//!    before that — tens to hundreds of microseconds of the dynamic loader —
//!    are lost, and a process the program forks in that window is not
//!    counted.
//! 5. Until the program ends, the ranges take turns ([`crate::rotation`]):
//!    at the end of each window pfmprof reads the buckets, reads the maps
//!    again (libraries the loader maps after exec join; with `-f` the
//!    followed process may change) and sets the next range.
//!
//! Names and source lines come from blazesym ([`crate::symbolize`]) once the
//! program has ended.
//!
//! Kernel profiling (kprofile, `-k`) knows its one range from /proc/kallsyms
//! up front: PCNTLOGALL, PCNTSETKRANGE, PCNTRENABLE, then the program runs
//! (with `-select`, the child takes the PME bit as above instead of LOGALL).
//!
//! Profiling ends when the program exits, or at SIGINT, SIGTERM or SIGHUP:
//! pfmprof then disables the device at once, passes the signal on to the
//! program and waits for it.

use super::ProfError;
use super::args::ProfileArgs;
use super::event::{self, EventChoice, Programming};
use super::kallsyms;
use super::maps;
use super::report::{Header, Profile, Space};
use super::rotation::Rotation;
use super::symbolize::{Mapped, Symbolizer};
use nix::errno::Errno;
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use pfm_abi::PFIPL_ENTRIES;
use pfm_client::{Device, Items, OpenMode, SpawnError, SpawnOptions, spawn_counted};
use pfm_model::ev5::{PF5_CTXT_ALL_PROC, PF5_CTXT_SEL_PROC};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    /// The shell's convention: the code, or 128 + the signal.
    pub fn status(self) -> i32 {
        match self {
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        }
    }
}

pub struct Outcome {
    pub profile: Profile,
    pub exit: Exit,
    /// The range was set after the program started (no ptrace).
    pub late_start: bool,
}

/// The stopping signal pfmprof got (SIGINT, SIGTERM, SIGHUP), 0 for none.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(signo: libc::c_int) {
    STOP_SIGNAL.store(signo, Ordering::SeqCst);
}

/// `PROGRAM` as execvp would find it, canonical (as /proc/PID/maps names it).
pub fn find_program(program: &OsStr) -> Result<PathBuf, ProfError> {
    let candidates: Vec<PathBuf> = if program.as_bytes().contains(&b'/') {
        vec![PathBuf::from(program)]
    } else {
        let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
        std::env::split_paths(&path)
            .map(|d| d.join(program))
            .collect()
    };
    let mut not_executable = false;
    for candidate in candidates {
        let Ok(meta) = std::fs::metadata(&candidate) else {
            continue;
        };
        use std::os::unix::fs::PermissionsExt;
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            return std::fs::canonicalize(&candidate)
                .map_err(ProfError::io(candidate.display().to_string()));
        }
        not_executable = true;
    }
    // Worded as pfm-client words a command that does not start.
    let kind = match not_executable {
        true => std::io::ErrorKind::PermissionDenied,
        false => std::io::ErrorKind::NotFound,
    };
    Err(ProfError::Program(format!(
        "{}: {}",
        program.to_string_lossy(),
        SpawnError::Spawn(kind.into())
    )))
}

/// How the program is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// As it is (kprofile under PCNTLOGALL counts everything anyway).
    Uncounted,
    /// With the PME bit: PCNTLOGSELECT in the child before exec.
    Counted,
    /// Counted, and stopped at exec (PTRACE_TRACEME) until pfmprof has set
    /// the range; counted from exec on where TRACEME is refused.
    CountedStoppedAtExec,
}

struct Child {
    pid: Pid,
    traced: bool,
}

/// Starts `argv` from the executable `exe` as `start` says; its standard
/// output is pfmprof's standard error when `stdout_to_stderr` (the report
/// has pfmprof's standard output, and the two must not mix).
fn spawn(
    device: &Device,
    exe: &Path,
    argv: &[OsString],
    start: Start,
    stdout_to_stderr: bool,
) -> Result<Child, ProfError> {
    let command = || -> Result<Command, SpawnError> {
        let mut command = Command::new(exe);
        command.arg0(&argv[0]).args(&argv[1..]);
        if stdout_to_stderr {
            pfm_client::stdout_to_stderr(&mut command).map_err(SpawnError::Spawn)?;
        }
        Ok(command)
    };
    let counted = |stop_at_exec| {
        let options = SpawnOptions {
            stop_at_exec,
            unblock_signals: false,
        };
        spawn_counted(device, command()?, options)
    };
    let (spawned, traced) = match start {
        Start::Uncounted => (
            command().and_then(|mut c| c.spawn().map_err(SpawnError::Spawn)),
            false,
        ),
        Start::Counted => (counted(false), false),
        Start::CountedStoppedAtExec => match counted(true) {
            Err(SpawnError::TraceMe(errno)) => {
                tracing::info!("PTRACE_TRACEME refused ({errno}): profiling starts after exec");
                (counted(false), false)
            }
            spawned => (spawned, true),
        },
    };
    // We wait for it ourselves (waitpid), as for a tracee.
    let child = spawned.map_err(|e| spawn_failed(exe, e))?;
    Ok(Child {
        pid: Pid::from_raw(child.id() as i32),
        traced,
    })
}

fn spawn_failed(exe: &Path, error: SpawnError) -> ProfError {
    match error {
        SpawnError::Spawn(source) => {
            let errno = Errno::from_raw(source.raw_os_error().unwrap_or(0));
            ProfError::Program(format!(
                "exec {}: {errno} ({})",
                exe.display(),
                errno.desc()
            ))
        }
        refused => ProfError::Spawn(refused),
    }
}

fn kill_and_reap(child: &Child) {
    let _ = signal::kill(child.pid, Signal::SIGKILL);
    let _ = waitpid(child.pid, None);
}

/// SIGINT, SIGTERM and SIGHUP stop the profile and go on to the program,
/// as pfmstat passes them on: killed outright, pfmprof left the program
/// running.
fn catch_stop_signals() {
    let action = SigAction::new(
        SigHandler::Handler(on_stop_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        let _ = unsafe { signal::sigaction(signal, &action) };
    }
}

/// Binds pfmprof (and so the program it forks) to the CPU it runs on.
fn bind_here() -> Result<u32, ProfError> {
    let cpu = nix::sched::sched_getcpu().map_err(|e| ProfError::Io {
        what: "sched_getcpu".into(),
        source: e.into(),
    })?;
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).map_err(|e| ProfError::Io {
        what: "CpuSet".into(),
        source: e.into(),
    })?;
    nix::sched::sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| ProfError::Io {
        what: "sched_setaffinity".into(),
        source: e.into(),
    })?;
    Ok(cpu as u32)
}

/// Selects the items, the event, its period and every other counter off, as
/// `choice` says; on the EV5 family also the contexts (`PCNT5CTXTS`): whose
/// threads count, the program's tree (`PF5_CTXT_SEL_PROC`, its PME bit set
/// by the child) or, for `-k` without `-select`, every thread
/// (`PF5_CTXT_ALL_PROC`), in every processor mode.
///
/// Every mode, not only the profiled one: the buckets keep only samples of
/// the profiled mode anyway, and the interrupt count and IPL line then say
/// how the time split between user and kernel, as on the other models. A
/// counter restricted to one mode would drop that, and where the host
/// approximates cycles from `cpu-clock` (no PMU) it counts time in every
/// mode regardless, so the excluded mode's time would be charged to the
/// next sample of the profiled one (measured: `-k -select` of a user-mode
/// loop put 99% of its samples in `handle_softirqs`).
fn select_event(
    device: &Device,
    choice: &EventChoice,
    kernel: bool,
    select: bool,
) -> Result<(), ProfError> {
    let items = Items::COUNTERS | Items::IPL | Items::PROFILING;
    let refused = |e| refusal(choice, e);
    if choice.statistic.is_some() {
        device
            .set_items_with_statistic(items, choice.statistic_value())
            .map_err(refused)?;
    } else {
        device.set_items(items)?;
    }
    match choice.programming {
        Programming::Ev4 { iccsr } => device.set_mux(iccsr).map_err(refused)?,
        Programming::Ev5 { off, freq, mux } => {
            device.disable_counters(off)?;
            device.ev5_freq(freq).map_err(refused)?;
            device.ev5_mux(mux).map_err(refused)?;
            let threads = if kernel && !select {
                PF5_CTXT_ALL_PROC
            } else {
                PF5_CTXT_SEL_PROC
            };
            device.ev5_contexts(threads | PF5_CTXT_ALL_MODES)?;
        }
        Programming::Ev6 { off, mux } => {
            device.disable_counters(off)?;
            device.ev6_mux(mux).map_err(refused)?;
        }
    }
    let info = device.info()?;
    let period = info.pi_period[choice.counter];
    if period != choice.period {
        return Err(ProfError::Incompatible(format!(
            "{} on counter {}: pfmprof asked for a period of {} events, PCNTGETINFO says {period}",
            choice.event.name, choice.counter, choice.period
        )));
    }
    tracing::info!(
        model = %choice.implementation,
        event = choice.label(),
        counter = choice.counter,
        period,
        "event selected"
    );
    Ok(())
}

/// A refusal of the chosen event explained: the host cannot count it
/// (`EOPNOTSUPP`), or its period needs privilege (`EPERM`); other errors as
/// the device gave them.
fn refusal(choice: &EventChoice, error: pfm_client::Error) -> ProfError {
    let op = match &error {
        pfm_client::Error::Ioctl { op, .. } => *op,
        _ => return error.into(),
    };
    let model = choice.implementation;
    match error.errno() {
        Some(Errno::EOPNOTSUPP) => match choice.statistic {
            Some(statistic) if op == "PCNTSETITEMS" => ProfError::Refused(format!(
                "this host cannot measure the profile-me statistic {}: {} ({op}: EOPNOTSUPP); pfmd measures {} (pfmd --model {model} --list-events lists every statistic)",
                statistic.name,
                event::statistic_unavailable_because(statistic),
                event::measured_statistics().join(", ")
            )),
            _ => ProfError::Refused(format!(
                "this host cannot count {} on the {} ({op}: EOPNOTSUPP); pfmd --model {model} --list-events says why, and pfmstat -l lists what this host counts with the numbers -e takes",
                choice.event.name,
                event::model_name(model)
            )),
        },
        Some(Errno::EPERM) if choice.period == 256 => ProfError::Refused(format!(
            "-period 256 needs privilege: root, CAP_PERFMON or the group of pfmd --allow-group ({op}: EPERM); without -period pfmprof uses the counter's low-frequency period"
        )),
        _ => error.into(),
    }
}

/// `PF5_CTXT_ALL_MODES`: no processor mode excluded.
const PF5_CTXT_ALL_MODES: u64 = 0;

/// `/proc/PID/exe`, where it can be read.
fn exe_of(pid: Pid) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Waits until the child runs its program: stopped at exec (traced), or
/// (untraced) until `/proc/PID/exe` is no longer pfmprof's own.
fn wait_for_exec(child: &Child) -> Result<(), ProfError> {
    if child.traced {
        return pfm_client::wait_for_exec_stop(child.pid.as_raw()).map_err(ProfError::Program);
    }
    let me = std::env::current_exe().ok();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(exe) = exe_of(child.pid)
            && Some(&exe) != me.as_ref()
        {
            return Ok(());
        }
        match waitpid(child.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            _ => {
                return Err(ProfError::Program(
                    "the program exited before its ranges could be read (try without --no-ptrace)"
                        .into(),
                ));
            }
        }
        if Instant::now() > deadline {
            return Err(ProfError::Program(format!(
                "process {} did not exec its program within 5 s",
                child.pid
            )));
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// The process whose text is profiled: the child, or with `-f` the newest
/// live process of its tree (by start time).
fn followed(child: Pid, follow: bool) -> Pid {
    if !follow {
        return child;
    }
    // (pid, parent, start time) of every live process; zombies and the
    // dying run no text. A process gone since the listing is skipped.
    let procs: Vec<(i32, i32, u64)> = procfs::process::all_processes()
        .into_iter()
        .flatten()
        .filter_map(|process| process.ok()?.stat().ok())
        .filter(|stat| !matches!(stat.state, 'Z' | 'X'))
        .map(|stat| (stat.pid, stat.ppid, stat.starttime))
        .collect();
    let mut tree = vec![child.as_raw()];
    let mut newest = (0u64, child.as_raw());
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for &(pid, ppid, start) in &procs {
            if ppid == parent && !tree.contains(&pid) {
                tree.push(pid);
                newest = newest.max((start, pid));
            }
        }
        i += 1;
    }
    Pid::from_raw(newest.1)
}

/// Reads the followed process's text mappings into the rotation.
fn follow_maps(rotation: &mut Rotation<'_>, pid: Pid) {
    if let Ok(text) = maps::text_mappings_of(pid.as_raw()) {
        rotation.follow(pid.as_raw() as u32, &text);
    }
}

/// Profiles `args.program` as `args` says.
pub fn profile(args: &ProfileArgs) -> Result<Outcome, ProfError> {
    let program = &args.program[0];
    let exe = find_program(program)?;
    // -k needs the kernel text; a user profile adds it where kallsyms
    // shows addresses (and the daemon then decides: root may).
    let kernel_text = if args.kernel {
        Some(kallsyms::load()?.text)
    } else {
        kallsyms::load().ok().map(|k| k.text)
    };
    if args.mode == OpenMode::One {
        let cpu = bind_here()?;
        tracing::info!(cpu, "-one: pfmprof and the program are bound to CPU {cpu}");
    }
    let device = Device::open(pfm_client::device_path(args.device.as_deref()), args.mode)?;
    let choice = event::choose(device.implementation(), &args.event)?;
    let slots = device.elements();
    select_event(&device, &choice, args.kernel, args.select)?;
    let how = if args.kernel {
        if args.select {
            Start::Counted
        } else {
            Start::Uncounted
        }
    } else if args.ptrace {
        Start::CountedStoppedAtExec
    } else {
        Start::Counted
    };
    let start_program = || spawn(&device, &exe, &args.program, how, args.show.to.is_none());
    let mut rotation = Rotation::new(&device, choice.counter, args.stride);
    let child = if args.kernel {
        if let Some(text) = kernel_text {
            rotation.add_kernel(text, true);
        }
        if !args.select {
            device.log_all()?;
        }
        rotation.open_window()?;
        if rotation.active_count() == 0 {
            return Err(ProfError::Refused(
                "the daemon refused the kernel range (kernel profiling needs root, CAP_PERFMON \
                 or pfmd --allow-group)"
                    .into(),
            ));
        }
        device.clear_counts()?;
        rotation.counts_from_zero();
        if !args.select {
            device.enable().map_err(|e| refusal(&choice, e))?;
        }
        let child = start_program()?;
        if args.select {
            // The PME bit is the child's now; start sampling it.
            device
                .enable()
                .map_err(|e| refusal(&choice, e))
                .inspect_err(|_| kill_and_reap(&child))?;
        }
        child
    } else {
        let child = start_program()?;
        let mut setup = || -> Result<(), ProfError> {
            wait_for_exec(&child)?;
            follow_maps(&mut rotation, followed(child.pid, args.follow));
            if let Some(text) = kernel_text {
                rotation.add_kernel(text, false);
            }
            rotation.open_window()?;
            device.clear_counts()?;
            rotation.counts_from_zero();
            device.enable().map_err(|e| refusal(&choice, e))?;
            Ok(())
        };
        setup().inspect_err(|_| kill_and_reap(&child))?;
        if child.traced
            && let Err(errno) = nix::sys::ptrace::detach(child.pid, None)
        {
            kill_and_reap(&child);
            return Err(ProfError::io("PTRACE_DETACH")(errno.into()));
        }
        child
    };
    catch_stop_signals();
    let exit = run_windows(&child, &device, &mut rotation, args)?;
    device.disable()?;
    rotation.close_window()?;
    let ipls = device.ipl_histograms()?;
    let info = device.info()?;
    let counter = choice.counter;
    let interrupts: u64 = device
        .interrupt_counts()?
        .iter()
        .map(|c| c.counters[counter])
        .sum();
    let mut ipl = [0u64; PFIPL_ENTRIES];
    for h in &ipls {
        for (sum, v) in ipl.iter_mut().zip(h.ipl) {
            *sum += v;
        }
    }
    let header = Header {
        space: if args.kernel {
            Space::Kernel
        } else {
            Space::User
        },
        open: args.mode,
        stride: args.stride,
        slots,
        program: pfm_client::command_line(&args.program),
        model: choice.implementation.name().to_string(),
        event: choice.label(),
        period: choice.period,
        sample_period: info.pi_sample_period[counter],
        interrupts,
        lost: info.pi_lost_samples,
        throttled: info.pi_throttled,
        ipl,
    };
    let symbolizer = Symbolizer::new();
    let mut ranges = rotation.into_ranges();
    for range in &mut ranges {
        let expected = range.buckets_per_slot() * slots;
        if range.buckets.is_empty() {
            range.buckets = vec![0; expected];
        }
        if range.buckets.len() != expected {
            return Err(ProfError::Incompatible(format!(
                "PCNTGETRSIZE gave {} buckets for {:#x}-{:#x}; range, stride and mode make \
                 {expected}",
                range.buckets.len(),
                range.start,
                range.end
            )));
        }
        match range.space {
            Space::Kernel => range.resolve(|a| symbolizer.kernel(a)),
            Space::User => {
                let image = PathBuf::from(&range.image);
                let mapped = Mapped {
                    image: &image,
                    start: range.start,
                    offset: range.offset,
                };
                range.resolve(|a| symbolizer.user(mapped, a));
            }
        }
    }
    Ok(Outcome {
        profile: Profile { header, ranges },
        exit,
        late_start: !args.kernel && !child.traced,
    })
}

/// Runs the windows until the program ends; at a stop signal stops
/// profiling and passes it on.
fn run_windows(
    child: &Child,
    device: &Device,
    rotation: &mut Rotation<'_>,
    args: &ProfileArgs,
) -> Result<Exit, ProfError> {
    let mut forwarded = false;
    let mut window_end = Instant::now() + rotation.window();
    loop {
        match waitpid(child.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(Exit::Code(code)),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(Exit::Signal(sig as i32)),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(errno) => return Err(ProfError::Program(format!("waitpid: {errno}"))),
        }
        let stop = STOP_SIGNAL.load(Ordering::SeqCst);
        if stop != 0 && !forwarded {
            forwarded = true;
            device.disable()?;
            let signal = Signal::try_from(stop).unwrap_or(Signal::SIGINT);
            let _ = signal::kill(child.pid, signal);
        }
        if !forwarded && Instant::now() >= window_end {
            let t0 = Instant::now();
            rotation.close_window()?;
            let t1 = Instant::now();
            if !args.kernel {
                follow_maps(rotation, followed(child.pid, args.follow));
            }
            let t2 = Instant::now();
            rotation.open_window()?;
            tracing::debug!(
                close = ?t1 - t0,
                maps = ?t2 - t1,
                open = ?t2.elapsed(),
                "switched ranges"
            );
            window_end = Instant::now() + rotation.window();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that is not there, or not executable, is said as a shell
    /// (and pfmstat, through pfm-client) says it.
    #[test]
    fn a_program_that_cannot_run_is_said_as_a_shell_says_it() {
        let why = |p: &str| match find_program(OsStr::new(p)) {
            Err(ProfError::Program(why)) => why,
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(
            why("no-such-program-here"),
            "no-such-program-here: command not found"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        std::fs::write(&file, "not a program").unwrap();
        let file = file.to_str().unwrap();
        assert!(
            why(file).starts_with(&format!(
                "{file}: permission denied (not an executable file"
            )),
            "{}",
            why(file)
        );
    }

    #[test]
    fn finds_programs_on_path_and_by_path() {
        let sh = find_program(OsStr::new("sh")).unwrap();
        assert!(sh.is_absolute());
        assert_eq!(find_program(sh.as_os_str()).unwrap(), sh);
        assert!(find_program(OsStr::new("no-such-program-pfmprof")).is_err());
        assert!(
            find_program(OsStr::new("/etc/passwd")).is_err(),
            "not executable"
        );
    }

    #[test]
    fn exit_status_follows_the_shell() {
        assert_eq!(Exit::Code(3).status(), 3);
        assert_eq!(Exit::Signal(9).status(), 137);
    }
}
