//! A long run against one daemon: does anything it holds grow? Workers,
//! each a thread looping until the end, drive the device through
//! `pfm-client`:
//!
//! - open/close churn in each mode: ONE (one thread bound to each online
//!   CPU), EACH, ALL;
//! - a counting open: enable, `PCNTGETCNT` and `PCNTGETIPLHIS` over and
//!   over, disable, close (LOGALL and LOGSELECT in turn);
//! - a profiling open: a user range (`PCNTSETURANGE` and `PCNTSETUADDR` in
//!   turn) over this binary's text, enable, work inside the range while
//!   `read(2)`ing the buckets, close;
//! - a poller: `PCNTGETINFO` in a loop on an open it holds a while.
//!
//! The holders take ONE, EACH and ALL in turn. Opens conflict (docs/device.md
//! §2), so `EBUSY` is an expected answer, and so is `EAGAIN` (a user's
//! stores in flight, §1); any other errno is reported and fails the run.
//!
//! The daemon's RSS, descriptors, threads and perf events, and its store
//! helper's, are measured at start (after a warm-up run of the same workers,
//! so thread pools, helper threads and allocator arenas exist, and a settle)
//! and at end (after the workers stop and a settle), both with no open held,
//! and every `--report-every` seconds while the workers run. The last line
//! is `soak: flat` or `soak: GREW <what>`; the exit status is 0 when flat
//! with no unexpected errno, else 1.
//!
//! `pfm-soak [--seconds N] [--report-every S] [--device PATH --pid PID]`;
//! without --device it starts the pfmd next to this binary on a private
//! mount (as root) and stops it afterwards.

use nix::errno::Errno;
use pfm_abi::Iccsr;
use pfm_bench::{online_cpus, pin_to, start_pfmd, stop_pfmd};
use pfm_client::{Device, Family, Items, OpenMode};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Long enough for every worker to have opened in every mode a few times.
const WARM_UP: Duration = Duration::from_secs(5);
/// How long the end waits at most for releases in flight (FUSE tells the
/// daemon of a close after it returned) and helper threads to go.
const SETTLE: Duration = Duration::from_secs(10);
/// A store helper link keeps up to this many idle threads (pfmd-transport's
/// `SPARE_THREADS`).
const SPARES_PER_LINK: usize = 2;

/// Open/close churn, the counting, profiling and polling opens, against a
/// running device or a pfmd of its own; reports the daemon's RSS,
/// descriptors, threads and perf events at start and end. Figures only: a
/// benchmark, never a test. Needs root to start pfmd and read its /proc.
#[derive(Debug, clap::Parser)]
#[command(name = "pfm-soak", version)]
struct Args {
    /// How long the workers run (after a 5 s warm-up).
    #[arg(long, default_value_t = 60, value_name = "N")]
    seconds: u64,
    /// Measure this running device instead of starting pfmd (with --pid).
    #[arg(long, value_name = "PATH", requires = "pid")]
    device: Option<PathBuf>,
    /// The process id of the pfmd serving --device.
    #[arg(long, value_name = "PID", requires = "device")]
    pid: Option<i32>,
    /// Seconds between progress lines.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    report_every: u64,
}

// ---- What the workers share and count.

struct Shared {
    device: PathBuf,
    cpus: Vec<usize>,
    stop: AtomicBool,
    /// Every call of every worker, answered or refused: for calls/s.
    calls: AtomicU64,
}

/// One worker's calls and answers.
#[derive(Debug, Default)]
struct Tally {
    calls: u64,
    opens: u64,
    busy: u64,
    again: u64,
    /// "operation: errno" and how often, for the expected refusals.
    expected: BTreeMap<String, u64>,
    /// The same for every other refusal.
    unexpected: BTreeMap<String, u64>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.calls += other.calls;
        self.opens += other.opens;
        self.busy += other.busy;
        self.again += other.again;
        for (what, n) in &other.expected {
            *self.expected.entry(what.clone()).or_default() += n;
        }
        for (what, n) in &other.unexpected {
            *self.unexpected.entry(what.clone()).or_default() += n;
        }
    }
}

struct Worker<'a> {
    shared: &'a Shared,
    tally: Tally,
}

impl<'a> Worker<'a> {
    fn running(&self) -> bool {
        !self.shared.stop.load(Ordering::Relaxed)
    }

    /// Counts one call and its answer; the value when it succeeded.
    fn call<T>(&mut self, op: &'static str, result: Result<T, pfm_client::Error>) -> Option<T> {
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        self.tally.calls += 1;
        let error = match result {
            Ok(value) => return Some(value),
            Err(e) => e,
        };
        let (what, expected) = match error.errno() {
            Some(errno @ Errno::EBUSY) => {
                self.tally.busy += 1;
                (format!("{op}: {errno}"), true)
            }
            Some(errno @ Errno::EAGAIN) => {
                self.tally.again += 1;
                (format!("{op}: {errno}"), true)
            }
            Some(errno) => (format!("{op}: {errno}"), false),
            None => (format!("{op}: {error}"), false),
        };
        let answers = if expected {
            &mut self.tally.expected
        } else {
            &mut self.tally.unexpected
        };
        *answers.entry(what).or_default() += 1;
        None
    }

    /// One open in `mode` (a ONE open from `cpu`, the thread bound there).
    fn open(&mut self, mode: OpenMode, cpu: usize) -> Option<Device> {
        if mode == OpenMode::One {
            pin_to(cpu);
        }
        let device = self.call("open", Device::open(&self.shared.device, mode))?;
        self.tally.opens += 1;
        Some(device)
    }

    fn new(shared: &'a Shared) -> Self {
        Worker {
            shared,
            tally: Tally::default(),
        }
    }

    /// Round `round`'s open (then the next round): the modes and CPUs in
    /// turn.
    fn open_round(&mut self, round: &mut usize) -> Option<Device> {
        let mode = MODES[*round % MODES.len()];
        let cpu = self.shared.cpus[*round % self.shared.cpus.len()];
        *round += 1;
        self.open_when_free(mode, cpu)
    }

    /// Opens in `mode`, again every millisecond while the device is busy,
    /// until it opens or the run ends.
    fn open_when_free(&mut self, mode: OpenMode, cpu: usize) -> Option<Device> {
        while self.running() {
            if let Some(device) = self.open(mode, cpu) {
                return Some(device);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }
}

/// Counter 0 counts cycles, in the device's family; counter 1 is off where
/// the family lets it be.
fn select_cycles(device: &Device) -> Result<(), pfm_client::Error> {
    match device.family() {
        // PF_CYCLES on counter 0, one interrupt every 4096; counter 1 off.
        Family::Ev4 => device.set_mux(Iccsr::new(0xa, 0, 1, 0, 2)),
        // PF5_MUX0_CYCLES and PF6_MUX0_CYCLES are both 0.
        Family::Ev5 => device.ev5_mux(0),
        Family::Ev6 => device.ev6_mux(0),
    }
}

const MODES: [OpenMode; 3] = [OpenMode::One, OpenMode::Each, OpenMode::All];

// ---- The workers. Each loops until `stop`, with a short pause between
// rounds so that on a small machine the daemon keeps CPU to answer.

/// Opens and closes in `mode` (ONE: from `cpu`), nothing else.
fn churn(shared: &Shared, mode: OpenMode, cpu: usize) -> Tally {
    let mut worker = Worker::new(shared);
    while worker.running() {
        drop(worker.open(mode, cpu));
        std::thread::sleep(Duration::from_millis(1));
    }
    worker.tally
}

/// Opens, counts cycles, reads the counts and IPL histograms 100 times,
/// closes; the mode, CPU and scope (LOGALL, LOGSELECT) change every round.
fn counting(shared: &Shared) -> Tally {
    let mut worker = Worker::new(shared);
    let mut round = 0usize;
    while worker.running() {
        let Some(device) = worker.open_round(&mut round) else {
            break;
        };
        worker.call(
            "PCNTSETITEMS",
            device.set_items(Items::COUNTERS | Items::IPL),
        );
        worker.call("select cycles", select_cycles(&device));
        if round.is_multiple_of(2) {
            worker.call("PCNTLOGSELECT", device.log_select());
        } else {
            worker.call("PCNTLOGALL", device.log_all());
        }
        worker.call("PCNTCLEARCNT", device.clear_counts());
        worker.call("PCNTRENABLE", device.enable());
        for _ in 0..100 {
            worker.call("PCNTGETCNT", device.interrupt_counts());
            worker.call("PCNTGETIPLHIS", device.ipl_histograms());
        }
        worker.call("PCNTRDISABLE", device.disable());
        drop(device);
        std::thread::sleep(Duration::from_millis(5));
    }
    worker.tally
}

/// Work that stays inside the profiled range (this function's text).
#[inline(never)]
fn spin(iterations: u64) -> u64 {
    let mut x = iterations;
    for i in 0..iterations {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    x
}

/// Opens, profiles a user range around [`spin`], spins inside it for about
/// 20 ms reading the buckets between, closes; the mode, CPU and range call
/// (`PCNTSETURANGE` with stride 4, `PCNTSETUADDR`) change every round.
fn profiling(shared: &Shared) -> Tally {
    let mut worker = Worker::new(shared);
    // 128 KiB of this binary's text from the 64 KiB boundary below spin().
    let start = (spin as fn(u64) -> u64 as usize as u64) & !0xffff;
    let end = start + 0x2_0000;
    let mut round = 0usize;
    while worker.running() {
        let Some(device) = worker.open_round(&mut round) else {
            break;
        };
        worker.call(
            "PCNTSETITEMS",
            device.set_items(Items::COUNTERS | Items::PROFILING),
        );
        worker.call("select cycles", select_cycles(&device));
        let stride = round.is_multiple_of(2).then_some(4);
        let op = if stride.is_some() {
            "PCNTSETURANGE"
        } else {
            "PCNTSETUADDR"
        };
        worker.call(op, device.set_range(false, start, end, stride));
        worker.call("PCNTRENABLE", device.enable());
        let until = Instant::now() + Duration::from_millis(20);
        while Instant::now() < until {
            std::hint::black_box(spin(100_000));
            worker.call("read(2)", device.read_profile());
        }
        worker.call("PCNTRDISABLE", device.disable());
        drop(device);
        std::thread::sleep(Duration::from_millis(5));
    }
    worker.tally
}

/// Holds a ONE open on the last CPU for 200 ms of `PCNTGETINFO`, lets it
/// go for 200 ms (so EACH and ALL opens get their turn), and again.
fn poller(shared: &Shared) -> Tally {
    let mut worker = Worker::new(shared);
    let cpu = *shared.cpus.last().expect("a CPU");
    while worker.running() {
        let Some(device) = worker.open_when_free(OpenMode::One, cpu) else {
            break;
        };
        let until = Instant::now() + Duration::from_millis(200);
        while worker.running() && Instant::now() < until {
            worker.call("PCNTGETINFO", device.info());
        }
        drop(device);
        std::thread::sleep(Duration::from_millis(200));
    }
    worker.tally
}

/// Runs every worker for `run`, calling `progress` every `every` with the
/// calls made since the last one. Returns each worker's name and tally.
fn run_workers(
    device: &Path,
    run: Duration,
    every: Duration,
    mut progress: impl FnMut(Duration, f64),
) -> Vec<(String, Tally)> {
    let shared = Shared {
        device: device.to_path_buf(),
        cpus: online_cpus(),
        stop: AtomicBool::new(false),
        calls: AtomicU64::new(0),
    };
    std::thread::scope(|scope| {
        let shared = &shared;
        let mut workers = Vec::new();
        for &cpu in &shared.cpus {
            workers.push((
                format!("churn ONE cpu{cpu}"),
                scope.spawn(move || churn(shared, OpenMode::One, cpu)),
            ));
        }
        workers.push((
            "churn EACH".to_string(),
            scope.spawn(move || churn(shared, OpenMode::Each, 0)),
        ));
        workers.push((
            "churn ALL".to_string(),
            scope.spawn(move || churn(shared, OpenMode::All, 0)),
        ));
        workers.push((
            "counting".to_string(),
            scope.spawn(move || counting(shared)),
        ));
        workers.push((
            "profiling".to_string(),
            scope.spawn(move || profiling(shared)),
        ));
        workers.push(("poller".to_string(), scope.spawn(move || poller(shared))));

        let begin = Instant::now();
        let (mut last, mut last_calls) = (begin, 0u64);
        while begin.elapsed() < run {
            let left = run.saturating_sub(begin.elapsed());
            std::thread::sleep(left.min(Duration::from_millis(100)));
            if last.elapsed() >= every {
                let calls = shared.calls.load(Ordering::Relaxed);
                let rate = (calls - last_calls) as f64 / last.elapsed().as_secs_f64();
                progress(begin.elapsed(), rate);
                (last, last_calls) = (Instant::now(), calls);
            }
        }
        shared.stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|(name, worker)| {
                let tally = worker.join().unwrap_or_else(|_| {
                    let mut panicked = Tally::default();
                    panicked.unexpected.insert("the worker panicked".into(), 1);
                    panicked
                });
                (name, tally)
            })
            .collect()
    })
}

// ---- The daemon, measured through /proc (no /proc crate in the lock;
// these four files are read and parsed in a line each).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Process {
    rss_kib: u64,
    fds: usize,
    threads: usize,
    perf_events: usize,
}

/// pfmd and its store helper (FUSE only: over CUSE the kernel copies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Figures {
    daemon: Process,
    helper: Option<Process>,
    /// Store links: one per ring queue (threads `fuse-qN`), one for all the
    /// classic readers (`fuse-N`).
    links: usize,
}

fn process(pid: i32) -> Option<Process> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())?;
    let mut fds = 0;
    let mut perf_events = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        fds += 1;
        if std::fs::read_link(fd.path())
            .is_ok_and(|target| target.as_os_str() == "anon_inode:[perf_event]")
        {
            perf_events += 1;
        }
    }
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.count();
    Some(Process {
        rss_kib,
        fds,
        threads,
        perf_events,
    })
}

fn thread_names(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|comm| comm.trim().to_string())
        .collect()
}

/// The daemon's child named `pfmd-stores`.
fn store_helper(pid: i32) -> Option<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .find(|child| {
            std::fs::read_to_string(format!("/proc/{child}/comm"))
                .is_ok_and(|comm| comm.trim() == "pfmd-stores")
        })
}

fn measure(pid: i32) -> Figures {
    let daemon = process(pid).unwrap_or_else(|| panic!("pfmd {pid} is gone"));
    let names = thread_names(pid);
    let is_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let rings = names
        .iter()
        .filter(|n| n.strip_prefix("fuse-q").is_some_and(is_digits))
        .count();
    let classic = names
        .iter()
        .any(|n| n.strip_prefix("fuse-").is_some_and(is_digits));
    Figures {
        daemon,
        helper: store_helper(pid).and_then(process),
        links: rings + usize::from(classic),
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn progress_line(at: Duration, f: &Figures, calls_per_second: f64) {
    let helper = f.helper.map_or(String::new(), |h| {
        format!(
            ", helper {:.1} MiB {} fds {} threads",
            mib(h.rss_kib),
            h.fds,
            h.threads
        )
    });
    println!(
        "t={:>5}s  pfmd {:.1} MiB {} fds {} threads {} perf events{helper}; {:.0} calls/s",
        at.as_secs(),
        mib(f.daemon.rss_kib),
        f.daemon.fds,
        f.daemon.threads,
        f.daemon.perf_events,
        calls_per_second
    );
}

// ---- Flat or grown.

/// RSS may move with the allocator, not with the work: glibc keeps freed
/// memory in per-thread arenas and trims them lazily, in steps of up to a
/// megabyte or so, so the end may sit a little above or below the start
/// with nothing leaked. 2 MiB (or 10% of a larger daemon) is above that
/// noise and far below what a leak of even 100 bytes per open makes over a
/// run (a 3-minute run opens over 100 000 times).
fn rss_allowance(start_kib: u64) -> u64 {
    (2 * 1024).max(start_kib / 10)
}

/// What grew from `start` to `end`, in words; empty when flat. Descriptors,
/// pfmd's threads and perf events must be as at start (both with no open
/// held: a leaked perf event or descriptor is one more, however small).
/// The store helper's threads may end anywhere up to its own main thread
/// and two spares per link (a link keeps up to two idle threads after a
/// store; the warm-up may not have used every link twice).
fn growth(start: &Figures, end: &Figures) -> Vec<String> {
    let mut grew = Vec::new();
    let mut compare = |who: &str, s: &Process, e: &Process, thread_limit: usize| {
        if e.rss_kib > s.rss_kib + rss_allowance(s.rss_kib) {
            grew.push(format!("{who} RSS +{:.1} MiB", mib(e.rss_kib - s.rss_kib)));
        }
        if e.fds > s.fds {
            grew.push(format!("{who} fds +{}", e.fds - s.fds));
        }
        if e.threads > thread_limit {
            grew.push(format!(
                "{who} threads {} (start {}, limit {thread_limit})",
                e.threads, s.threads
            ));
        }
        if e.perf_events > s.perf_events {
            grew.push(format!(
                "{who} perf events +{}",
                e.perf_events - s.perf_events
            ));
        }
    };
    compare("pfmd", &start.daemon, &end.daemon, start.daemon.threads);
    match (&start.helper, &end.helper) {
        (Some(s), Some(e)) => {
            let limit = s.threads.max(1 + SPARES_PER_LINK * end.links);
            compare("store helper", s, e, limit);
        }
        (None, Some(_)) => grew.push("a store helper appeared".into()),
        (Some(_), None) => grew.push("the store helper is gone".into()),
        (None, None) => {}
    }
    grew
}

/// Waits until the figures are back within what [`growth`] allows, or
/// [`SETTLE`] has passed: releases and helper threads finish after the
/// workers' last call. Then the end is measured.
fn settle(pid: i32, start: &Figures) -> Figures {
    let deadline = Instant::now() + SETTLE;
    std::thread::sleep(Duration::from_millis(500));
    loop {
        let now = measure(pid);
        let only_rss = growth(start, &now).iter().all(|g| g.contains("RSS"));
        if only_rss || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The start: once the warm-up's releases and helper threads are done, that
/// is once two looks 200 ms apart agree on everything but RSS (or after
/// [`SETTLE`]).
fn steady(pid: i32) -> Figures {
    let deadline = Instant::now() + SETTLE;
    std::thread::sleep(Duration::from_millis(500));
    let mut last = measure(pid);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = measure(pid);
        let same = |a: &Process, b: &Process| {
            (a.fds, a.threads, a.perf_events) == (b.fds, b.threads, b.perf_events)
        };
        let helpers_same = match (&last.helper, &now.helper) {
            (Some(a), Some(b)) => same(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        if (same(&last.daemon, &now.daemon) && helpers_same) || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

fn table(start: &Figures, end: &Figures) {
    println!(
        "{:<28} {:>10} {:>10} {:>10}",
        "figure", "start", "end", "delta"
    );
    let mut rows = vec![("pfmd", start.daemon, end.daemon)];
    if let (Some(s), Some(e)) = (start.helper, end.helper) {
        rows.push(("store helper", s, e));
    }
    for (who, s, e) in rows {
        println!(
            "{:<28} {:>10.1} {:>10.1} {:>+10.1}",
            format!("{who} RSS, MiB"),
            mib(s.rss_kib),
            mib(e.rss_kib),
            mib(e.rss_kib) - mib(s.rss_kib)
        );
        for (what, s, e) in [
            ("fds", s.fds, e.fds),
            ("threads", s.threads, e.threads),
            ("perf events", s.perf_events, e.perf_events),
        ] {
            println!(
                "{:<28} {:>10} {:>10} {:>+10}",
                format!("{who} {what}"),
                s,
                e,
                e as i64 - s as i64
            );
        }
    }
}

/// Which transport answers: the daemon says so in `PCNTGETINFO`.
fn transport(device: &Path) -> String {
    match Device::open(device, OpenMode::All).and_then(|d| d.info()) {
        Ok(info) if info.pi_flags & pfm_abi::PFM_INFO_URING != 0 => "FUSE io_uring".into(),
        Ok(_) => "classic FUSE or CUSE".into(),
        Err(e) => format!("transport unknown: {e}"),
    }
}

fn main() {
    let args: Args = clap::Parser::parse();
    let dir = std::env::temp_dir().join(format!("pfm-soak-{}", std::process::id()));
    let (daemon, device, pid) = match (args.device, args.pid) {
        (Some(device), Some(pid)) => (None, device, pid),
        _ => {
            std::fs::create_dir_all(&dir).unwrap();
            let (child, device) =
                start_pfmd(&dir, "mnt", &[], None).expect("pfmd next to pfm-soak");
            let pid = child.id() as i32;
            (Some(child), device, pid)
        }
    };
    let every = Duration::from_secs(args.report_every.max(1));
    let run = Duration::from_secs(args.seconds);
    println!(
        "pfm-soak: {} (pfmd {pid}, {}), {} CPUs online, {} s after a {} s warm-up",
        device.display(),
        transport(&device),
        online_cpus().len(),
        run.as_secs(),
        WARM_UP.as_secs()
    );

    let warm_up = run_workers(&device, WARM_UP, WARM_UP, |_, _| {});
    let start = steady(pid);
    progress_line(Duration::ZERO, &start, 0.0);
    let tallies = run_workers(&device, run, every, |at, rate| {
        progress_line(at, &measure(pid), rate)
    });
    let end = settle(pid, &start);

    println!(
        "\n{:<18} {:>12} {:>10} {:>10} {:>8} {:>10}",
        "worker", "calls", "opens", "EBUSY", "EAGAIN", "unexpected"
    );
    let mut total = Tally::default();
    for (name, tally) in &tallies {
        println!(
            "{:<18} {:>12} {:>10} {:>10} {:>8} {:>10}",
            name,
            tally.calls,
            tally.opens,
            tally.busy,
            tally.again,
            tally.unexpected.values().sum::<u64>()
        );
        total.add(tally);
    }
    println!(
        "{:<18} {:>12} {:>10} {:>10} {:>8}   {:.0} calls/s",
        "all",
        total.calls,
        total.opens,
        total.busy,
        total.again,
        total.calls as f64 / run.as_secs_f64().max(1.0)
    );
    for (what, n) in &total.expected {
        println!("expected: {what} ({n} times)");
    }
    for (_, tally) in &warm_up {
        total.add(tally);
    }
    for (what, n) in &total.unexpected {
        println!("unexpected: {what} ({n} times, warm-up included)");
    }
    println!();
    table(&start, &end);
    if let Some(child) = daemon {
        stop_pfmd(child);
        let _ = std::fs::remove_dir_all(&dir);
    }
    let grew = growth(&start, &end);
    if grew.is_empty() {
        println!("soak: flat");
    } else {
        println!("soak: GREW {}", grew.join(", "));
    }
    if !grew.is_empty() || !total.unexpected.is_empty() {
        std::process::exit(1);
    }
}
