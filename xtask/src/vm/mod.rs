//! Throwaway qemu VMs that run one command.
//!
//! ```no_run
//! use std::time::Duration;
//! use xtask::vm::{Arch, Vm};
//!
//! let output = Vm::new(Arch::X86_64)
//!     .include(env!("CARGO_MANIFEST_DIR"))
//!     .timeout(Duration::from_secs(120))
//!     .run(["sh", "-c", "ls -l /dev/cuse"])?;
//! assert_eq!(output.code(), 0, "{}", output.stdout);
//! # Ok::<(), xtask::vm::VmError>(())
//! ```
//!
//! The guest boots a stock Debian kernel (x86_64: `linux-image-cloud-amd64`
//! of the host's apt sources, with `fuse.ko` and `cuse.ko` loaded, so
//! `/dev/cuse` exists; aarch64: `linux-image-cloud-arm64` of
//! `<codename>-backports`, under `-M virt -cpu max`, whose emulated ARMv8
//! PMU the kernel exposes as the perf PMU `armv8_pmuv3`) with a busybox
//! initramfs. Includes are copied to `/work/<name>`; the command runs there
//! as root under busybox `sh`, its stdout and stderr both go to the serial
//! console, which comes back as [`Output::stdout`].

pub mod cpio;
pub mod elf;
mod guest;
mod overlay;
mod setup;

use std::fmt;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use overlay::AARCH64_SYSROOT_ENV;
pub use setup::KernelSource;

use crate::host::{self, HostError, IoContext, Tool};

/// Exit status of a run that timed out (as timeout(1)).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit status of a run whose guest stopped without reporting a status
/// (kernel panic, init killed, qemu died).
pub const EXIT_NO_STATUS: i32 = 125;
/// Exit status of a run that could not be set up (bad option, missing
/// include, package or kernel download failure, module load failure).
pub const EXIT_SETUP: i32 = 2;

/// The guest's architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// `/dev/cuse`; no hardware PMU.
    X86_64,
    /// An emulated ARMv8 PMU (`armv8_pmuv3`); exact counts under `-icount`.
    Aarch64,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Debian's name of the architecture.
    pub fn debian_arch(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    fn qemu(self) -> Tool {
        match self {
            Arch::X86_64 => Tool::QEMU_X86_64,
            Arch::Aarch64 => Tool::QEMU_AARCH64,
        }
    }

    fn kernel_flavour(self) -> &'static str {
        match self {
            Arch::X86_64 => "cloud-amd64",
            Arch::Aarch64 => "cloud-arm64",
        }
    }

    fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => object::elf::EM_X86_64.0,
            Arch::Aarch64 => object::elf::EM_AARCH64.0,
        }
    }

    fn console(self) -> &'static str {
        match self {
            Arch::X86_64 => "ttyS0",
            Arch::Aarch64 => "ttyAMA0",
        }
    }

    fn default_memory(self) -> &'static str {
        match self {
            Arch::X86_64 => "512M",
            Arch::Aarch64 => "1G",
        }
    }

    fn default_smp(self) -> u32 {
        match self {
            Arch::X86_64 => 2,
            // With icount, counts are exact per CPU only on one vCPU.
            Arch::Aarch64 => 1,
        }
    }

    /// aarch64: 1 instruction = 1 ns = 1 cycle, so INST_RETIRED and
    /// CPU_CYCLES both count, exactly and deterministically.
    fn default_icount(self) -> Option<&'static str> {
        match self {
            Arch::X86_64 => None,
            Arch::Aarch64 => Some("shift=0"),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Arch {
    type Err = VmError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "x86_64" | "x86-64" | "amd64" => Ok(Arch::X86_64),
            "aarch64" | "arm64" => Ok(Arch::Aarch64),
            other => Err(VmError::Invalid(format!(
                "unknown architecture {other:?} (x86_64 or aarch64)"
            ))),
        }
    }
}

/// Why a run could not happen. Every variant is a setup error (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("{0}")]
    Invalid(String),
    #[error("--include {}: {source}", .path.display())]
    Include { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("the guest could not be set up: {0}")]
    GuestSetup(String),
}

impl VmError {
    /// The exit status the command-line tool gives this error.
    pub fn exit_code(&self) -> i32 {
        EXIT_SETUP
    }

    /// True when the host cannot run the VM (missing tools and not root,
    /// download or install failures, a guest that cannot load its modules);
    /// false when the request itself is wrong (bad option, missing include).
    /// Tests skip (or, under CI, fail) on the first kind.
    pub fn is_environment(&self) -> bool {
        matches!(self, VmError::Host(_) | VmError::GuestSetup(_))
    }
}

/// How a guest command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestStatus {
    /// It exited with this status.
    Exited(i32),
    /// The VM was killed after the timeout.
    TimedOut,
    /// The VM stopped without reporting a status.
    NoStatus,
}

impl GuestStatus {
    /// The status as an exit code: the command's, 124 or 125.
    pub fn code(self) -> i32 {
        match self {
            GuestStatus::Exited(code) => code,
            GuestStatus::TimedOut => EXIT_TIMEOUT,
            GuestStatus::NoStatus => EXIT_NO_STATUS,
        }
    }
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: GuestStatus,
    /// The console: the command's stdout and stderr, interleaved as
    /// printed, without carriage returns and the harness's markers.
    pub stdout: String,
    /// From qemu's start to its end (setup excluded).
    pub boot_to_exit: Duration,
    /// The guest's kernel release (`uname -r`).
    pub kernel_release: String,
}

impl Output {
    pub fn code(&self) -> i32 {
        self.status.code()
    }

    pub fn success(&self) -> bool {
        self.status == GuestStatus::Exited(0)
    }
}

/// Where the guest's console lines go as they arrive (they are collected in
/// [`Output::stdout`] either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Echo {
    Off,
    Stdout,
    Stderr,
}

/// One VM run's configuration. Build with the methods, then [`Vm::run`].
#[derive(Debug, Clone)]
pub struct Vm {
    arch: Arch,
    includes: Vec<PathBuf>,
    timeout: Duration,
    smp: u32,
    memory: String,
    icount: Option<String>,
    verbose: bool,
    echo: Echo,
    cache: PathBuf,
    kernel: KernelSource,
    modules: Vec<String>,
}

impl Vm {
    /// Defaults: 300 s timeout; x86_64: 2 vCPUs, 512M, no icount, the
    /// system's kernel; aarch64: 1 vCPU, 1G, `-icount shift=0`, the kernel
    /// of `<codename>-backports`; modules fuse and cuse; cache
    /// [`crate::cache_dir`].
    pub fn new(arch: Arch) -> Vm {
        let kernel = match arch {
            Arch::X86_64 => KernelSource::System,
            Arch::Aarch64 => match host::codename() {
                Ok(codename) => KernelSource::Suite(format!("{codename}-backports")),
                // Reported when the run asks apt for it.
                Err(_) => KernelSource::System,
            },
        };
        Vm {
            arch,
            includes: Vec::new(),
            timeout: Duration::from_secs(300),
            smp: arch.default_smp(),
            memory: arch.default_memory().to_string(),
            icount: arch.default_icount().map(String::from),
            verbose: false,
            echo: Echo::Off,
            cache: crate::cache_dir(),
            kernel,
            modules: vec!["fuse".into(), "cuse".into()],
        }
    }

    /// Copies a file or directory (recursively, symlinks followed) to
    /// `/work/<its name>`, with the shared libraries of the dynamic ELF
    /// programs in it.
    pub fn include(mut self, path: impl AsRef<Path>) -> Vm {
        self.includes.push(path.as_ref().to_path_buf());
        self
    }

    pub fn includes<P: AsRef<Path>>(mut self, paths: impl IntoIterator<Item = P>) -> Vm {
        self.includes
            .extend(paths.into_iter().map(|p| p.as_ref().to_path_buf()));
        self
    }

    /// Kills the VM after this long (from qemu's start); the status is then
    /// [`GuestStatus::TimedOut`].
    pub fn timeout(mut self, timeout: Duration) -> Vm {
        self.timeout = timeout;
        self
    }

    pub fn smp(mut self, vcpus: u32) -> Vm {
        self.smp = vcpus;
        self
    }

    /// Guest RAM in qemu's syntax (`512M`, `2G`); the initramfs, includes
    /// and all, lives in it.
    pub fn memory(mut self, size: &str) -> Vm {
        self.memory = size.to_string();
        self
    }

    /// qemu's `-icount` (None, or "off": no icount).
    pub fn icount(mut self, spec: Option<&str>) -> Vm {
        self.icount = spec.filter(|s| *s != "off").map(String::from);
        self
    }

    /// The full kernel log on the console and the harness's steps on stderr.
    pub fn verbose(mut self, verbose: bool) -> Vm {
        self.verbose = verbose;
        self
    }

    pub fn echo(mut self, echo: Echo) -> Vm {
        self.echo = echo;
        self
    }

    pub fn cache_dir(mut self, dir: impl AsRef<Path>) -> Vm {
        self.cache = dir.as_ref().to_path_buf();
        self
    }

    pub fn kernel(mut self, source: KernelSource) -> Vm {
        self.kernel = source;
        self
    }

    /// Modules to load in the guest (with their dependencies; built-in ones
    /// are skipped). Default: fuse and cuse.
    pub fn modules<S: AsRef<str>>(mut self, modules: impl IntoIterator<Item = S>) -> Vm {
        self.modules = modules
            .into_iter()
            .map(|m| m.as_ref().to_string())
            .collect();
        self
    }

    fn progress(&self, message: &str) {
        eprintln!("[xtask vm {}] {message}", self.arch);
    }

    fn detail(&self, message: &str) {
        if self.verbose {
            self.progress(message);
        }
    }

    fn validate(&self, command: &[String]) -> Result<(), VmError> {
        if command.is_empty() {
            return Err(VmError::Invalid("no guest command given".into()));
        }
        if self.timeout.is_zero() {
            return Err(VmError::Invalid("the timeout must be positive".into()));
        }
        if self.smp == 0 {
            return Err(VmError::Invalid("--smp must be at least 1".into()));
        }
        if !valid_memory(&self.memory) {
            return Err(VmError::Invalid(format!(
                "--mem {:?} must look like 512M or 2G",
                self.memory
            )));
        }
        let mut names = std::collections::BTreeSet::new();
        for include in &self.includes {
            fs::metadata(include).map_err(|source| VmError::Include {
                path: include.clone(),
                source,
            })?;
            let name = overlay::include_name(include)?;
            if !names.insert(name.clone()) {
                return Err(VmError::Invalid(format!(
                    "--include: two paths named {name:?} (both would be /work/{name})"
                )));
            }
        }
        Ok(())
    }

    /// Boots the VM, runs `command` (words run by busybox `sh`, so builtins
    /// work and shell syntax needs `sh -c`) and returns its output and
    /// status. Setup problems are errors; a timeout or a dead guest is an
    /// [`Output`] with that status.
    /// The guest's architecture.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    pub fn run<S: AsRef<str>>(
        &self,
        command: impl IntoIterator<Item = S>,
    ) -> Result<Output, VmError> {
        let command: Vec<String> = command
            .into_iter()
            .map(|w| w.as_ref().to_string())
            .collect();
        self.validate(&command)?;
        let started = Instant::now();
        let progress = |m: &str| self.progress(m);
        let prepared = setup::prepare(
            self.arch,
            &self.cache,
            &self.kernel,
            &self.modules,
            &progress,
        )?;
        let run_dir = RunDir::create(&self.cache.join(self.arch.name()).join("runs"))?;
        let initrd = run_dir.path.join("initrd.cpio");
        overlay::write_initrd(
            self.arch,
            &prepared.base,
            &self.includes,
            &command,
            &initrd,
            &progress,
        )?;
        self.detail(&format!(
            "setup {:.2} s, initramfs {} KiB, kernel {}",
            started.elapsed().as_secs_f64(),
            fs::metadata(&initrd).map(|m| m.len() / 1024).unwrap_or(0),
            prepared.kernel_release
        ));
        let (status, stdout, boot_to_exit) = self.boot(&prepared.kernel_image, &initrd)?;
        self.detail(&format!(
            "status {}, boot to exit {:.2} s, total {:.2} s",
            status.code(),
            boot_to_exit.as_secs_f64(),
            started.elapsed().as_secs_f64()
        ));
        Ok(Output {
            status,
            stdout,
            boot_to_exit,
            kernel_release: prepared.kernel_release,
        })
    }

    fn qemu_command(&self, kernel: &Path, initrd: &Path) -> Command {
        let mut qemu = Command::new(self.arch.qemu().program);
        match self.arch {
            Arch::X86_64 if self.icount.is_none() && kvm_usable() => {
                qemu.args(["-accel", "kvm", "-cpu", "host"]);
            }
            Arch::X86_64 => {
                qemu.args(["-accel", "tcg", "-cpu", "max"]);
            }
            Arch::Aarch64 => {
                qemu.args(["-M", "virt", "-cpu", "max", "-accel", "tcg"]);
            }
        }
        if let Some(icount) = &self.icount {
            qemu.args(["-icount", icount]);
        }
        let console = self.arch.console();
        let append = if self.verbose {
            format!("console={console} loglevel=7 panic=-1")
        } else {
            format!("console={console} quiet loglevel=3 panic=-1")
        };
        qemu.args(["-smp", &self.smp.to_string(), "-m", &self.memory])
            .args([
                "-nodefaults",
                "-display",
                "none",
                "-no-reboot",
                "-serial",
                "stdio",
                "-monitor",
                "none",
            ])
            .arg("-kernel")
            .arg(kernel)
            .arg("-initrd")
            .arg(initrd)
            .args(["-append", &append])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        qemu
    }

    /// Runs qemu until the guest reports a status and powers off, or the
    /// timeout.
    fn boot(
        &self,
        kernel: &Path,
        initrd: &Path,
    ) -> Result<(GuestStatus, String, Duration), VmError> {
        let mut command = self.qemu_command(kernel, initrd);
        self.detail(&format!("$ {}", host::describe(&command)));
        let started = Instant::now();
        let deadline = started + self.timeout;
        let mut qemu = command.spawn().map_err(|source| HostError::Spawn {
            program: self.arch.qemu().program.into(),
            source,
        })?;
        let stdout = qemu.stdout.take().expect("stdout is piped");
        let mut stderr = qemu.stderr.take().expect("stderr is piped");
        let (lines_tx, lines) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match stdout.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = String::from_utf8_lossy(&line);
                        let text = text.trim_end_matches('\n').trim_end_matches('\r');
                        if lines_tx.send(text.to_string()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });

        let mut collected = String::new();
        let mut status = None;
        let mut setup_error = None;
        let mut timed_out = false;
        // Once the status is in, the guest powers off at once; give it a
        // little time, then stop waiting.
        let mut stop_by = deadline;
        loop {
            let now = Instant::now();
            if now >= stop_by {
                timed_out = status.is_none() && setup_error.is_none();
                kill(&mut qemu);
                break;
            }
            match lines.recv_timeout(stop_by - now) {
                Ok(line) => {
                    let finished = status.is_some() || setup_error.is_some();
                    if finished {
                        if self.verbose {
                            self.echo_line(&line);
                        }
                        continue;
                    }
                    match guest::classify(&line) {
                        guest::ConsoleLine::Output(text) => {
                            self.echo_line(text);
                            collected.push_str(text);
                            collected.push('\n');
                        }
                        guest::ConsoleLine::Exit { before, status: s } => {
                            if !before.is_empty() {
                                self.echo_line(before);
                                collected.push_str(before);
                                collected.push('\n');
                            }
                            status = Some(s);
                            stop_by = stop_by.min(Instant::now() + Duration::from_secs(30));
                        }
                        guest::ConsoleLine::SetupError(reason) => {
                            setup_error = Some(reason.to_string());
                            stop_by = stop_by.min(Instant::now() + Duration::from_secs(30));
                        }
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let exit = qemu.wait();
        let elapsed = started.elapsed();
        let _ = reader.join();
        let qemu_errors = errors.join().unwrap_or_default();
        if let Some(reason) = setup_error {
            return Err(VmError::GuestSetup(reason));
        }
        let status = match status {
            Some(code) => GuestStatus::Exited(code),
            None if timed_out => {
                self.progress(&format!("timed out after {} s", self.timeout.as_secs_f64()));
                GuestStatus::TimedOut
            }
            None => {
                self.progress(&format!(
                    "the VM stopped without reporting an exit status (qemu: {}){}",
                    exit.map(|s| s.to_string())
                        .unwrap_or_else(|e| e.to_string()),
                    if qemu_errors.trim().is_empty() {
                        "; rerun with --verbose for the kernel log".to_string()
                    } else {
                        format!(":\n{}", qemu_errors.trim_end())
                    }
                ));
                GuestStatus::NoStatus
            }
        };
        if self.verbose && !qemu_errors.trim().is_empty() {
            self.progress(&format!("qemu stderr:\n{}", qemu_errors.trim_end()));
        }
        Ok((status, collected, elapsed))
    }

    fn echo_line(&self, line: &str) {
        match self.echo {
            Echo::Off => {}
            Echo::Stdout => println!("{line}"),
            Echo::Stderr => eprintln!("{line}"),
        }
    }
}

fn kill(child: &mut Child) {
    // Already gone is fine.
    let _ = child.kill();
}

fn valid_memory(size: &str) -> bool {
    let digits = size.trim_end_matches(['K', 'M', 'G', 'T']);
    size.len() - digits.len() <= 1
        && !digits.is_empty()
        && !digits.starts_with('0')
        && digits.bytes().all(|b| b.is_ascii_digit())
}

/// KVM only where it really works: a /dev/kvm that opens is not enough in
/// nested setups whose CPU lacks vmx/svm.
fn kvm_usable() -> bool {
    let opens = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    opens
        && fs::read_to_string("/proc/cpuinfo").is_ok_and(|cpuinfo| {
            cpuinfo
                .lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
        })
}

/// A per-run scratch directory, `run-<pid>-<n>`, removed when dropped;
/// directories of processes that died without cleaning up are removed by
/// the next run.
struct RunDir {
    path: PathBuf,
}

impl RunDir {
    fn create(parent: &Path) -> Result<RunDir, VmError> {
        fs::create_dir_all(parent).context(|| format!("create {}", parent.display()))?;
        if let Ok(entries) = fs::read_dir(parent) {
            for entry in entries.filter_map(Result::ok) {
                let name = entry.file_name().to_string_lossy().into_owned();
                let owner = name
                    .strip_prefix("run-")
                    .and_then(|rest| rest.split('-').next())
                    .and_then(|pid| pid.parse::<u32>().ok());
                if let Some(pid) = owner
                    && !Path::new(&format!("/proc/{pid}")).exists()
                {
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("run-{}-", std::process::id()))
            .tempdir_in(parent)
            .context(|| format!("create a directory in {}", parent.display()))?;
        Ok(RunDir { path: dir.keep() })
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Why a VM cannot run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unavailable {}

/// Whether a VM of `arch` can run here, without changing anything: qemu
/// present (or installable: root with apt), Debian's tools present. A run
/// can still fail later (e.g. no network for the first kernel download).
pub fn available(arch: Arch) -> Result<(), Unavailable> {
    if !cfg!(target_os = "linux") {
        return Err(Unavailable("the VMs need a Linux host".into()));
    }
    for tool in [Tool::DPKG_DEB, Tool::APT_GET] {
        if host::find_program(tool.program).is_none() {
            return Err(Unavailable(format!(
                "no {} here: the VM harness needs a Debian host (it downloads Debian's kernel and busybox)",
                tool.program
            )));
        }
    }
    let missing = host::missing_tools(&[arch.qemu(), Tool::XZ]);
    if !missing.is_empty() && !host::is_root() {
        let packages: Vec<&str> = missing
            .iter()
            .flat_map(|t| t.packages.iter().copied())
            .collect();
        return Err(Unavailable(format!(
            "{} missing and not root to install it (apt-get install {})",
            missing
                .iter()
                .map(|t| t.program)
                .collect::<Vec<_>>()
                .join(", "),
            packages.join(" ")
        )));
    }
    if arch == Arch::Aarch64
        && let Err(e) = host::codename()
    {
        return Err(Unavailable(e.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes() {
        for ok in ["512M", "1G", "2048", "64K"] {
            assert!(valid_memory(ok), "{ok}");
        }
        for bad in ["", "M", "0M", "1.5G", "512MM", "-1G"] {
            assert!(!valid_memory(bad), "{bad}");
        }
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let vm = Vm::new(Arch::X86_64);
        assert!(matches!(
            vm.clone().run(Vec::<String>::new()),
            Err(VmError::Invalid(_))
        ));
        assert!(matches!(
            vm.clone().smp(0).run(["true"]),
            Err(VmError::Invalid(_))
        ));
        assert!(matches!(
            vm.clone().memory("lots").run(["true"]),
            Err(VmError::Invalid(_))
        ));
        assert!(matches!(
            vm.clone().timeout(Duration::ZERO).run(["true"]),
            Err(VmError::Invalid(_))
        ));
        assert!(matches!(
            vm.clone().include("/nonexistent/x").run(["true"]),
            Err(VmError::Include { .. })
        ));
        assert!(matches!(
            vm.include("/bin/sh").include("/usr/bin/sh").run(["true"]),
            Err(VmError::Invalid(_))
        ));
        assert!("sparc".parse::<Arch>().is_err());
        assert_eq!("arm64".parse::<Arch>().unwrap(), Arch::Aarch64);
    }
}
