//! The C examples (`examples/c`) build with their Makefile against our
//! `<sys/pfcntr.h>` under `-std=c99 -Wall -Wextra -Werror`, clean up after
//! themselves, behave sensibly with no device, and run end to end against a
//! crude LD_PRELOAD model of the device (docs/device.md): a broken example fails `cargo test`.
//! Running them against a live pfmd is the daemon's tests' job.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Every program the Makefile builds.
const PROGRAMS: [&str; 5] = [
    "ev4count",
    "errno_contract",
    "ev5count",
    "papi_ev6",
    "uprofile",
];

fn examples() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("examples/c")
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("c_examples-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (make and gcc are required)"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `make BUILD=dir` with gcc; returns the build directory.
fn build(name: &str) -> PathBuf {
    let dir = scratch(name);
    let out = output(
        Command::new("make")
            .arg("-C")
            .arg(examples())
            .arg(format!("BUILD={}", dir.display()))
            .arg("CC=gcc"),
    );
    assert!(
        out.status.success(),
        "make failed:\n{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    for prog in PROGRAMS {
        assert!(dir.join(prog).is_file(), "{prog} not built");
    }
    dir
}

#[test]
fn examples_build_warning_free_and_clean() {
    let dir = build("make");
    let out = output(
        Command::new("make")
            .arg("-C")
            .arg(examples())
            .arg(format!("BUILD={}", dir.display()))
            .arg("clean"),
    );
    assert!(out.status.success(), "make clean failed");
    for prog in PROGRAMS {
        assert!(!dir.join(prog).exists(), "make clean left {prog}");
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn examples_compile_as_strict_c99_with_the_header() {
    // The same flags the Makefile uses, plus -pedantic, without make.
    let dir = scratch("strict");
    for prog in PROGRAMS {
        let out = output(
            Command::new("gcc")
                .args([
                    "-std=c99",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-pedantic",
                    "-O2",
                ])
                .arg("-I")
                .arg(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("include"))
                .arg("-o")
                .arg(dir.join(prog))
                .arg(examples().join(format!("{prog}.c"))),
        );
        assert!(out.status.success(), "{prog}.c:\n{}", text(&out.stderr));
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn examples_report_a_missing_device() {
    let dir = build("nodevice");
    let missing = dir.join("no-such-pfcntr");

    // ev4count: the failing call and the errno name on stderr, status 1.
    let out = output(Command::new(dir.join("ev4count")).env("PFM_DEVICE", &missing));
    assert_eq!(out.status.code(), Some(1), "ev4count exit status");
    let err = text(&out.stderr);
    assert!(
        err.contains("no-such-pfcntr") && err.contains("ENOENT"),
        "ev4count stderr: {err}"
    );
    assert!(
        out.stdout.is_empty(),
        "ev4count printed counts without a device"
    );

    // A bad option is a usage error.
    let out = output(Command::new(dir.join("ev4count")).arg("-bogus"));
    assert_eq!(out.status.code(), Some(2), "ev4count usage status");

    // errno_contract: a FAIL line for the open, then exactly "N passed, N
    // failed", status 1.
    let out = output(Command::new(dir.join("errno_contract")).env("PFM_DEVICE", &missing));
    assert_eq!(out.status.code(), Some(1), "errno_contract exit status");
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l == "FAIL open_all: expected 0 got ENOENT"),
        "errno_contract output:\n{stdout}"
    );
    assert_eq!(
        stdout.lines().last(),
        Some("0 passed, 1 failed"),
        "{stdout}"
    );
    let _ = fs::remove_dir_all(&dir);
}

/// A crude stand-in for the device, preloaded into the examples: enough of
/// the contract to drive every row of `errno_contract` and every mode of
/// `ev4count`. It checks the examples' mechanics (argument passing, descriptor
/// hygiene, fork, guard pages, output format), not pfmd.
const FAKE_DEVICE: &str = r#"/*
 * A crude LD_PRELOAD stand-in for /dev/pfcntr (the path in $PFM_DEVICE),
 * modelling the device just far enough to drive the examples end to end:
 * open modes and busy rules, items, ICCSR validation, enable/disable,
 * counts that live across close/reopen, and caller-memory writes that fault
 * like copyout.  Counts are invented from elapsed time.  Not pfmd.
 */
#define _GNU_SOURCE
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/pfcntr.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NCPU	2
#define NFILE	64

static struct device {		/* shared with forked children */
	int	holder, nopen, all_held, cpu_held[NCPU];
	unsigned long acc_ns, on_since, pr_cycle;
	struct iccsr mux;	/* counts are derived from time with it */
} *dev;

static struct file {
	int	fd, mode, cpu, logselect;
	long	items;
} files[NFILE];

static unsigned long
now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (unsigned long)t.tv_sec * 1000000000UL + (unsigned long)t.tv_nsec;
}

static int
fail(int e)
{
	errno = e;
	return -1;
}

static void
stop(void)
{
	if (dev->on_since) {
		dev->acc_ns += now() - dev->on_since;
		dev->on_since = 0;
	}
}

__attribute__((constructor)) static void
init(void)
{
	dev = mmap(0, sizeof *dev, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	memset(dev, 0, sizeof *dev);
	dev->pr_cycle = now();
}

static struct file *
lookup(int fd)
{
	int i;

	for (i = 0; i < NFILE; i++)
		if (files[i].mode && files[i].fd == fd)
			return &files[i];
	return 0;
}

static int
pfm_open(const char *path, int flags, int perm)
{
	static int (*real)(const char *, int, ...);
	const char *name = getenv("PFM_DEVICE");
	struct file *f;
	cpu_set_t set;
	int mode, cpu = 0, i, fd;

	if (!real)
		real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
	if (!name || strcmp(path, name) != 0)
		return real(path, flags, perm);
	mode = (flags & PCNTOPENMASK) == PCNTOPENONE ? 1 :
	    (flags & PCNTOPENMASK) == PCNTOPENEACH ? 2 : 3;
	if (mode == 1) {
		sched_getaffinity(0, sizeof set, &set);
		if (CPU_COUNT(&set) != 1)
			return fail(EINVAL);
		while (!CPU_ISSET(cpu, &set))
			cpu++;
	}
	cpu %= NCPU;	/* the model has NCPU CPUs whatever the host has */
	if ((dev->holder && dev->holder != getpid()) || dev->all_held ||
	    (mode == 1 && dev->cpu_held[cpu]))
		return fail(EBUSY);
	for (i = 0; mode != 1 && i < NCPU; i++)
		if (dev->cpu_held[i])
			return fail(EBUSY);
	for (f = files; f < files + NFILE && f->mode; f++)
		;
	if (f == files + NFILE || (fd = real("/dev/null", O_RDONLY)) < 0)
		return fail(EMFILE);
	memset(f, 0, sizeof *f);
	f->fd = fd;
	f->mode = mode;
	f->cpu = cpu;
	f->items = PFM_COUNTERS;
	dev->holder = getpid();
	dev->nopen++;
	if (mode == 1)
		dev->cpu_held[cpu] = 1;
	else
		dev->all_held = 1;
	stop();
	return fd;
}

#define OPEN_ARGS \
	va_list ap; int perm; \
	va_start(ap, flags); perm = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, int) : 0; va_end(ap)

int open(const char *path, int flags, ...) { OPEN_ARGS; return pfm_open(path, flags, perm); }
int open64(const char *path, int flags, ...) { OPEN_ARGS; return pfm_open(path, flags, perm); }
int __open_2(const char *path, int flags) { return pfm_open(path, flags, 0); }
int __open64_2(const char *path, int flags) { return pfm_open(path, flags, 0); }

int
close(int fd)
{
	static int (*real)(int);
	struct file *f = lookup(fd);

	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "close");
	if (f) {
		if (f->mode == 1)
			dev->cpu_held[f->cpu] = 0;
		else
			dev->all_held = 0;
		if (--dev->nopen == 0)
			dev->holder = 0;
		stop();
		f->mode = 0;
	}
	return real(fd);
}

int
ioctl(int fd, unsigned long req, ...)
{
	static int (*real)(int, unsigned long, ...);
	struct pfcntrs c[NCPU];
	struct pfm_info *pi;
	struct iovec local, remote;
	struct iccsr m;
	struct file *f;
	unsigned long ns;
	va_list ap;
	void *arg;
	long v;
	int i, n;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real)
		real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
	if ((f = lookup(fd)) == 0)
		return real(fd, req, arg);
	switch (req) {
	case PCNTGETINFO:
		pi = arg;
		memset(pi, 0, sizeof *pi);
		pi->pi_version = PFM_INFO_VERSION;
		pi->pi_family = PFM_FAMILY_EV4;
		pi->pi_impl = PFM_IMPL_EV4;
		pi->pi_ncpus = NCPU;
		pi->pi_ncounters = 2;
		pi->pi_open_mode = (unsigned long)f->mode;
		pi->pi_items = (unsigned long)f->items;
		pi->pi_flags = (f->logselect ? PFM_INFO_LOGSELECT : 0) |
		    (dev->on_since ? PFM_INFO_ENABLED : 0);
		return 0;
	case PCNTSETITEMS:
		if (((v = *(long *)arg) & 7) == 0)
			return fail(EINVAL);
		if (v & PFM_PROFME_MODE_MASK)	/* profile-me needs an EV67 */
			return fail(EINVAL);
		f->items = v;
		return 0;
	case PCNTSETMUX:
		m = *(struct iccsr *)arg;
		if (m.iccsr_disable == 3 || m.iccsr_ign0 || m.iccsr_ign1 || m.iccsr_ign2 || m.iccsr_ign3)
			return fail(EINVAL);
		if (m.iccsr_mux0 > 0xe || ((m.iccsr_mux0 & 1) && m.iccsr_mux0 != PF_PALMODE))
			return fail(EINVAL);
		if (!(m.iccsr_disable & 1) && (m.iccsr_mux0 == PF_PALMODE || m.iccsr_mux0 == PF_EXTPIN0))
			return fail(EOPNOTSUPP);
		if (!(m.iccsr_disable & 2) && m.iccsr_mux1 == PF_EXTPIN1)
			return fail(EOPNOTSUPP);
		dev->mux = m;
		return 0;
	case PCNTLOGALL:
		if (getuid() != 0)
			return fail(EACCES);
		f->logselect = 0;
		return 0;
	case PCNTLOGSELECT:
		f->logselect = 1;
		return 0;
	case PCNTRENABLE:
		if (!f->logselect && getuid() != 0)
			return fail(EACCES);
		if (!dev->on_since)
			dev->on_since = now();
		return 0;
	case PCNTRDISABLE:
		stop();
		return 0;
	case PCNTCLEARCNT:
		if ((f->items & (PFM_COUNTERS | PFM_IPL)) == 0)
			return fail(EINVAL);
		dev->acc_ns = 0;
		if (dev->on_since)
			dev->on_since = now();
		dev->pr_cycle = now();
		return 0;
	case PCNTGETCNT:
		if (!(f->items & PFM_COUNTERS))
			return fail(EINVAL);
		if (!arg)
			return fail(EFAULT);
		ns = dev->acc_ns + (dev->on_since ? now() - dev->on_since : 0);
		n = f->mode == 2 ? NCPU : 1;
		for (i = 0; i < n; i++) {
			c[i].pf_cntr0 = (dev->mux.iccsr_disable & 1) ? 0 :
			    ns / (dev->mux.iccsr_pc0 ? 4096 : 65536) / (unsigned long)n;
			c[i].pf_cntr1 = (dev->mux.iccsr_disable & 2) ? 0 :
			    ns / (dev->mux.iccsr_pc1 ? 256 : 4096) / (unsigned long)n;
			c[i].pr_cycle = dev->pr_cycle;
		}
		local.iov_base = c;
		local.iov_len = (size_t)n * sizeof c[0];
		remote.iov_base = *(struct pfcntrs **)arg;
		remote.iov_len = local.iov_len;
		if (process_vm_writev(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)local.iov_len)
			return fail(EFAULT);
		return 0;
	case PCNTGETIPLHIS:
		return (f->items & PFM_IPL) ? 0 : fail(EINVAL);
	case PCNTSETUADDR:
	case PCNTSETKADDR:
	case PCNTSETURANGE:
	case PCNTSETKRANGE:
		return (f->items & PFM_PROFILING) ? 0 : fail(EINVAL);
	default:		/* PCNTCALLER (no kernel profiling), other families, unknown */
		return fail(EINVAL);
	}
}
"#;

/// Builds the examples and the fake device; returns (build dir, fake .so, device path).
fn with_fake(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = build(name);
    let src = dir.join("fake_pfcntr.c");
    let so = dir.join("fake_pfcntr.so");
    fs::write(&src, FAKE_DEVICE).unwrap();
    let out = output(
        Command::new("gcc")
            .args([
                "-std=gnu11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-O2",
                "-shared",
                "-fPIC",
            ])
            .arg("-I")
            .arg(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("include"))
            .arg("-o")
            .arg(&so)
            .arg(&src)
            .arg("-ldl"),
    );
    assert!(out.status.success(), "fake device:\n{}", text(&out.stderr));
    let device = dir.join("pfcntr");
    (dir, so, device)
}

#[test]
fn errno_contract_passes_against_the_model() {
    let (dir, so, device) = with_fake("model-errno");
    let out = output(
        Command::new(dir.join("errno_contract"))
            .env("LD_PRELOAD", &so)
            .env("PFM_DEVICE", &device),
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "errno_contract against the model ({}):\n{stdout}{}",
        out.status,
        text(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    for l in &lines[..lines.len() - 1] {
        assert!(
            l.starts_with("PASS ") || l.starts_with("SKIP ") || l.starts_with("# "),
            "unexpected line {l:?}"
        );
    }
    let passed = lines.iter().filter(|l| l.starts_with("PASS ")).count();
    assert!(passed >= 70, "only {passed} checks ran:\n{stdout}");
    assert_eq!(
        lines.last().copied(),
        Some(format!("{passed} passed, 0 failed").as_str())
    );
    let _ = fs::remove_dir_all(&dir);
}

/// `key=value` pairs of one output line.
fn pairs(line: &str) -> Vec<(&str, &str)> {
    line.split(' ')
        .map(|kv| {
            kv.split_once('=')
                .unwrap_or_else(|| panic!("not key=value: {line:?}"))
        })
        .collect()
}

#[test]
fn ev4count_output_against_the_model() {
    let (dir, so, device) = with_fake("model-ev4count");
    let run = |args: &[&str]| -> Vec<String> {
        let out = output(
            Command::new(dir.join("ev4count"))
                .args(args)
                .env("LD_PRELOAD", &so)
                .env("PFM_DEVICE", &device),
        );
        assert!(
            out.status.success(),
            "ev4count {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout).lines().map(str::to_string).collect()
    };
    // "*": any CPU number.
    let check = |lines: &[String], cpus: &[&str]| {
        assert_eq!(lines.len(), cpus.len() + 1, "{lines:?}");
        for (line, cpu) in lines.iter().zip(cpus) {
            let kv = pairs(line);
            let keys: Vec<&str> = kv.iter().map(|(k, _)| *k).collect();
            assert_eq!(keys, ["cpu", "pf_cntr0", "pf_cntr1", "pr_cycle"], "{line}");
            if *cpu == "*" {
                kv[0].1.parse::<u32>().expect("a CPU number");
            } else {
                assert_eq!(kv[0].1, *cpu, "{line}");
            }
            for (k, v) in &kv[1..] {
                v.parse::<u64>()
                    .unwrap_or_else(|_| panic!("{k} not a number in {line}"));
            }
            assert_ne!(kv[1].1, "0", "counter 0 counted nothing: {line}");
        }
        let last = pairs(lines.last().unwrap());
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].0, "workload_cpu_ns");
        assert!(last[0].1.parse::<u64>().unwrap() > 0);
    };

    let all = run(&["-ms", "20"]);
    check(&all, &["all"]);
    assert!(
        all[0].contains(" pf_cntr1=0 "),
        "counter 1 is off by default"
    );
    check(&run(&["-each", "-ms", "20"]), &["0", "1"]);
    check(&run(&["-one", "-ms", "20"]), &["*"]);
    let with_mux1 = run(&[
        "-select",
        "-mux1",
        "PF_BRANCHMISS",
        "-pc1",
        "256",
        "-ms",
        "20",
    ]);
    check(&with_mux1, &["all"]);
    assert!(!with_mux1[0].contains(" pf_cntr1=0 "), "{with_mux1:?}");
    check(
        &run(&[
            "-ms",
            "1",
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done",
        ]),
        &["all"],
    );

    // An event the host cannot count: the ioctl and errno name, status 1.
    let out = output(
        Command::new(dir.join("ev4count"))
            .args(["-mux0", "PF_PALMODE"])
            .env("LD_PRELOAD", &so)
            .env("PFM_DEVICE", &device),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("PCNTSETMUX: EOPNOTSUPP"),
        "{}",
        text(&out.stderr)
    );
    let _ = fs::remove_dir_all(&dir);
}

/// The kernel-floor measurement behind docs/transport-speed.md ("The
/// kernel's floor") builds warning-free and gives its four rows for this
/// machine's online CPUs.
#[test]
fn the_remote_reads_floor_measurement_builds_and_runs() {
    let dir = scratch("remote_reads");
    let bin = dir.join("remote_reads");
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("crates/pfm-bench/c/remote_reads.c");
    let out = output(
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o"])
            .arg(&bin)
            .arg(&src),
    );
    assert!(out.status.success(), "gcc: {}", text(&out.stderr));
    let out = output(Command::new(&bin).arg("50"));
    assert!(
        out.status.success(),
        "remote_reads (needs CPU-wide perf events: root): {}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    let online = online_cpus();
    for row in ["syscall", "serial", "woken", "spinning"] {
        let line = stdout
            .lines()
            .find(|l| l.contains(&format!(" row={row} ")))
            .unwrap_or_else(|| panic!("no {row} row in:\n{stdout}"));
        assert!(line.contains(&format!("cpus={online} ")), "{line}");
        let p50: u64 = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("p50_ns="))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no p50 in {line}"));
        assert!(p50 > 0, "{line}");
    }
}

fn online_cpus() -> usize {
    let list = fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    list.trim()
        .split(',')
        .map(|range| match range.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}
