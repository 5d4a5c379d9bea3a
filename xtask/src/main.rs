//! `cargo xtask`: see xtask/README.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use xtask::aarch64::{self, Build, Linkage};
use xtask::vm::{Arch, EXIT_SETUP, Echo, Vm};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "pfmd's development tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Boot a throwaway VM, run CMD in /work there, exit with its status
    /// (124: timeout, 125: no status, 2: setup error).
    Vm {
        /// x86_64 (/dev/cuse) or aarch64 (emulated ARMv8 PMU).
        #[arg(long, default_value = "x86_64")]
        arch: Arch,
        /// Copy a file or directory to /work/<name> (repeatable).
        #[arg(long = "include", value_name = "PATH")]
        includes: Vec<PathBuf>,
        /// Kill the VM after SECS seconds (exit 124).
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        timeout: u64,
        /// vCPUs (default: 2 on x86_64, 1 on aarch64).
        #[arg(long, value_name = "N")]
        smp: Option<u32>,
        /// Guest RAM, e.g. 512M, 2G (default: 512M on x86_64, 1G on aarch64).
        #[arg(long, value_name = "SIZE")]
        mem: Option<String>,
        /// qemu -icount SPEC, or "off" (default: shift=0 on aarch64, off on x86_64).
        #[arg(long, value_name = "SPEC")]
        icount: Option<String>,
        /// Kernel log on the console, harness steps on stderr.
        #[arg(short, long)]
        verbose: bool,
        /// The guest command (run by busybox sh; shell syntax needs sh -c).
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Build for aarch64-unknown-linux-gnu in a cached Debian chroot (static
    /// by default) and print the target directory. Arguments go to cargo
    /// build, e.g. `--workspace --bins --release`.
    #[command(name = "build-aarch64")]
    BuildAarch64 {
        /// Link dynamically instead of with +crt-static.
        #[arg(long)]
        dynamic: bool,
        /// The project to build (default: this repository).
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CARGO_ARGS"
        )]
        cargo_args: Vec<String>,
    },
    /// Check both VMs end to end (boots, exit statuses, includes, /dev/cuse,
    /// the aarch64 PMU).
    #[command(name = "vm-selftest")]
    VmSelftest {
        /// Only this architecture.
        #[arg(long)]
        arch: Option<Arch>,
        #[arg(short, long)]
        verbose: bool,
    },
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(EXIT_SETUP as u8))
}

fn main() -> ExitCode {
    match Cli::parse().task {
        Task::Vm {
            arch,
            includes,
            timeout,
            smp,
            mem,
            icount,
            verbose,
            command,
        } => {
            let mut vm = Vm::new(arch)
                .includes(includes)
                .timeout(Duration::from_secs(timeout))
                .verbose(verbose)
                .echo(Echo::Stdout);
            if let Some(smp) = smp {
                vm = vm.smp(smp);
            }
            if let Some(mem) = mem {
                vm = vm.memory(&mem);
            }
            if let Some(icount) = icount {
                vm = vm.icount(Some(&icount));
            }
            match vm.run(&command) {
                Ok(output) => exit_code(output.code()),
                Err(e) => {
                    eprintln!("[xtask vm {arch}] ERROR: {e}");
                    exit_code(e.exit_code())
                }
            }
        }
        Task::BuildAarch64 {
            dynamic,
            project,
            cargo_args,
        } => {
            let mut build = Build::new(&cargo_args);
            if let Some(project) = project {
                build.project = project;
            }
            if dynamic {
                build.linkage = Linkage::Dynamic;
            }
            match aarch64::build(&build) {
                Ok(target_dir) => {
                    println!("{}", target_dir.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("[xtask build-aarch64] ERROR: {e}");
                    exit_code(EXIT_SETUP)
                }
            }
        }
        Task::VmSelftest { arch, verbose } => {
            let arches = match arch {
                Some(arch) => vec![arch],
                None => vec![Arch::X86_64, Arch::Aarch64],
            };
            match xtask::selftest::run(&arches, verbose) {
                Ok(summary) => {
                    println!("{} passed, {} failed", summary.passed, summary.failed);
                    if summary.failed == 0 {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("[xtask vm-selftest] ERROR: {e}");
                    exit_code(EXIT_SETUP)
                }
            }
        }
    }
}
