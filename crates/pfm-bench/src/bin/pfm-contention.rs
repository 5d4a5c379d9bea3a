//! Can unprivileged users slow down the one who holds the device? A holder
//! reads its counts (`PCNTGETCNT`, ALL mode, counting cycles) as fast as it
//! can, alone, then while 8 unprivileged processes each poll `open()` every
//! millisecond, then while one unprivileged process does so from 64
//! threads. Then, holding the first allowed CPU alone (ONE mode) and
//! reading every millisecond (it needs two CPUs), alone and while one
//! unprivileged process holding the last CPU sets a 64 MiB profile range
//! over and over from 4 threads (as many as the daemon's default FUSE
//! readers). Prints the holder's calls/s, p50, p99 and max per phase, the
//! ratios to the phase alone, and what the pollers got. Figures only: it
//! never fails on them (targets: 8 pollers keep at least half the rate
//! alone; p99 with 64 threads under 10 ms; p99 beside the range setter
//! under 10 ms).
//!
//! `pfm-contention [--device PATH] [--seconds N]`; without --device it
//! starts the pfmd next to this binary on a private mount and stops it
//! afterwards. Run as root: the pollers become uid 65534 through `setpriv`.
//!
//! The pollers are started before the holder opens the device, so the
//! holder's figures never include the FLUSH each poller's exec would send
//! for an inherited (close-on-exec) descriptor.

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;
use pfm_abi::{Iccsr, Items, OpenMode, PCNTOPENALL};
use pfm_bench::start_pfmd;
use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Figures {
    calls: usize,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

/// The holder: open in `mode` (waiting while pollers that got in hold
/// it), count, then `PCNTGETCNT` in a loop for `seconds`, every call timed,
/// `pace` apart if given (a periodic reader finds the daemon's readers as
/// other callers left them; a tight loop is served by the reader that just
/// answered it).
fn hold(device: &Path, seconds: f64, mode: OpenMode, pace: Option<Duration>) -> Figures {
    let deadline = Instant::now() + Duration::from_secs(30);
    let holder = loop {
        match pfm_client::Device::open(device, mode) {
            Ok(d) => break d,
            Err(e) if e.errno() == Some(nix::errno::Errno::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => panic!("the holder's open: {e}"),
        }
    };
    holder.set_items(Items::COUNTERS).expect("PCNTSETITEMS");
    holder
        .set_mux(Iccsr::new(0xa, 0, 1, 0, 2))
        .expect("PCNTSETMUX");
    holder.enable().expect("PCNTRENABLE");
    // Warm up for 500 calls or 200 ms: a stalled daemon must not spend the
    // other processes' time before the measured calls.
    let warm = Instant::now();
    for _ in 0..500 {
        holder.interrupt_counts().expect("PCNTGETCNT");
        if warm.elapsed() > Duration::from_millis(200) {
            break;
        }
    }
    let mut samples = Vec::with_capacity(1 << 20);
    let start = Instant::now();
    let run = Duration::from_secs_f64(seconds);
    while start.elapsed() < run {
        let t = Instant::now();
        let counts = holder.interrupt_counts().expect("PCNTGETCNT");
        samples.push(t.elapsed());
        std::hint::black_box(counts);
        if let Some(pace) = pace {
            std::thread::sleep(pace);
        }
    }
    let elapsed = start.elapsed();
    let calls = samples.len();
    samples.sort();
    Figures {
        calls,
        per_second: calls as f64 / elapsed.as_secs_f64(),
        p50: samples[calls / 2],
        p99: samples[calls * 99 / 100],
        max: samples[calls - 1],
    }
}

/// `--poller DEVICE THREADS SECONDS`: each thread opens the device in ALL
/// mode every millisecond (closing it again when it gets in); prints what
/// the opens got.
fn poller(device: PathBuf, threads: usize, seconds: f64) {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let device = device.clone();
            std::thread::spawn(move || {
                let (mut attempts, mut busy, mut opened, mut other) = (0u64, 0u64, 0u64, 0u64);
                while Instant::now() < until {
                    attempts += 1;
                    match OpenOptions::new()
                        .read(true)
                        .custom_flags(PCNTOPENALL)
                        .open(&device)
                    {
                        Ok(file) => {
                            opened += 1;
                            drop(file);
                        }
                        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EBUSY as i32) => {
                            busy += 1
                        }
                        Err(_) => other += 1,
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                (attempts, busy, opened, other)
            })
        })
        .collect();
    let mut total = (0, 0, 0, 0);
    for w in workers {
        let (a, b, o, x) = w.join().unwrap();
        total = (total.0 + a, total.1 + b, total.2 + o, total.3 + x);
    }
    println!(
        "attempts={} ebusy={} opened={} other={}",
        total.0, total.1, total.2, total.3
    );
}

/// The CPUs the calling thread may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    let allowed = sched_getaffinity(Pid::from_raw(0)).expect("sched_getaffinity");
    (0..CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect()
}

/// Binds the calling thread to `cpu` alone; returns the affinity it had.
fn bind_to(cpu: usize) -> CpuSet {
    let before = sched_getaffinity(Pid::from_raw(0)).expect("sched_getaffinity");
    let mut set = CpuSet::new();
    set.set(cpu).expect("a CPU number");
    sched_setaffinity(Pid::from_raw(0), &set).expect("sched_setaffinity");
    before
}

/// `--range-setter DEVICE THREADS SECONDS`: holds the last online CPU (ONE
/// mode) and sets a user range of 64 MiB of buckets from each thread, over
/// and over; prints how many sets it made.
fn range_setter(device: PathBuf, threads: usize, seconds: f64) {
    let last = *allowed_cpus().last().expect("an allowed CPU");
    bind_to(last);
    let holder = pfm_client::Device::open(&device, OpenMode::One).expect("the setter's open");
    holder.set_items(Items::PROFILING).expect("PCNTSETITEMS");
    let holder = std::sync::Arc::new(holder);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let holder = std::sync::Arc::clone(&holder);
            std::thread::spawn(move || {
                let mut sets = 0u64;
                while Instant::now() < until {
                    // 256 MiB of text at 16 bytes a bucket: 64 MiB of buckets.
                    holder
                        .set_range(false, 0x40_0000, 0x40_0000 + (256 << 20), Some(4))
                        .expect("PCNTSETURANGE");
                    sets += 1;
                }
                sets
            })
        })
        .collect();
    let sets: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    println!("sets={sets}");
}

/// Starts `processes` helpers (`--poller` or `--range-setter`) of `threads`
/// threads each, as uid 65534 when this runs as root.
fn start_as_nobody(
    role: &str,
    device: &Path,
    processes: usize,
    threads: usize,
    seconds: f64,
) -> Vec<Child> {
    let exe = std::env::current_exe().unwrap();
    let root = nix::unistd::geteuid().is_root();
    (0..processes)
        .map(|_| {
            let mut cmd = if root {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(&exe);
                c
            } else {
                Command::new(&exe)
            };
            cmd.arg(role)
                .arg(device)
                .arg(threads.to_string())
                .arg(seconds.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a helper process")
        })
        .collect()
}

fn start_pollers(device: &Path, processes: usize, threads: usize, seconds: f64) -> Vec<Child> {
    start_as_nobody("--poller", device, processes, threads, seconds)
}

/// What `children` printed, once they have finished.
fn outputs(children: Vec<Child>) -> String {
    children
        .into_iter()
        .map(|c| String::from_utf8_lossy(&c.wait_with_output().unwrap().stdout).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The sum of the `key=N` words in `text`.
fn total(text: &str, key: &str) -> u64 {
    text.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter(|(k, _)| *k == key)
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum()
}

fn poller_totals(pollers: Vec<Child>) -> String {
    let text = outputs(pollers);
    format!(
        "pollers: {} opens, {} EBUSY, {} got in, {} other errors",
        total(&text, "attempts"),
        total(&text, "ebusy"),
        total(&text, "opened"),
        total(&text, "other")
    )
}

fn print(name: &str, f: &Figures, alone: Option<&Figures>) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    print!(
        "{name:<34} {:>9.0} calls/s  p50 {:>7.1} us  p99 {:>8.1} us  max {:>9.1} us  ({} calls)",
        f.per_second,
        us(f.p50),
        us(f.p99),
        us(f.max),
        f.calls
    );
    if let Some(a) = alone {
        print!(
            "  rate x{:.2}, p99 x{:.2} of alone",
            f.per_second / a.per_second,
            f.p99.as_secs_f64() / a.p99.as_secs_f64()
        );
    }
    println!();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut device = None;
    let mut seconds = 3.0f64;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            role @ ("--poller" | "--range-setter") => {
                let device = PathBuf::from(args.next().expect("ROLE DEVICE THREADS SECONDS"));
                let threads = args.next().and_then(|s| s.parse().ok()).expect("THREADS");
                let seconds = args.next().and_then(|s| s.parse().ok()).expect("SECONDS");
                if role == "--poller" {
                    poller(device, threads, seconds);
                } else {
                    range_setter(device, threads, seconds);
                }
                return;
            }
            "--device" => device = args.next().map(PathBuf::from),
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("--seconds N")
            }
            other => panic!(
                "unknown argument {other}; usage: pfm-contention [--device PATH] [--seconds N]"
            ),
        }
    }
    let dir = std::env::temp_dir().join(format!("pfm-contention-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The pollers run as nobody: they must reach the mount.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (mut daemon, device) = match device {
        Some(d) => (None, d),
        None => {
            let (child, d) =
                start_pfmd(&dir, "mnt", &[], None).expect("pfmd next to pfm-contention");
            (Some(child), d)
        }
    };
    if !nix::unistd::geteuid().is_root() {
        println!("note: not root, so the pollers run as this user, not as uid 65534");
    }
    println!(
        "holder: PCNTGETCNT in ALL mode, counting PF_CYCLES; {seconds} s per phase; pollers open() every 1 ms"
    );

    let alone = hold(&device, seconds, OpenMode::All, None);
    print("alone", &alone, None);

    // Pollers first (see the module comment), for the holder's whole phase.
    let settle = 0.3;
    let pollers = start_pollers(&device, 8, 1, seconds + settle + 1.0);
    std::thread::sleep(Duration::from_secs_f64(settle));
    let eight = hold(&device, seconds, OpenMode::All, None);
    let eight_pollers = poller_totals(pollers);
    print("8 processes polling open()", &eight, Some(&alone));
    println!("  {eight_pollers}");

    let pollers = start_pollers(&device, 1, 64, seconds + settle + 1.0);
    std::thread::sleep(Duration::from_secs_f64(settle));
    let many = hold(&device, seconds, OpenMode::All, None);
    let many_pollers = poller_totals(pollers);
    print("64 threads polling open()", &many, Some(&alone));
    println!("  {many_pollers}");

    // ONE mode on the first allowed CPU, alone and beside another user's
    // range setter on the last.
    let first = allowed_cpus()[0];
    let affinity = bind_to(first);
    let one_alone = hold(
        &device,
        seconds,
        OpenMode::One,
        Some(Duration::from_millis(1)),
    );
    print("ONE on one CPU, every 1 ms, alone", &one_alone, None);
    // The setter inherits this thread's affinity: give it every CPU back,
    // so that it takes the last.
    sched_setaffinity(Pid::from_raw(0), &affinity).expect("sched_setaffinity");
    let setter = start_as_nobody("--range-setter", &device, 1, 4, seconds + settle + 1.0);
    bind_to(first);
    std::thread::sleep(Duration::from_secs_f64(settle));
    let beside = hold(
        &device,
        seconds,
        OpenMode::One,
        Some(Duration::from_millis(1)),
    );
    let sets = total(&outputs(setter), "sets");
    print("beside 4 threads setting 64 MiB", &beside, Some(&one_alone));
    println!("  range setter: {sets} PCNTSETURANGE of 64 MiB of buckets");
    sched_setaffinity(Pid::from_raw(0), &affinity).expect("sched_setaffinity");

    let ratio = eight.per_second / alone.per_second;
    println!(
        "target: rate with 8 pollers >= 0.5 x alone: {ratio:.2} ({})",
        if ratio >= 0.5 { "met" } else { "missed" }
    );
    let p99_ms = many.p99.as_secs_f64() * 1e3;
    println!(
        "target: p99 with 64 polling threads < 10 ms: {p99_ms:.3} ms ({})",
        if p99_ms < 10.0 { "met" } else { "missed" }
    );
    let p99_ms = beside.p99.as_secs_f64() * 1e3;
    println!(
        "target: p99 beside the range setter < 10 ms: {p99_ms:.3} ms ({})",
        if p99_ms < 10.0 { "met" } else { "missed" }
    );

    if let Some(mut d) = daemon.take() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(d.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = d.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
