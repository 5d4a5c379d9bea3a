//! Transport and device overhead, in one run: a no-op ioctl (PCNTRENABLE while
//! enabled), PCNTGETCNT in ALL and EACH modes, and a plain read() of a perf
//! software counter for the floor under all of them; then PCNTGETCNT
//! throughput of one ONE-mode holder alone against one holder per CPU at
//! once (how the device scales with opens and CPUs).
//!
//! Then the transports side by side (classic vs io_uring, client on each
//! CPU, one client vs one per CPU, GETCNT ONE) and a native ioctl.
//!
//! `pfm-bench [--device PATH] [--iterations N]`; without --device it starts
//! the pfmd next to this binary on a private mount and stops it afterwards
//! (for the transport rows, three more: see `transports`).

use perf_event::Builder;
use perf_event::events::Software;
use pfm_abi::Iccsr;
use pfm_bench::{online_cpus, pin_to, start_pfmd, stop_pfmd};
use pfm_client::{Device, Items, OpenMode};
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// Panics with the call's error: a benchmark has nothing to recover.
fn must<T>(result: Result<T, pfm_client::Error>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

struct Figures {
    name: &'static str,
    p50: Duration,
    p99: Duration,
    per_second: f64,
}

type Op<'a> = Box<dyn FnMut() + 'a>;

/// Runs the operations in alternating rounds, so load from elsewhere on the
/// machine lands on all of them alike.
fn interleaved(iterations: usize, mut ops: Vec<(&'static str, Op<'_>)>) -> Vec<Figures> {
    const ROUND: usize = 500;
    let mut samples: Vec<Vec<Duration>> =
        ops.iter().map(|_| Vec::with_capacity(iterations)).collect();
    let mut busy = vec![Duration::ZERO; ops.len()];
    for (_, op) in ops.iter_mut() {
        for _ in 0..ROUND {
            op();
        }
    }
    for _ in 0..iterations.div_ceil(ROUND) {
        for (i, (_, op)) in ops.iter_mut().enumerate() {
            let round = Instant::now();
            for _ in 0..ROUND {
                let t = Instant::now();
                op();
                samples[i].push(t.elapsed());
            }
            busy[i] += round.elapsed();
        }
    }
    ops.iter()
        .zip(samples)
        .zip(busy)
        .map(|(((name, _), mut s), busy)| {
            s.sort();
            Figures {
                name,
                p50: s[s.len() / 2],
                p99: s[s.len() * 99 / 100],
                per_second: s.len() as f64 / busy.as_secs_f64(),
            }
        })
        .collect()
}

/// Opens `path` in `mode` counting EV4 PF_CYCLES (one interrupt every
/// 4096) for everything.
fn counting(path: &PathBuf, mode: OpenMode) -> Device {
    let device = must(Device::open(path, mode));
    must(device.set_items(Items::COUNTERS));
    must(device.set_mux(Iccsr::new(0xa, 0, 1, 0, 2)));
    must(device.enable());
    device
}

/// Calls per second of `holders` ONE-mode opens, each by a thread bound to
/// its own CPU, all calling `call` (PCNTGETCNT unless given) for `window`
/// at once.
fn one_holder_per_cpu(path: &PathBuf, holders: usize, window: Duration) -> f64 {
    holders_calling(path, holders, window, |d| {
        std::hint::black_box(must(d.ev4_counts()));
    })
}

fn holders_calling(
    path: &PathBuf,
    holders: usize,
    window: Duration,
    call: impl Fn(&Device) + Sync,
) -> f64 {
    let start = std::sync::Barrier::new(holders);
    let calls = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..holders)
            .map(|cpu| {
                let (start, call) = (&start, &call);
                scope.spawn(move || {
                    let mut set = nix::sched::CpuSet::new();
                    set.set(cpu).expect("a CPU number");
                    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
                        .expect("bind the holder to its CPU");
                    let device = counting(path, OpenMode::One);
                    start.wait();
                    let until = Instant::now() + window;
                    let mut calls = 0u64;
                    while Instant::now() < until {
                        call(&device);
                        calls += 1;
                    }
                    calls
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("holder thread"))
            .sum::<u64>()
    });
    calls as f64 / window.as_secs_f64()
}

/// Latency and throughput of the pfm device's transports: p50/p99 and
/// calls/s of a no-op ioctl and PCNTGETCNT in each open mode, native perf
/// reads for reference, one ONE holder against one per CPU. Without
/// --device it starts pfmd itself three ways (classic, classic bound to
/// cpu0, io_uring) and needs root.
#[derive(Debug, clap::Parser)]
#[command(name = "pfm-bench", version)]
struct Args {
    /// Measure this running device instead of starting pfmd.
    #[arg(long, value_name = "PATH")]
    device: Option<PathBuf>,
    /// Calls per latency row.
    #[arg(long, default_value_t = 20_000, value_name = "N")]
    iterations: usize,
    /// Only the aggregate rows, each for this long: one ONE holder, then one
    /// per CPU, calling PCNTGETCNT, then the no-op on their own opens (a
    /// steady load to profile, and what limits scaling).
    #[arg(long, value_name = "SECONDS", requires = "device")]
    aggregate_only: Option<f64>,
}

/// `--aggregate-only`: one holder against one per CPU, GETCNT and no-op,
/// each holder on its own open.
fn aggregate_only(device: &PathBuf, window: Duration) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let noop = |d: &Device| must(d.enable());
    let getcnt_one = one_holder_per_cpu(device, 1, window);
    let getcnt_all = one_holder_per_cpu(device, cpus, window);
    let noop_one = holders_calling(device, 1, window, noop);
    let noop_all = holders_calling(device, cpus, window, noop);
    println!(
        "GETCNT ONE: one holder {getcnt_one:.0}/s, one per CPU ({cpus}) {getcnt_all:.0}/s: x{:.2}",
        getcnt_all / getcnt_one.max(1.0)
    );
    println!(
        "no-op, own ONE open: one holder {noop_one:.0}/s, one per CPU ({cpus}) {noop_all:.0}/s: x{:.2}",
        noop_all / noop_one.max(1.0)
    );
}

fn main() {
    let Args {
        device,
        iterations,
        aggregate_only: aggregate_window,
    } = clap::Parser::parse();
    if let (Some(path), Some(seconds)) = (&device, aggregate_window) {
        aggregate_only(path, Duration::from_secs_f64(seconds));
        return;
    }
    let dir = std::env::temp_dir().join(format!("pfm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let device_given = device.clone();
    let (mut daemon, device) = match device {
        Some(d) => (None, d),
        None => {
            let (child, d) = start_pfmd(&dir, "mnt", &[], None).expect("pfmd next to pfm-bench");
            (Some(child), d)
        }
    };

    let all = counting(&device, OpenMode::All);
    let mut last_all = Vec::new();
    // EACH needs every CPU free, so it gets its own pass after ALL closes.
    let all_rows = interleaved(
        iterations,
        vec![
            ("PCNTRENABLE (no-op ioctl)", Box::new(|| must(all.enable()))),
            (
                "PCNTGETCNT, ALL",
                Box::new(|| last_all = must(all.ev4_counts())),
            ),
        ],
    );
    assert!(last_all[0].pf_cntr0 > 0, "the counter must be counting");
    drop(all);
    let each = counting(&device, OpenMode::Each);
    let mut counter = Builder::new(Software::CPU_CLOCK)
        .build()
        .expect("perf cpu-clock");
    counter.enable().unwrap();
    // What the daemon reads for LOGALL: a CPU-wide counter, which the kernel
    // reads on its own CPU (an IPI when that is not the reader's CPU).
    let mut cpu_wide: Vec<_> = (0..2)
        .map(|cpu| {
            let mut c = Builder::new(Software::CPU_CLOCK)
                .any_pid()
                .one_cpu(cpu)
                .build()
                .expect("cpu-wide cpu-clock");
            c.enable().unwrap();
            c
        })
        .collect();
    let (wide0, wide1) = cpu_wide.split_at_mut(1);
    let each_rows = interleaved(
        iterations,
        vec![
            (
                "PCNTRENABLE (no-op), EACH",
                Box::new(|| must(each.enable())),
            ),
            (
                "PCNTGETCNT, EACH",
                Box::new(|| {
                    std::hint::black_box(must(each.ev4_counts()));
                }),
            ),
            (
                "read() of perf cpu-clock",
                Box::new(|| {
                    std::hint::black_box(counter.read().unwrap());
                }),
            ),
            (
                "read() cpu-wide, cpu 0",
                Box::new(|| {
                    std::hint::black_box(wide0[0].read().unwrap());
                }),
            ),
            (
                "read() cpu-wide, cpu 1",
                Box::new(|| {
                    std::hint::black_box(wide1[0].read().unwrap());
                }),
            ),
        ],
    );
    let rows: Vec<Figures> = all_rows.into_iter().chain(each_rows).collect();

    println!(
        "{:<28} {:>10} {:>10} {:>12}",
        "operation", "p50", "p99", "calls/s"
    );
    for r in &rows {
        println!(
            "{:<28} {:>8.1}us {:>8.1}us {:>12.0}",
            r.name,
            r.p50.as_secs_f64() * 1e6,
            r.p99.as_secs_f64() * 1e6,
            r.per_second
        );
    }
    println!(
        "PCNTGETCNT(ALL) p50 / no-op p50 = {:.2} (target <= 1.2)",
        rows[1].p50.as_secs_f64() / rows[0].p50.as_secs_f64()
    );
    drop(each);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let window = Duration::from_secs(2);
    // Alternate the two, twice, so load elsewhere falls on both alike.
    let (mut alone, mut together) = (0.0f64, 0.0f64);
    for _ in 0..2 {
        alone = alone.max(one_holder_per_cpu(&device, 1, window));
        together = together.max(one_holder_per_cpu(&device, cpus, window));
    }
    println!("PCNTGETCNT, one ONE holder:        {alone:>10.0} calls/s");
    println!("PCNTGETCNT, one ONE holder per CPU: {together:>10.0} calls/s in all ({cpus} CPUs)");
    println!(
        "one holder per CPU / one holder = {:.2}",
        together / alone.max(1.0)
    );
    if let Some(child) = daemon.as_mut() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = child.wait();
    }
    transports(device_given.as_ref(), &dir, iterations);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- Transports side by side: classic vs io_uring, client placement, one
// client vs one per CPU, and a native ioctl for the limit (issue 13). Built
// on pfm-client; pfmd is asked which transport answered (PFM_INFO_URING).

/// FUSE connections negotiate io_uring only while this is `Y`.
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// One row in the format of the rows above: name, p50, p99, calls/s.
fn row(name: &str, f: &Figures) {
    println!(
        "{:<44} {:>8.1}us {:>8.1}us {:>12.0}",
        name,
        f.p50.as_secs_f64() * 1e6,
        f.p99.as_secs_f64() * 1e6,
        f.per_second
    );
}

/// Runs `work` on a thread bound to `cpu`.
fn on_cpu<T: Send>(cpu: usize, work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(move || {
            pin_to(cpu);
            work()
        })
        .join()
        .expect("benchmark thread")
    })
}

/// Calls per second of `op` from one thread per CPU of `cpus`, all at once
/// (`iterations` calls each), wall time from the first start to the last end.
fn aggregate<C: Sync>(
    cpus: &[usize],
    iterations: usize,
    context: impl Fn(usize) -> C + Sync,
    op: impl Fn(&C) + Sync,
) -> f64 {
    let start = std::sync::Barrier::new(cpus.len());
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                let (start, context, op) = (&start, &context, &op);
                s.spawn(move || {
                    pin_to(cpu);
                    let c = context(cpu);
                    for _ in 0..500 {
                        op(&c);
                    }
                    start.wait();
                    let t = Instant::now();
                    for _ in 0..iterations {
                        op(&c);
                    }
                    (t, Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("benchmark thread"))
            .collect()
    });
    let first = spans.iter().map(|s| s.0).min().expect("a thread");
    let last = spans.iter().map(|s| s.1).max().expect("a thread");
    (cpus.len() * iterations) as f64 / (last - first).as_secs_f64()
}

/// The rows of one served device: which transport answered, the no-op and
/// GETCNT ALL from a client on each CPU, one client against one client per
/// CPU, and GETCNT ONE (the open's own CPU) from each CPU.
fn transport_rows(label: &str, path: &PathBuf, iterations: usize) {
    let cpus = online_cpus();
    let all = counting(path, OpenMode::All);
    let uring = must(all.info()).pi_flags & pfm_abi::PFM_INFO_URING != 0;
    println!(
        "\n{label}: {} ({} answered PCNTGETINFO)",
        path.display(),
        if uring {
            "a FUSE io_uring queue"
        } else {
            "a classic channel"
        }
    );
    for &cpu in &cpus {
        let figures = on_cpu(cpu, || {
            interleaved(
                iterations,
                vec![
                    ("no-op", Box::new(|| must(all.enable())) as Op<'_>),
                    ("GETCNT ALL", Box::new(|| drop(must(all.ev4_counts())))),
                ],
            )
        });
        row(&format!("{label}: no-op, client cpu{cpu}"), &figures[0]);
        row(
            &format!("{label}: GETCNT ALL, client cpu{cpu}"),
            &figures[1],
        );
        println!(
            "{label}: client cpu{cpu}: GETCNT ALL / no-op p50 = {:.2} (target <= 1.2), no-op p99 / p50 = {:.1} (target <= 4)",
            figures[1].p50.as_secs_f64() / figures[0].p50.as_secs_f64(),
            figures[0].p99.as_secs_f64() / figures[0].p50.as_secs_f64()
        );
    }
    let one = aggregate(&cpus[..1], iterations, |_| (), |_| must(all.enable()));
    let each = aggregate(&cpus, iterations, |_| (), |_| must(all.enable()));
    println!(
        "{label}: no-op, one client {one:.0}/s, one client per CPU ({}) {each:.0}/s in all: x{:.2} (target >= 1.7)",
        cpus.len(),
        each / one
    );
    drop(all);
    for &cpu in &cpus {
        let figures = on_cpu(cpu, || {
            let own = counting(path, OpenMode::One);
            interleaved(
                iterations,
                vec![(
                    "GETCNT ONE",
                    Box::new(|| drop(must(own.ev4_counts()))) as Op<'_>,
                )],
            )
        });
        row(
            &format!("{label}: GETCNT ONE, holder cpu{cpu}"),
            &figures[0],
        );
    }
    let one = aggregate(
        &cpus[..1],
        iterations,
        |_| counting(path, OpenMode::One),
        |d| drop(must(d.ev4_counts())),
    );
    let each = aggregate(
        &cpus,
        iterations,
        |_| counting(path, OpenMode::One),
        |d| drop(must(d.ev4_counts())),
    );
    println!(
        "{label}: GETCNT ONE, one holder {one:.0}/s, one holder per CPU {each:.0}/s in all: x{:.2}",
        each / one
    );
}

/// The limit: an ioctl the kernel answers itself (`PERF_EVENT_IOC_ENABLE`
/// on a perf cpu-clock descriptor), from each CPU and from all at once.
fn native_rows(iterations: usize) {
    let cpus = online_cpus();
    let counter = || {
        Builder::new(Software::CPU_CLOCK)
            .build()
            .expect("perf cpu-clock")
    };
    println!("\nnative reference");
    for &cpu in &cpus {
        let figures = on_cpu(cpu, || {
            let mut c = counter();
            interleaved(
                iterations,
                vec![(
                    "ioctl",
                    Box::new(move || c.enable().expect("PERF_EVENT_IOC_ENABLE")) as Op<'_>,
                )],
            )
        });
        row(
            &format!("native: PERF_EVENT_IOC_ENABLE, cpu{cpu}"),
            &figures[0],
        );
    }
    let enable = |c: &std::sync::Mutex<perf_event::Counter>| {
        c.lock()
            .expect("counter")
            .enable()
            .expect("PERF_EVENT_IOC_ENABLE")
    };
    let one = aggregate(
        &cpus[..1],
        iterations,
        |_| std::sync::Mutex::new(counter()),
        enable,
    );
    let each = aggregate(
        &cpus,
        iterations,
        |_| std::sync::Mutex::new(counter()),
        enable,
    );
    println!(
        "native: one thread {one:.0}/s, one thread per CPU {each:.0}/s in all: x{:.2}",
        each / one
    );
}

/// Puts `enable_uring` back when dropped.
struct UringParameter(Option<String>);

impl Drop for UringParameter {
    fn drop(&mut self) {
        if let Some(previous) = &self.0
            && let Err(e) = std::fs::write(ENABLE_URING, previous.trim())
        {
            eprintln!("pfm-bench: cannot restore {ENABLE_URING}: {e}");
        }
    }
}

/// The transport rows: for `device` when given, else for pfmd started
/// three ways: the classic loop, the classic loop with the daemon bound to
/// cpu0 (clients on cpu0 are on its CPU, others cross), and io_uring where
/// the kernel offers it (`enable_uring` set to Y for its start and put back).
fn transports(device: Option<&PathBuf>, dir: &std::path::Path, iterations: usize) {
    if let Some(path) = device {
        transport_rows("device", path, iterations);
        native_rows(iterations);
        return;
    }
    let mut served: Vec<(&str, Option<(Child, PathBuf)>)> = vec![
        (
            "classic",
            start_pfmd(dir, "classic", &["--fuse-uring", "off"], None),
        ),
        (
            "classic, pfmd on cpu0",
            start_pfmd(dir, "pinned", &["--fuse-uring", "off"], Some(0)),
        ),
    ];
    let uring = match std::fs::read_to_string(ENABLE_URING) {
        Ok(previous) => {
            let guard = UringParameter(Some(previous));
            match std::fs::write(ENABLE_URING, "Y") {
                Ok(()) => {
                    let started = start_pfmd(dir, "uring", &["--fuse-uring", "on"], None);
                    drop(guard);
                    started
                }
                Err(e) => {
                    println!("io_uring: cannot set {ENABLE_URING}: {e} (not root?)");
                    None
                }
            }
        }
        Err(_) => {
            println!("io_uring: not offered by this kernel ({ENABLE_URING} missing)");
            None
        }
    };
    served.push(("io_uring", uring));
    for (label, daemon) in &served {
        if let Some((_, path)) = daemon {
            transport_rows(label, path, iterations);
        }
    }
    for (_, daemon) in served {
        if let Some((child, _)) = daemon {
            stop_pfmd(child);
        }
    }
    native_rows(iterations);
}
