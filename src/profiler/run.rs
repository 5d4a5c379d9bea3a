//! Running a program under the profiler.
//!
//! User profiling (uprofile) needs the program's text at run-time addresses
//! before the first sample, and the PME bit on the program's own thread:
//!
//! 1. pfmprof opens the device, selects PFM_COUNTERS|PFM_IPL|PFM_PROFILING and
//!    the event, and forks.
//! 2. The child calls PCNTLOGSELECT on the inherited descriptor (so the PME
//!    bit is its own: the FUSE request carries its tid), PTRACE_TRACEME, and
//!    execs. A close-on-exec status pipe reports a failed LOGSELECT, TRACEME
//!    or exec to the parent by errno.
//! 3. The kernel stops a traced child with SIGTRAP once exec has completed:
//!    every PT_LOAD segment is mapped and not one instruction of the program
//!    has run. pfmprof reads /proc/PID/maps, computes the load bias of the
//!    executable (PIE or not) from the mapping of its executable segment,
//!    sets PCNTSETURANGE to the text, PCNTCLEARCNT, PCNTRENABLE (the host
//!    sampling events are opened now, on the child's thread with `inherit`,
//!    so every thread and process it creates from here on is followed) and
//!    detaches. Nothing is lost and no child escapes.
//! 4. Without ptrace (`--no-ptrace`, or PTRACE_TRACEME refused, e.g. by a
//!    seccomp policy) the child execs at once and pfmprof polls
//!    /proc/PID/maps until the executable is mapped (the close-on-exec pipe
//!    closes *before* the kernel maps the new image, so its EOF alone is not
//!    enough), then sets the range and enables. Samples taken before that —
//!    tens to hundreds of microseconds of the dynamic loader — are lost, and
//!    a process the program forks in that window is not followed.
//!
//! Kernel profiling (kprofile, `-k`) knows its range from /proc/kallsyms up
//! front: PCNTLOGALL, PCNTSETKRANGE, PCNTRENABLE, then the program runs
//! (with `-select`, the child takes the PME bit as above instead of LOGALL).
//!
//! Profiling ends when the program exits, or at SIGINT: pfmprof then disables
//! the device at once, passes the SIGINT on to the program and waits for it.

use super::ProfError;
use super::args::{OpenMode, ProfileArgs};
use super::device::PfmDevice;
use super::elf::ElfImage;
use super::kallsyms::{self, KernelSymbols};
use super::maps::{self, Mapping};
use super::report::{Header, IPL_ENTRIES, Profile, Space};
use super::symbols::Symbol;
use crate::ioctl::abi::{PFM_COUNTERS, PFM_IPL, PFM_PROFILING};
use nix::errno::Errno;
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
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
    for candidate in candidates {
        let Ok(meta) = std::fs::metadata(&candidate) else {
            continue;
        };
        use std::os::unix::fs::PermissionsExt;
        if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
            return std::fs::canonicalize(&candidate)
                .map_err(ProfError::io(candidate.display().to_string()));
        }
    }
    Err(ProfError::Program(format!(
        "{}: no such executable",
        program.to_string_lossy()
    )))
}

/// What the child reports through the status pipe before exec.
const TAG_LOGSELECT: u8 = b'L';
const TAG_TRACEME: u8 = b'T';
const TAG_EXEC: u8 = b'E';

struct ChildPlan {
    exe: CString,
    argv: Vec<CString>,
    logselect: bool,
    ptrace: bool,
}

struct Child {
    pid: Pid,
    traced: bool,
}

/// Writes one status record: tag and errno. Async-signal-safe.
fn report_from_child(fd: libc::c_int, tag: u8, errno: i32) {
    let mut record = [0u8; 5];
    record[0] = tag;
    record[1..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: writing a local buffer to a pipe we own; a failed write only
    // loses the report.
    unsafe { libc::write(fd, record.as_ptr().cast(), record.len()) };
}

fn spawn(device: &PfmDevice, plan: &ChildPlan) -> Result<Child, ProfError> {
    let (read_end, write_end): (OwnedFd, OwnedFd) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|errno| ProfError::Io {
            what: "pipe2".into(),
            source: errno.into(),
        })?;
    let mut argv: Vec<*const libc::c_char> = plan.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let device_fd = device.raw_fd();
    let status_fd = write_end.as_raw_fd();
    // SAFETY: pfmprof is single-threaded here; the child only makes
    // async-signal-safe calls (ioctl, ptrace, write, execv, _exit) on memory
    // prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(ProfError::Io {
            what: "fork".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    if pid == 0 {
        // SAFETY: see above; the pointers stay valid in the child's copy.
        unsafe {
            if plan.logselect
                && libc::ioctl(
                    device_fd,
                    crate::ioctl::numbers::PCNTLOGSELECT as libc::c_ulong,
                ) < 0
            {
                report_from_child(status_fd, TAG_LOGSELECT, *libc::__errno_location());
                libc::_exit(127);
            }
            if plan.ptrace
                && libc::ptrace(
                    libc::PTRACE_TRACEME,
                    0,
                    std::ptr::null_mut::<libc::c_void>(),
                    0,
                ) < 0
            {
                report_from_child(status_fd, TAG_TRACEME, *libc::__errno_location());
            }
            libc::execv(plan.exe.as_ptr(), argv.as_ptr());
            report_from_child(status_fd, TAG_EXEC, *libc::__errno_location());
            libc::_exit(127);
        }
    }
    drop(write_end);
    let pid = Pid::from_raw(pid);
    // EOF comes at exec (close-on-exec) or exit.
    let mut records = Vec::new();
    let mut file = std::fs::File::from(read_end);
    use std::io::Read;
    loop {
        match file.read_to_end(&mut records) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ProfError::io("child status pipe")(e)),
        }
    }
    let mut traced = plan.ptrace;
    for record in records.chunks_exact(5) {
        let errno = Errno::from_raw(i32::from_ne_bytes([
            record[1], record[2], record[3], record[4],
        ]));
        match record[0] {
            TAG_TRACEME => {
                tracing::info!("PTRACE_TRACEME refused ({errno}): profiling starts after exec");
                traced = false;
            }
            tag => {
                let _ = waitpid(pid, None);
                return Err(if tag == TAG_LOGSELECT {
                    ProfError::Ioctl {
                        what: "PCNTLOGSELECT (in the child)",
                        errno,
                    }
                } else {
                    ProfError::Program(format!(
                        "exec {}: {errno} ({})",
                        plan.exe.to_string_lossy(),
                        errno.desc()
                    ))
                });
            }
        }
    }
    Ok(Child { pid, traced })
}

fn kill_and_reap(child: &Child) {
    let _ = signal::kill(child.pid, Signal::SIGKILL);
    let _ = waitpid(child.pid, None);
}

fn read_maps(pid: Pid) -> Result<Vec<Mapping>, ProfError> {
    let path = format!("/proc/{pid}/maps");
    std::fs::read_to_string(&path)
        .map(|t| maps::parse_maps(&t))
        .map_err(ProfError::io(path))
}

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |p| p as u64)
}

/// The executable's load bias once the child's exec has mapped it.
fn wait_for_bias(child: &Child, image: &ElfImage) -> Result<u64, ProfError> {
    let path = image.path.to_string_lossy().into_owned();
    let page = page_size();
    if child.traced {
        match waitpid(child.pid, None) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => {}
            Ok(other) => {
                return Err(ProfError::Program(format!(
                    "the program did not stop at exec: {other:?}"
                )));
            }
            Err(errno) => {
                return Err(ProfError::Program(format!("waitpid: {errno}")));
            }
        }
        let maps = read_maps(child.pid)?;
        return maps::load_bias(&image.segments, &maps, &path, page).ok_or_else(|| {
            ProfError::Program(format!(
                "{path} is not mapped in process {} after exec",
                child.pid
            ))
        });
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(maps) = read_maps(child.pid)
            && let Some(bias) = maps::load_bias(&image.segments, &maps, &path, page)
        {
            return Ok(bias);
        }
        match waitpid(child.pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            _ => {
                return Err(ProfError::Program(
                    "the program exited before its load address could be read (try without --no-ptrace)"
                        .into(),
                ));
            }
        }
        if Instant::now() > deadline {
            return Err(ProfError::Program(format!(
                "{path} did not appear in /proc/{}/maps",
                child.pid
            )));
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// Waits for the program; at SIGINT stops profiling and passes it on.
fn wait_program(child: &Child, device: &PfmDevice) -> Result<Exit, ProfError> {
    let mut forwarded = false;
    loop {
        match waitpid(child.pid, None) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(Exit::Code(code)),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(Exit::Signal(sig as i32)),
            Ok(_) => {}
            Err(Errno::EINTR) => {
                if INTERRUPTED.load(Ordering::SeqCst) && !forwarded {
                    forwarded = true;
                    device.disable()?;
                    let _ = signal::kill(child.pid, Signal::SIGINT);
                }
            }
            Err(errno) => return Err(ProfError::Program(format!("waitpid: {errno}"))),
        }
    }
}

fn catch_sigint() {
    let action = SigAction::new(
        SigHandler::Handler(on_sigint),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler only stores to an atomic.
    let _ = unsafe { signal::sigaction(Signal::SIGINT, &action) };
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

enum Target {
    User(Box<ElfImage>),
    Kernel(KernelSymbols),
}

/// Profiles `args.program` as `args` says.
pub fn profile(args: &ProfileArgs) -> Result<Outcome, ProfError> {
    let program = &args.program[0];
    let exe = find_program(program)?;
    let target = if args.kernel {
        Target::Kernel(kallsyms::load()?)
    } else {
        Target::User(Box::new(ElfImage::open(&exe)?))
    };
    if args.mode == OpenMode::One {
        let cpu = bind_here()?;
        tracing::info!(cpu, "-one: pfmprof and the program are bound to CPU {cpu}");
    }
    let mut device = PfmDevice::open(&args.device, args.mode)?;
    let info = device.info()?;
    if info.pi_family != 0 {
        return Err(ProfError::Device(format!(
            "the device emulates family {} (pfmprof drives the EV4 family: PCNTSETMUX)",
            info.pi_family
        )));
    }
    let slots = if args.mode == OpenMode::Each {
        info.pi_ncpus.max(1) as usize
    } else {
        1
    };
    device.set_items(PFM_COUNTERS | PFM_IPL | PFM_PROFILING)?;
    device.set_mux(args.event.iccsr())?;
    let plan = ChildPlan {
        exe: CString::new(exe.as_os_str().as_bytes())
            .map_err(|_| ProfError::Usage("program path contains NUL".into()))?,
        argv: args
            .program
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| ProfError::Usage("an argument contains NUL".into()))?,
        logselect: !args.kernel || args.select,
        ptrace: !args.kernel && args.ptrace,
    };
    let (start, end, bias, child) = match &target {
        Target::Kernel(k) => {
            let (start, end) = k.text;
            if !args.select {
                device.log_all()?;
            }
            device.set_range(true, start, end, args.stride)?;
            device.clear()?;
            if !args.select {
                device.enable()?;
            }
            let child = spawn(&device, &plan)?;
            if args.select {
                // The PME bit is the child's now; start sampling it.
                device.enable().inspect_err(|_| kill_and_reap(&child))?;
            }
            (start, end, 0, child)
        }
        Target::User(image) => {
            let child = spawn(&device, &plan)?;
            let setup = || -> Result<(u64, u64, u64), ProfError> {
                let bias = wait_for_bias(&child, image)?;
                let (lo, hi) = maps::text_span(&image.segments)
                    .ok_or_else(|| ProfError::Program("no executable segment".into()))?;
                let (start, end) = (lo.wrapping_add(bias), hi.wrapping_add(bias));
                device.set_range(false, start, end, args.stride)?;
                device.clear()?;
                device.enable()?;
                Ok((start, end, bias))
            };
            let (start, end, bias) = setup().inspect_err(|_| kill_and_reap(&child))?;
            if child.traced {
                // SAFETY: PTRACE_DETACH of our stopped tracee; no pointers.
                let r = unsafe {
                    libc::ptrace(
                        libc::PTRACE_DETACH,
                        child.pid.as_raw(),
                        std::ptr::null_mut::<libc::c_void>(),
                        0,
                    )
                };
                if r < 0 {
                    let e = std::io::Error::last_os_error();
                    kill_and_reap(&child);
                    return Err(ProfError::io("PTRACE_DETACH")(e));
                }
            }
            (start, end, bias, child)
        }
    };
    catch_sigint();
    let exit = wait_program(&child, &device)?;
    device.disable()?;
    let counts = device.counts(slots)?;
    let ipls = device.ipl(slots)?;
    let info = device.info()?;
    let rsize = device.rsize()?;
    let buckets = device.read_buckets(rsize)?;
    let counter = args.event.counter;
    let interrupts = counts
        .iter()
        .map(|c| if counter == 0 { c.pf_cntr0 } else { c.pf_cntr1 })
        .sum();
    let mut ipl = [0u64; IPL_ENTRIES];
    for h in &ipls {
        for (sum, v) in ipl.iter_mut().zip(h.ipl) {
            *sum += v;
        }
    }
    let (image_name, build_id) = match &target {
        Target::User(image) => (image.path.display().to_string(), image.build_id.clone()),
        Target::Kernel(_) => ("/proc/kallsyms".to_string(), None),
    };
    let header = Header {
        space: if args.kernel {
            Space::Kernel
        } else {
            Space::User
        },
        open: args.mode,
        start,
        end,
        stride: args.stride,
        slots,
        image: image_name,
        bias,
        build_id,
        program: join_args(&args.program),
        event: args.event.name.to_string(),
        period: args.event.period,
        sample_period: info.pi_sample_period[counter],
        interrupts,
        lost: info.pi_lost_samples,
        throttled: info.pi_throttled,
        ipl,
    };
    let expected = header.buckets_per_slot() * slots;
    if buckets.len() != expected {
        return Err(ProfError::Device(format!(
            "PCNTGETRSIZE gave {} buckets; range, stride and mode make {expected}",
            buckets.len()
        )));
    }
    let profile = match &target {
        Target::User(image) => Profile::collect(
            header,
            buckets,
            |addr| {
                image.symbol(addr.wrapping_sub(bias)).map(|s| Symbol {
                    start: s.start.wrapping_add(bias),
                    end: s.end.wrapping_add(bias),
                    name: s.name.clone(),
                })
            },
            |addr| image.location(addr.wrapping_sub(bias)),
        ),
        Target::Kernel(k) => Profile::collect(
            header,
            buckets,
            |addr| k.symbols.lookup(addr).cloned(),
            |_| None,
        ),
    };
    Ok(Outcome {
        profile,
        exit,
        late_start: !args.kernel && !child.traced,
    })
}

fn join_args(args: &[OsString]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

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
