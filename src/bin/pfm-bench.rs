//! Transport and device overhead, in one run: a no-op ioctl (PCNTRENABLE while
//! enabled), PCNTGETCNT in ALL and EACH modes, and a plain read() of a perf
//! software counter for the floor under all of them.
//!
//! `pfm-bench [--device PATH] [--iterations N]`; without --device it starts
//! the pfmd next to this binary on a private mount and stops it afterwards.

use perf_event::Builder;
use perf_event::events::Software;
use pfmd::ioctl::abi::{self, Iccsr, PfCntrs};
use pfmd::ioctl::numbers as n;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn ioctl(file: &File, cmd: u32, arg: *mut libc::c_void) {
    // SAFETY: `arg` points at memory of the size `cmd` declares (or is null
    // for _IO commands); the device validates everything else.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), cmd as libc::c_ulong, arg) };
    assert!(
        r == 0,
        "ioctl {}: {}",
        n::name(cmd).unwrap_or("?"),
        std::io::Error::last_os_error()
    );
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

fn open(device: &PathBuf, mode: i32) -> File {
    OpenOptions::new()
        .read(true)
        .custom_flags(mode)
        .open(device)
        .unwrap_or_else(|e| panic!("open {}: {e}", device.display()))
}

fn counting(file: &File) {
    let mut items = abi::PFM_COUNTERS;
    ioctl(file, n::PCNTSETITEMS, (&mut items as *mut u64).cast());
    let mut mux = Iccsr::new(0xa, 0, 1, 0, 2);
    ioctl(file, n::PCNTSETMUX, (&mut mux as *mut Iccsr).cast());
    ioctl(file, n::PCNTRENABLE, std::ptr::null_mut());
}

fn start_daemon(dir: &std::path::Path) -> (Child, PathBuf) {
    let pfmd = std::env::current_exe().unwrap().with_file_name("pfmd");
    let mountpoint = dir.join("mnt");
    let child = Command::new(&pfmd)
        .args(["--transport", "fuse", "--dev-link", "none", "--mountpoint"])
        .arg(&mountpoint)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", pfmd.display()));
    let device = mountpoint.join("pfcntr");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::metadata(&device).is_err() {
        assert!(Instant::now() < deadline, "pfmd did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, device)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut device = None;
    let mut iterations = 20_000;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--device" => device = args.next().map(PathBuf::from),
            "--iterations" => {
                iterations = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("--iterations N")
            }
            other => panic!(
                "unknown argument {other}; usage: pfm-bench [--device PATH] [--iterations N]"
            ),
        }
    }
    let dir = std::env::temp_dir().join(format!("pfm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut daemon, device) = match device {
        Some(d) => (None, d),
        None => {
            let (child, d) = start_daemon(&dir);
            (Some(child), d)
        }
    };

    let all = open(&device, abi::PCNTOPENALL);
    counting(&all);
    let mut one = [PfCntrs::default(); 1];
    let mut one_ptr = one.as_mut_ptr();
    // EACH needs every CPU free, so it gets its own pass after ALL closes.
    let all_rows = interleaved(
        iterations,
        vec![
            (
                "PCNTRENABLE (no-op ioctl)",
                Box::new(|| ioctl(&all, n::PCNTRENABLE, std::ptr::null_mut())),
            ),
            (
                "PCNTGETCNT, ALL",
                Box::new(|| {
                    ioctl(
                        &all,
                        n::PCNTGETCNT,
                        (&mut one_ptr as *mut *mut PfCntrs).cast(),
                    )
                }),
            ),
        ],
    );
    assert!(one[0].pf_cntr0 > 0, "the counter must be counting");
    drop(all);
    let each = open(&device, abi::PCNTOPENEACH);
    counting(&each);
    let mut many = vec![PfCntrs::default(); 256];
    let mut many_ptr = many.as_mut_ptr();
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
                Box::new(|| ioctl(&each, n::PCNTRENABLE, std::ptr::null_mut())),
            ),
            (
                "PCNTGETCNT, EACH",
                Box::new(|| {
                    ioctl(
                        &each,
                        n::PCNTGETCNT,
                        (&mut many_ptr as *mut *mut PfCntrs).cast(),
                    )
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
    if let Some(child) = daemon.as_mut() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
