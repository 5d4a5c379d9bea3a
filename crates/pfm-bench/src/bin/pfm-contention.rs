//! Can unprivileged users slow down the one who holds the device? A holder
//! reads its counts (`PCNTGETCNT`, ALL mode, counting cycles) as fast as it
//! can, alone, then while 8 unprivileged processes each poll `open()` every
//! millisecond, then while one unprivileged process does so from 64
//! threads. Prints the holder's calls/s, p50, p99 and max per phase, the
//! ratios to the phase alone, and what the pollers got. Figures only: it
//! never fails on them (targets: 8 pollers keep at least half the rate
//! alone; p99 with 64 threads under 10 ms).
//!
//! `pfm-contention [--device PATH] [--seconds N]`; without --device it
//! starts the pfmd next to this binary on a private mount and stops it
//! afterwards. Run as root: the pollers become uid 65534 through `setpriv`.
//!
//! The pollers are started before the holder opens the device, so the
//! holder's figures never include the FLUSH each poller's exec would send
//! for an inherited (close-on-exec) descriptor.

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

/// The holder: open (waiting while pollers that got in hold it), count,
/// then `PCNTGETCNT` in a loop for `seconds`, every call timed.
fn hold(device: &Path, seconds: f64) -> Figures {
    let deadline = Instant::now() + Duration::from_secs(30);
    let holder = loop {
        match pfm_client::Device::open(device, OpenMode::All) {
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
    for _ in 0..500 {
        holder.interrupt_counts().expect("PCNTGETCNT");
    }
    let mut samples = Vec::with_capacity(1 << 20);
    let start = Instant::now();
    let run = Duration::from_secs_f64(seconds);
    while start.elapsed() < run {
        let t = Instant::now();
        let counts = holder.interrupt_counts().expect("PCNTGETCNT");
        samples.push(t.elapsed());
        std::hint::black_box(counts);
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

/// Starts `processes` pollers of `threads` threads each, as uid 65534 when
/// this runs as root.
fn start_pollers(device: &Path, processes: usize, threads: usize, seconds: f64) -> Vec<Child> {
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
            cmd.arg("--poller")
                .arg(device)
                .arg(threads.to_string())
                .arg(seconds.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a poller")
        })
        .collect()
}

fn poller_totals(pollers: Vec<Child>) -> String {
    let (mut attempts, mut busy, mut opened, mut other) = (0u64, 0u64, 0u64, 0u64);
    for p in pollers {
        let out = p.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for word in text.split_whitespace() {
            let Some((k, v)) = word.split_once('=') else {
                continue;
            };
            let v: u64 = v.parse().unwrap_or(0);
            match k {
                "attempts" => attempts += v,
                "ebusy" => busy += v,
                "opened" => opened += v,
                "other" => other += v,
                _ => {}
            }
        }
    }
    format!("pollers: {attempts} opens, {busy} EBUSY, {opened} got in, {other} other errors")
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
            "--poller" => {
                let device = PathBuf::from(args.next().expect("--poller DEVICE THREADS SECONDS"));
                let threads = args.next().and_then(|s| s.parse().ok()).expect("THREADS");
                let seconds = args.next().and_then(|s| s.parse().ok()).expect("SECONDS");
                poller(device, threads, seconds);
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

    let alone = hold(&device, seconds);
    print("alone", &alone, None);

    // Pollers first (see the module comment), for the holder's whole phase.
    let settle = 0.3;
    let pollers = start_pollers(&device, 8, 1, seconds + settle + 1.0);
    std::thread::sleep(Duration::from_secs_f64(settle));
    let eight = hold(&device, seconds);
    let eight_pollers = poller_totals(pollers);
    print("8 processes polling open()", &eight, Some(&alone));
    println!("  {eight_pollers}");

    let pollers = start_pollers(&device, 1, 64, seconds + settle + 1.0);
    std::thread::sleep(Duration::from_secs_f64(settle));
    let many = hold(&device, seconds);
    let many_pollers = poller_totals(pollers);
    print("64 threads polling open()", &many, Some(&alone));
    println!("  {many_pollers}");

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

    if let Some(mut d) = daemon.take() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(d.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = d.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
