//! `cargo xtask vm-selftest`: the VMs end to end. Each check boots a VM;
//! the summary ends with the plain `N passed, N failed` line.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::host::{self, HostError, Tool};
use crate::vm::{Arch, GuestStatus, Output, Vm, VmError};

/// A dynamically linked host program: includes must bring its libraries.
const CUSE_OPEN_C: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	int fd = open("/dev/cuse", O_RDWR);
	if (fd < 0) {
		printf("FAIL: open /dev/cuse: %s\n", strerror(errno));
		return 1;
	}
	printf("OK: opened /dev/cuse\n");
	close(fd);
	return 0;
}
"#;

/// Counts CPU cycles of a loop through perf_event_open(PERF_TYPE_HARDWARE):
/// only a (here emulated) hardware PMU can open it.
const PMU_PROBE_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
	struct perf_event_attr attr;
	volatile uint64_t sum = 0;
	uint64_t cycles = 0, i;
	int fd;

	memset(&attr, 0, sizeof attr);
	attr.size = sizeof attr;
	attr.type = PERF_TYPE_HARDWARE;
	attr.config = PERF_COUNT_HW_CPU_CYCLES;
	attr.disabled = 1;
	attr.exclude_hv = 1;
	fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
	if (fd < 0) {
		printf("FAIL: perf_event_open(PERF_COUNT_HW_CPU_CYCLES): %s\n", strerror(errno));
		return 1;
	}
	ioctl(fd, PERF_EVENT_IOC_RESET, 0);
	ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
	for (i = 0; i < 1000000; i++)
		sum += i;
	ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
	if (read(fd, &cycles, sizeof cycles) != sizeof cycles) {
		printf("FAIL: read: %s\n", strerror(errno));
		return 1;
	}
	printf("cycles=%llu\n", (unsigned long long)cycles);
	return cycles > 0 ? 0 : 1;
}
"#;

/// The tally.
#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    #[error("cannot build the test programs: {0}")]
    Build(String),
    #[error(transparent)]
    Host(#[from] HostError),
}

/// One check's verdict: a note to print after PASS, or why it failed.
type Verdict = Result<String, String>;

struct Checker {
    summary: Summary,
    verbose: bool,
}

impl Checker {
    fn check(&mut self, name: &str, body: impl FnOnce() -> Verdict) {
        let started = Instant::now();
        let verdict = body();
        let seconds = started.elapsed().as_secs_f64();
        match verdict {
            Ok(note) => {
                self.summary.passed += 1;
                println!("PASS  {name:<58} {seconds:5.1} s  {note}");
            }
            Err(why) => {
                self.summary.failed += 1;
                println!("FAIL  {name:<58} {seconds:5.1} s");
                for line in why.lines() {
                    println!("      {line}");
                }
            }
        }
    }
}

/// What a run gave, for failure messages.
fn describe(result: &Result<Output, VmError>) -> String {
    match result {
        Ok(output) => format!(
            "status {:?} (exit {}), output:\n{}",
            output.status,
            output.code(),
            output.stdout
        ),
        Err(e) => format!("error (exit {}): {e}", e.exit_code()),
    }
}

fn expect(result: Result<Output, VmError>, code: i32, wanted: &[&str]) -> Verdict {
    match &result {
        Ok(output) if output.code() == code && wanted.iter().all(|w| output.stdout.contains(w)) => {
            Ok(String::new())
        }
        _ => Err(format!(
            "wanted exit {code} and output containing {wanted:?}; got {}",
            describe(&result)
        )),
    }
}

/// Runs the checks of each architecture of `arches`, printing each verdict.
pub fn run(arches: &[Arch], verbose: bool) -> Result<Summary, SelftestError> {
    let scratch = tempfile::tempdir()
        .map_err(|e| SelftestError::Build(format!("create a temporary directory: {e}")))?;
    let mut checker = Checker {
        summary: Summary::default(),
        verbose,
    };
    for &arch in arches {
        match arch {
            Arch::X86_64 => x86_64_checks(&mut checker, scratch.path())?,
            Arch::Aarch64 => aarch64_checks(&mut checker, scratch.path())?,
        }
    }
    // Not tied to an architecture's guest: fails before anything boots.
    checker.check(
        "a missing include is a setup error (exit 2)",
        || match Vm::new(arches.first().copied().unwrap_or(Arch::X86_64))
            .include("/nonexistent/pfm-vm-selftest")
            .run(["true"])
        {
            Err(e @ VmError::Include { .. }) if e.exit_code() == 2 => Ok(String::new()),
            other => Err(describe(&other)),
        },
    );
    Ok(checker.summary)
}

fn compile(
    compiler: &str,
    source: &str,
    output: &Path,
    extra: &[&str],
) -> Result<(), SelftestError> {
    let source_path = output.with_extension("c");
    fs::write(&source_path, source)
        .map_err(|e| SelftestError::Build(format!("write {}: {e}", source_path.display())))?;
    host::run_captured(
        Command::new(compiler)
            .args(["-O2", "-Wall"])
            .args(extra)
            .arg("-o")
            .arg(output)
            .arg(&source_path),
    )
    .map_err(|e| SelftestError::Build(e.to_string()))?;
    Ok(())
}

fn x86_64_checks(checker: &mut Checker, scratch: &Path) -> Result<(), SelftestError> {
    let arch = Arch::X86_64;
    let verbose = checker.verbose;
    host::ensure_tools(&[Tool::GCC], &crate::cache_dir(), &|m| {
        eprintln!("[xtask vm-selftest] {m}")
    })?;
    let cuse_open = scratch.join("cuse_open");
    compile("gcc", CUSE_OPEN_C, &cuse_open, &[])?;
    let data = scratch.join("data");
    fs::create_dir_all(data.join("sub"))
        .and_then(|()| fs::write(data.join("sub/file.txt"), "hello from a directory\n"))
        .map_err(|e| SelftestError::Build(format!("write {}: {e}", data.display())))?;

    checker.check("x86_64: a dynamic C program opens /dev/cuse", || {
        expect(
            checker_vm(arch, verbose)
                .include(&cuse_open)
                .run(["cuse_open"]),
            0,
            &["OK: opened /dev/cuse"],
        )
    });
    checker.check("x86_64: exit status 3 comes back", || {
        expect(checker_vm(arch, verbose).run(["exit", "3"]), 3, &[])
    });
    checker.check("x86_64: stdout and stderr, exit status 7", || {
        expect(
            checker_vm(arch, verbose).run(["sh", "-c", "echo out-line; echo err-line >&2; exit 7"]),
            7,
            &["out-line", "err-line"],
        )
    });
    checker.check("x86_64: arguments keep their quoting", || {
        expect(
            checker_vm(arch, verbose).run(["printf", "%s|", "a b", "it's", "$HOME"]),
            0,
            &["a b|it's|$HOME|"],
        )
    });
    checker.check("x86_64: a directory include arrives, 2 vCPUs", || {
        expect(
            checker_vm(arch, verbose).include(&data).smp(2).run([
                "sh",
                "-c",
                "echo \"$(cat data/sub/file.txt) $(nproc)\"",
            ]),
            0,
            &["hello from a directory 2"],
        )
    });
    timeout_check(checker, arch, 5);
    Ok(())
}

fn aarch64_checks(checker: &mut Checker, scratch: &Path) -> Result<(), SelftestError> {
    let arch = Arch::Aarch64;
    let verbose = checker.verbose;
    host::ensure_tools(&[Tool::GCC_AARCH64], &crate::cache_dir(), &|m| {
        eprintln!("[xtask vm-selftest] {m}")
    })?;
    let probe = scratch.join("pmu_probe");
    compile("aarch64-linux-gnu-gcc", PMU_PROBE_C, &probe, &["-static"])?;

    checker.check("aarch64: boots, armv8_pmuv3 is a perf PMU", || {
        expect(
            checker_vm(arch, verbose).run(["ls", "/sys/bus/event_source/devices"]),
            0,
            &["armv8_pmuv3"],
        )
    });
    checker.check("aarch64: exit status 3 comes back", || {
        expect(checker_vm(arch, verbose).run(["exit", "3"]), 3, &[])
    });
    checker.check(
        "aarch64: an included static probe counts hardware cycles",
        || {
            let result = checker_vm(arch, verbose).include(&probe).run(["pmu_probe"]);
            let cycles = result
                .as_ref()
                .ok()
                .and_then(|o| o.stdout.lines().find(|l| l.starts_with("cycles=")))
                .map(String::from)
                .unwrap_or_default();
            expect(result, 0, &["cycles="]).map(|_| cycles)
        },
    );
    timeout_check(checker, arch, 8);
    Ok(())
}

fn checker_vm(arch: Arch, verbose: bool) -> Vm {
    Vm::new(arch).verbose(verbose)
}

/// A command that outlives the timeout (a few seconds past the boot).
fn timeout_check(checker: &mut Checker, arch: Arch, seconds: u64) {
    let verbose = checker.verbose;
    checker.check(
        &format!("{arch}: a command outliving --timeout {seconds} gives 124"),
        || match checker_vm(arch, verbose)
            .timeout(Duration::from_secs(seconds))
            .run(["sleep", "600"])
        {
            Ok(output) if output.status == GuestStatus::TimedOut && output.code() == 124 => {
                Ok(String::new())
            }
            other => Err(describe(&other)),
        },
    );
}
