//! pfmprof-bench — what profiling costs a CPU-bound program, pfmprof against
//! `perf record` at the same sample period, and what an idle pfmd costs.
//!
//!     cargo build --release && sudo target/release/pfmprof-bench
//!
//! Starts its own pfmd (next to this binary) on a private mount, builds a
//! CPU-bound C program with gcc (a fixed number of iterations, so profiling
//! overhead shows as time), then in interleaved rounds runs it:
//!
//! - unprofiled,
//! - under `pfmprof` (PF_CYCLES every 4096 cycles at `--mhz`: pfmd samples
//!   every `pi_sample_period` cycles, i.e. `pi_sample_period / MHz` ns of
//!   CPU), and
//! - under `perf record -e cpu-clock -c NS` with that same period in ns,
//!
//! and prints the program's own run time (it measures its work loop with
//! CLOCK_MONOTONIC) and each profiler's slowdown against the unprofiled
//! median, the whole command's wall time, and lost samples (pfmprof:
//! PCNTGETINFO pi_lost_samples through its report; perf: `perf report
//! --stats`). Last, the daemon's CPU time (utime + stime of /proc/PID/stat)
//! and context switches (all its threads) over `--idle-seconds` of idleness.
//! Figures only: nothing here passes or fails.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("{0}")]
    Setup(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

struct Options {
    mhz: u64,
    iterations: u64,
    rounds: usize,
    idle_seconds: u64,
    pfmd: PathBuf,
    pfmprof: PathBuf,
}

const USAGE: &str = "usage: pfmprof-bench [--mhz N] [--iterations N] [--rounds N] [--idle-seconds N] [--pfmd PATH] [--pfmprof PATH]";

fn options() -> Result<Options, BenchError> {
    let dir = std::env::current_exe()
        .map_err(io("current_exe"))?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut o = Options {
        mhz: 2000,
        iterations: 0,
        rounds: 5,
        idle_seconds: 10,
        pfmd: dir.join("pfmd"),
        pfmprof: dir.join("pfmprof"),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args
            .get(i + 1)
            .ok_or_else(|| BenchError::Setup(USAGE.into()))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| BenchError::Setup(format!("{}: not a number\n{USAGE}", args[i])))
        };
        match args[i].as_str() {
            "--mhz" => o.mhz = number()?,
            "--iterations" => o.iterations = number()?,
            "--rounds" => o.rounds = number()? as usize,
            "--idle-seconds" => o.idle_seconds = number()?,
            "--pfmd" => o.pfmd = value.into(),
            "--pfmprof" => o.pfmprof = value.into(),
            _ => return Err(BenchError::Setup(USAGE.into())),
        }
        i += 2;
    }
    Ok(o)
}

/// The CPU-bound program: ITERATIONS of an LCG in hot(); prints the work
/// loop's wall and CPU time on stderr.
const PROGRAM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static long long ns(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
volatile unsigned long sink;
__attribute__((noinline)) void hot(unsigned long n) {
	unsigned long x = 1;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}
int main(int argc, char **argv) {
	unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 100000000UL;
	long long w = ns(CLOCK_MONOTONIC), c = ns(CLOCK_PROCESS_CPUTIME_ID);
	hot(n);
	fprintf(stderr, "work_ns=%lld cpu_ns=%lld\n", ns(CLOCK_MONOTONIC) - w, ns(CLOCK_PROCESS_CPUTIME_ID) - c);
	return 0;
}
"#;

/// A private directory, removed at the end.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> Result<ScratchDir, BenchError> {
        let path = std::env::temp_dir().join(format!("pfmprof-bench-{}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(io(path.display().to_string()))?;
        Ok(ScratchDir(path))
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Daemon {
    child: Child,
    mountpoint: PathBuf,
    device: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(o: &Options, dir: &Path) -> Result<Daemon, BenchError> {
        let mountpoint = dir.join("mnt");
        let log = dir.join("pfmd.log");
        let child = Command::new(&o.pfmd)
            .args([
                "--transport",
                "fuse",
                "--dev-link",
                "none",
                "--cpu-mhz",
                &o.mhz.to_string(),
                "--mountpoint",
            ])
            .arg(&mountpoint)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(io("pfmd log"))?)
            .spawn()
            .map_err(io(format!("start {}", o.pfmd.display())))?;
        let mut daemon = Daemon {
            child,
            device: mountpoint.join("pfcntr"),
            mountpoint,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&daemon.log).unwrap_or_default();
            if daemon.device.exists() && text.contains("pfmd ready") {
                return Ok(daemon);
            }
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(BenchError::Setup(format!("pfmd exited {status}:\n{text}")));
            }
            if Instant::now() > deadline {
                return Err(BenchError::Setup(format!("pfmd not ready:\n{text}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// (utime + stime in clock ticks, context switches of all threads).
    fn cost(&self) -> Result<(u64, u64), BenchError> {
        let pid = self.child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(io("stat"))?;
        // Fields after the parenthesised command: state is field 3.
        let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = fields
            .get(11)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            + fields
                .get(12)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        let mut switches = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).map_err(io("task"))? {
            let status = std::fs::read_to_string(task.map_err(io("task"))?.path().join("status"))
                .unwrap_or_default();
            switches += status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>();
        }
        Ok((ticks, switches))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
        let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// One run's figures.
#[derive(Default, Clone, Copy)]
struct Run {
    work_ns: u64,
    wall_ns: u64,
    lost: u64,
    samples: u64,
    sample_period: u64,
}

fn field(text: &str, key: &str) -> Option<u64> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

fn run(cmd: &mut Command) -> Result<(String, String, u64), BenchError> {
    let start = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("{cmd:?}")))?;
    let wall = start.elapsed().as_nanos() as u64;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(BenchError::Setup(format!(
            "{cmd:?}: {}\n{stdout}{stderr}",
            out.status
        )));
    }
    Ok((stdout, stderr, wall))
}

fn work_ns(stderr: &str) -> Result<u64, BenchError> {
    field(stderr, "work_ns").ok_or_else(|| BenchError::Setup(format!("no work_ns in {stderr}")))
}

fn plain(program: &Path, n: u64) -> Result<Run, BenchError> {
    let (_, stderr, wall_ns) = run(Command::new(program).arg(n.to_string()))?;
    Ok(Run {
        work_ns: work_ns(&stderr)?,
        wall_ns,
        ..Run::default()
    })
}

fn under_pfmprof(o: &Options, d: &Daemon, program: &Path, n: u64) -> Result<Run, BenchError> {
    let (stdout, stderr, wall_ns) = run(Command::new(&o.pfmprof)
        .arg("--json")
        .arg("--device")
        .arg(&d.device)
        .arg(program)
        .arg(n.to_string()))?;
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .map_err(|e| BenchError::Setup(format!("pfmprof report: {e}\n{stdout}")))?;
    let get = |k: &str| report[k].as_u64().unwrap_or(0);
    let weight = get("weight").max(1);
    Ok(Run {
        work_ns: work_ns(&stderr)?,
        wall_ns,
        lost: get("lost_samples"),
        samples: report["ipl"].as_array().map_or(0, |a| {
            let ticks: Vec<u64> = a.iter().map(|v| v.as_u64().unwrap_or(0)).collect();
            ticks.iter().sum::<u64>() - ticks.get(7).copied().unwrap_or(0)
        }) / weight,
        sample_period: get("sample_period"),
    })
}

fn under_perf(dir: &Path, program: &Path, n: u64, period_ns: u64) -> Result<Run, BenchError> {
    let data = dir.join("perf.data");
    let (_, stderr, wall_ns) = run(Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-c",
            &period_ns.to_string(),
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .arg(program)
        .arg(n.to_string()))?;
    let (stats, _, _) = run(Command::new("perf")
        .args(["report", "--stats", "-i"])
        .arg(&data))?;
    let count = |what: &str| {
        stats
            .lines()
            .find(|l| l.trim_start().starts_with(what))
            .and_then(|l| l.split(':').nth(1)?.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Ok(Run {
        work_ns: work_ns(&stderr)?,
        wall_ns,
        lost: count("LOST events") + count("LOST_SAMPLES events"),
        samples: count("SAMPLE events"),
        sample_period: period_ns,
    })
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn main() -> std::process::ExitCode {
    match bench() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pfmprof-bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn bench() -> Result<(), BenchError> {
    let o = options()?;
    if !nix::unistd::geteuid().is_root() {
        return Err(BenchError::Setup(
            "run as root: pfmd mounts FUSE, perf record needs the events".into(),
        ));
    }
    let dir = ScratchDir::new()?;
    let src = dir.path().join("cpubound.c");
    let program = dir.path().join("cpubound");
    std::fs::write(&src, PROGRAM).map_err(io("write program"))?;
    run(Command::new("gcc")
        .args(["-O2", "-g", "-o"])
        .arg(&program)
        .arg(&src))?;
    let daemon = Daemon::start(&o, dir.path())?;

    // Calibrate to about a second of work unless told.
    let n = if o.iterations > 0 {
        o.iterations
    } else {
        let probe = 50_000_000;
        let t = plain(&program, probe)?.work_ns.max(1);
        (probe as u128 * 1_000_000_000 / t as u128) as u64
    };
    // The effective period pfmd samples at, in ns of CPU, for perf.
    let first = under_pfmprof(&o, &daemon, &program, n / 10)?;
    let period_ns = (first.sample_period * 1000).div_ceil(o.mhz.max(1));
    println!(
        "pfmprof-bench: {n} iterations, {} rounds; PF_CYCLES every 4096 at {} MHz, pfmd samples every {} cycles = {period_ns} ns of CPU; perf record -e cpu-clock -c {period_ns}",
        o.rounds, o.mhz, first.sample_period
    );

    let mut runs: [Vec<Run>; 3] = Default::default();
    for _ in 0..o.rounds {
        runs[0].push(plain(&program, n)?);
        runs[1].push(under_pfmprof(&o, &daemon, &program, n)?);
        runs[2].push(under_perf(dir.path(), &program, n, period_ns)?);
    }
    let base = median(runs[0].iter().map(|r| r.work_ns).collect());
    println!(
        "{:<14} {:>12} {:>10} {:>14} {:>10} {:>8}",
        "", "work ms", "slowdown", "command ms", "samples", "lost"
    );
    for (name, rs) in ["unprofiled", "pfmprof", "perf record"].iter().zip(&runs) {
        let work = median(rs.iter().map(|r| r.work_ns).collect());
        let wall = median(rs.iter().map(|r| r.wall_ns).collect());
        let samples = median(rs.iter().map(|r| r.samples).collect());
        let lost: u64 = rs.iter().map(|r| r.lost).sum();
        let slowdown = (work as f64 / base.max(1) as f64 - 1.0) * 100.0;
        println!(
            "{name:<14} {:>12.1} {:>9.2}% {:>14.1} {:>10} {:>8}",
            ms(work),
            slowdown,
            ms(wall),
            if *name == "unprofiled" {
                "-".to_string()
            } else {
                samples.to_string()
            },
            if *name == "unprofiled" {
                "-".to_string()
            } else {
                lost.to_string()
            }
        );
    }
    println!(
        "(medians of {} rounds; lost = total over all rounds)",
        o.rounds
    );

    // Idle: nobody holds the device; the daemon should not wake at all.
    std::thread::sleep(Duration::from_millis(200));
    let (t0, s0) = daemon.cost()?;
    std::thread::sleep(Duration::from_secs(o.idle_seconds));
    let (t1, s1) = daemon.cost()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    println!(
        "idle pfmd over {} s: {} clock ticks of CPU ({:.1} ms), {} context switches",
        o.idle_seconds,
        t1 - t0,
        (t1 - t0) as f64 * 1000.0 / hz,
        s1 - s0
    );
    let mut log = String::new();
    let _ = std::fs::File::open(&daemon.log).and_then(|mut f| f.read_to_string(&mut log));
    let throttled = log.matches("PERF_RECORD_THROTTLE").count();
    if throttled > 0 {
        println!("pfmd log: {throttled} throttle warnings");
    }
    Ok(())
}
