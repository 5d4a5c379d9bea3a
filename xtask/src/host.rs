//! The host side of the tasks: running commands, root, file locks, and apt
//! (installing the tools a task needs, downloading Debian packages for other
//! architectures or suites through a private apt state that leaves the
//! system's own apt configuration alone).

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Something on the host that a task needed and could not have.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot run {program}: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("`{command}` failed ({status}){}", tail_block(.output_tail))]
    Command {
        command: String,
        status: String,
        output_tail: String,
    },
    #[error(
        "missing host tools: {tools} (Debian packages: {packages}); not root, so not installing them: \
         run as root once, or `apt-get install --no-install-recommends {packages}`"
    )]
    NotRoot { tools: String, packages: String },
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{0}")]
    Other(String),
}

fn tail_block(tail: &str) -> String {
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!(":\n{}", tail.trim_end())
    }
}

/// Attaches what was being done to an I/O error.
pub(crate) trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HostError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, HostError> {
        self.map_err(|source| HostError::Io {
            what: what(),
            source,
        })
    }
}

/// True when this process runs as root (needed to install packages and to
/// chroot). `/proc/self` belongs to the process's effective user.
pub fn is_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The path of `program` on `$PATH`, or in the sbin directories that a
/// non-login root shell may lack.
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| {
            fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

/// A command line for messages.
pub(crate) fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `command` to completion and returns its stdout; a failure carries
/// the tail of its output.
pub fn run_captured(command: &mut Command) -> Result<String, HostError> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|source| HostError::Spawn {
            program: command.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(HostError::Command {
            command: describe(command),
            status: output.status.to_string(),
            output_tail: tail(&format!("{stdout}{stderr}"), 20),
        });
    }
    Ok(stdout)
}

/// Runs `command` with its output appended to `log` (apt is chatty); a
/// failure carries the tail of the log.
pub fn run_logged(command: &mut Command, log: &Path) -> Result<(), HostError> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .context(|| format!("open {}", log.display()))?;
    let start = file.metadata().map(|m| m.len()).unwrap_or(0);
    writeln!(file, "$ {}", describe(command)).context(|| format!("write {}", log.display()))?;
    let stderr = file
        .try_clone()
        .context(|| format!("dup {}", log.display()))?;
    let status = command
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(stderr)
        .status()
        .map_err(|source| HostError::Spawn {
            program: command.get_program().to_string_lossy().into_owned(),
            source,
        })?;
    if status.success() {
        return Ok(());
    }
    let written = fs::read(log).unwrap_or_default();
    let ours = written.get(start as usize..).unwrap_or_default();
    Err(HostError::Command {
        command: describe(command),
        status: format!("{status}; log: {}", log.display()),
        output_tail: tail(&String::from_utf8_lossy(ours), 20),
    })
}

/// An exclusive lock on a file, held until dropped. Setup steps that fill
/// the cache take it, so parallel runs (cargo runs tests in parallel) wait
/// for one another instead of building the same thing twice.
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl FileLock {
    /// Blocks until the lock on `path` (created if missing) is ours.
    pub fn acquire(path: &Path) -> Result<FileLock, HostError> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).context(|| format!("create {}", dir.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .context(|| format!("open {}", path.display()))?;
        file.lock().context(|| format!("lock {}", path.display()))?;
        Ok(FileLock { _file: file })
    }
}

/// The host's Debian codename (`VERSION_CODENAME` of /etc/os-release).
pub fn codename() -> Result<String, HostError> {
    let text = fs::read_to_string("/etc/os-release").context(|| "read /etc/os-release".into())?;
    text.lines()
        .find_map(|line| line.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| HostError::Other("no VERSION_CODENAME in /etc/os-release".into()))
}

/// A tool a task runs, and the Debian packages that provide it.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    pub program: &'static str,
    pub packages: &'static [&'static str],
}

impl Tool {
    pub const QEMU_X86_64: Tool = Tool {
        program: "qemu-system-x86_64",
        packages: &["qemu-system-x86"],
    };
    pub const QEMU_AARCH64: Tool = Tool {
        program: "qemu-system-aarch64",
        packages: &["qemu-system-arm"],
    };
    pub const XZ: Tool = Tool {
        program: "xz",
        packages: &["xz-utils"],
    };
    pub const DPKG_DEB: Tool = Tool {
        program: "dpkg-deb",
        packages: &["dpkg"],
    };
    pub const APT_GET: Tool = Tool {
        program: "apt-get",
        packages: &["apt"],
    };
    pub const MMDEBSTRAP: Tool = Tool {
        program: "mmdebstrap",
        packages: &["mmdebstrap"],
    };
    pub const GIT: Tool = Tool {
        program: "git",
        packages: &["git"],
    };
    pub const GCC: Tool = Tool {
        program: "gcc",
        packages: &["gcc", "libc6-dev"],
    };
    /// The cross compiler for the selftest's PMU probe; without the
    /// recommended libc headers it cannot build a hosted program.
    pub const GCC_AARCH64: Tool = Tool {
        program: "aarch64-linux-gnu-gcc",
        packages: &["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"],
    };

    fn is_qemu(&self) -> bool {
        self.packages.iter().any(|p| p.starts_with("qemu-"))
    }
}

/// The tools of `tools` that are not on this host.
pub fn missing_tools(tools: &[Tool]) -> Vec<Tool> {
    tools
        .iter()
        .filter(|t| find_program(t.program).is_none())
        .copied()
        .collect()
}

/// Makes sure every tool of `tools` is installed: as root, installs the
/// missing ones with apt (`--no-install-recommends --no-remove`, so nothing
/// else on the machine changes); otherwise fails naming them.
///
/// `state` is a directory for the apt log and private apt state.
pub fn ensure_tools(
    tools: &[Tool],
    state: &Path,
    progress: &dyn Fn(&str),
) -> Result<(), HostError> {
    let missing = missing_tools(tools);
    if missing.is_empty() {
        return Ok(());
    }
    let names = |filter: &dyn Fn(&Tool) -> bool| {
        missing
            .iter()
            .filter(|t| filter(t))
            .flat_map(|t| t.packages.iter().copied())
            .collect::<Vec<_>>()
    };
    if !is_root() {
        return Err(HostError::NotRoot {
            tools: missing
                .iter()
                .map(|t| t.program)
                .collect::<Vec<_>>()
                .join(" "),
            packages: names(&|_| true).join(" "),
        });
    }
    fs::create_dir_all(state).context(|| format!("create {}", state.display()))?;
    let system = Apt::system(state);
    let plain = names(&|t| !t.is_qemu());
    let qemu = names(&|t| t.is_qemu());
    if !plain.is_empty() {
        progress(&format!("installing {}", plain.join(" ")));
        system.update()?;
        system.install(&plain, None)?;
    }
    if !qemu.is_empty() {
        if qemu_from_backports() {
            // The installed qemu-utils / qemu-system-common come from
            // <codename>-backports. The release's qemu-system-* depends on
            // the release's qemu-system-common, so apt would downgrade or
            // remove the backports packages (and --no-remove makes it
            // refuse). Take qemu-system-* from backports too, through a
            // private apt state, without touching the system's sources.
            let suite = format!("{}-backports", codename()?);
            progress(&format!("installing {} from {suite}", qemu.join(" ")));
            let arch = native_architecture()?;
            let apt = Apt::private(&state.join(format!("apt-{arch}")), &arch, state)?;
            apt.install(&qemu, Some(&suite))?;
            // The downloaded .debs are installed now; keep the cache small.
            run_logged(apt.command("apt-get").arg("clean"), &apt.log)?;
        } else {
            progress(&format!("installing {}", qemu.join(" ")));
            system.update()?;
            system.install(&qemu, None)?;
        }
    }
    let still = missing_tools(tools);
    if let Some(tool) = still.first() {
        return Err(HostError::Other(format!(
            "{} is still missing after installing {}",
            tool.program,
            tool.packages.join(" ")
        )));
    }
    Ok(())
}

/// Whether an installed qemu package comes from backports (its version has
/// `~bpo`), so more qemu must come from there too.
fn qemu_from_backports() -> bool {
    Command::new("dpkg-query")
        .args([
            "-W",
            "-f",
            "${Version}\n",
            "qemu-utils",
            "qemu-system-common",
        ])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("bpo"))
}

/// dpkg's architecture (`amd64` here).
pub fn native_architecture() -> Result<String, HostError> {
    Ok(
        run_captured(Command::new("dpkg").arg("--print-architecture"))?
            .trim()
            .to_string(),
    )
}

/// apt-get / apt-cache with either the system's configuration or a private
/// one (own sources, lists, archives and architecture).
#[derive(Debug, Clone)]
pub struct Apt {
    options: Vec<String>,
    log: PathBuf,
    /// Set for a private state: the marker that its lists were fetched.
    private_dir: Option<PathBuf>,
}

impl Apt {
    /// The system's apt; output goes to `<state>/apt.log`.
    pub fn system(state: &Path) -> Apt {
        let mut options = vec!["-o".to_string(), "DPkg::Lock::Timeout=600".to_string()];
        if is_root() {
            // apt drops to the _apt user for downloads, which cannot write
            // into our cache directories.
            options.extend(["-o".into(), "APT::Sandbox::User=root".into()]);
        }
        Apt {
            options,
            log: state.join("apt.log"),
            private_dir: None,
        }
    }

    /// A private apt state in `dir` for architecture `arch`: the system's
    /// Debian sources (those of the host's codename) with
    /// `<codename>-backports` added. Fetches its lists the first time.
    pub fn private(dir: &Path, arch: &str, state: &Path) -> Result<Apt, HostError> {
        let sources = dir.join("sources.list.d");
        if !sources.is_dir() {
            write_private_sources(&codename()?, &sources)?;
        }
        for sub in ["lists/partial", "archives/partial"] {
            let d = dir.join(sub);
            fs::create_dir_all(&d).context(|| format!("create {}", d.display()))?;
        }
        let mut apt = Apt::system(state);
        let dir_opt = |key: &str, sub: &str| format!("{key}={}", dir.join(sub).display());
        for option in [
            "Dir::Etc::sourcelist=-".to_string(),
            dir_opt("Dir::Etc::sourceparts", "sources.list.d"),
            dir_opt("Dir::State::lists", "lists"),
            dir_opt("Dir::Cache::archives", "archives"),
            "Dir::Cache::pkgcache=".into(),
            "Dir::Cache::srcpkgcache=".into(),
            format!("APT::Architecture={arch}"),
            format!("APT::Architectures::={arch}"),
        ] {
            apt.options.extend(["-o".into(), option]);
        }
        apt.private_dir = Some(dir.to_path_buf());
        if !dir.join(".updated").exists() {
            apt.update()?;
        }
        Ok(apt)
    }

    /// True for a private state (its lists are ours to refresh).
    pub fn is_private(&self) -> bool {
        self.private_dir.is_some()
    }

    fn command(&self, tool: &str) -> Command {
        let mut command = Command::new(tool);
        command
            .env("DEBIAN_FRONTEND", "noninteractive")
            .arg("-q")
            .args(&self.options);
        command
    }

    /// `apt-get update` (for a private state: and remember that it ran).
    pub fn update(&self) -> Result<(), HostError> {
        run_logged(self.command("apt-get").arg("update"), &self.log)?;
        if let Some(dir) = &self.private_dir {
            fs::write(dir.join(".updated"), b"").context(|| format!("write {}", dir.display()))?;
        }
        Ok(())
    }

    /// Installs `packages` (from `suite` if given), changing nothing else.
    pub fn install(&self, packages: &[&str], suite: Option<&str>) -> Result<(), HostError> {
        let mut command = self.command("apt-get");
        command.args(["install", "-y", "--no-install-recommends", "--no-remove"]);
        if let Some(suite) = suite {
            command.args(["-t", suite]);
        }
        run_logged(command.args(packages), &self.log)
    }

    /// The package that meta-package `meta` depends on whose name starts
    /// with `prefix` (`linux-image-cloud-amd64` → `linux-image-6.1.0-37-cloud-amd64`).
    pub fn versioned_dependency(
        &self,
        meta: &str,
        prefix: &str,
        suite: Option<&str>,
    ) -> Result<Option<String>, HostError> {
        let mut command = self.command("apt-cache");
        if let Some(suite) = suite {
            command.args(["-t", suite]);
        }
        let text = run_captured(command.args(["depends", meta]))?;
        Ok(first_dependency(&text, prefix))
    }

    /// Downloads `package`'s .deb into `dir` and returns its path.
    pub fn download(&self, package: &str, dir: &Path) -> Result<PathBuf, HostError> {
        fs::create_dir_all(dir).context(|| format!("create {}", dir.display()))?;
        run_logged(
            self.command("apt-get")
                .current_dir(dir)
                .args(["download", package]),
            &self.log,
        )?;
        find_deb(dir, package)?.ok_or_else(|| {
            HostError::Other(format!(
                "apt-get download {package} left no {package}_*.deb in {}",
                dir.display()
            ))
        })
    }
}

/// The first `Depends:` of `apt-cache depends` output naming a package that
/// starts with `prefix`.
pub(crate) fn first_dependency(apt_cache_depends: &str, prefix: &str) -> Option<String> {
    apt_cache_depends.lines().find_map(|line| {
        let name = line
            .trim()
            .trim_start_matches('|')
            .strip_prefix("Depends:")?
            .trim();
        name.starts_with(prefix).then(|| name.to_string())
    })
}

/// The newest `<package>_*.deb` in `dir`, if any.
pub fn find_deb(dir: &Path, package: &str) -> Result<Option<PathBuf>, HostError> {
    let prefix = format!("{package}_");
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .context(|| format!("read {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .collect();
    // Newest last: names differ only in their version, and a newer download
    // also has a newer modification time.
    found.sort_by_key(|p| fs::metadata(p).and_then(|m| m.modified()).ok());
    Ok(found.pop())
}

/// Writes the private apt sources: the system's Debian entries of
/// `codename` (suites `codename` and `codename-*`), each with
/// `codename-backports` added, architecture restrictions dropped (the
/// private state chooses its own). Third-party sources are left out.
fn write_private_sources(codename: &str, out: &Path) -> Result<(), HostError> {
    let staging = out.with_extension("new");
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(&staging).context(|| format!("create {}", staging.display()))?;
    let mut inputs = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut names: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
        names.sort();
        inputs.extend(names);
    }
    let mut any_backports = false;
    for (index, input) in inputs.iter().enumerate() {
        let Ok(text) = fs::read_to_string(input) else {
            continue;
        };
        let name = input.file_name().and_then(OsStr::to_str).unwrap_or("");
        let rewritten = if name.ends_with(".sources") {
            private_deb822_sources(&text, codename)
        } else if name.ends_with(".list") {
            private_one_line_sources(&text, codename)
        } else {
            continue; // e.g. *.disabled, *.save
        };
        let backports = format!("{codename}-backports");
        any_backports |= rewritten.contains(&backports);
        let file = staging.join(format!("{index:02}-{name}"));
        fs::write(&file, rewritten).context(|| format!("write {}", file.display()))?;
    }
    if !any_backports {
        return Err(HostError::Other(format!(
            "found no Debian '{codename}' entry in /etc/apt/sources.list{{,.d}} to derive {codename}-backports from"
        )));
    }
    let _ = fs::remove_dir_all(out);
    fs::rename(&staging, out).context(|| format!("rename to {}", out.display()))
}

fn is_codename_suite(suite: &str, codename: &str) -> bool {
    suite == codename
        || suite
            .strip_prefix(codename)
            .is_some_and(|rest| rest.starts_with('-'))
}

/// The deb822 stanzas of `text` whose suites all belong to `codename`,
/// with `<codename>-backports` added where `<codename>` is listed.
pub(crate) fn private_deb822_sources(text: &str, codename: &str) -> String {
    let backports = format!("{codename}-backports");
    let mut out = String::new();
    for stanza in text.split("\n\n") {
        let mut lines = Vec::new();
        let mut ours = false;
        for line in stanza.lines() {
            if line.trim_start().starts_with('#') || line.starts_with("Architectures:") {
                continue;
            }
            if let Some(value) = line.strip_prefix("Suites:") {
                let suites: Vec<&str> = value.split_whitespace().collect();
                ours = !suites.is_empty() && suites.iter().all(|s| is_codename_suite(s, codename));
                if suites.contains(&codename) && !suites.contains(&backports.as_str()) {
                    lines.push(format!("{line} {backports}"));
                    continue;
                }
            }
            lines.push(line.to_string());
        }
        if ours && !lines.iter().any(|l| l.trim() == "Enabled: no") {
            out.push_str(&lines.join("\n"));
            out.push_str("\n\n");
        }
    }
    out
}

/// The one-line `deb` entries of `text` for `codename`, each
/// `<codename>` entry followed by the same for `<codename>-backports`.
pub(crate) fn private_one_line_sources(text: &str, codename: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() != Some(&"deb") {
            continue;
        }
        // deb [ options ] uri suite components...
        let mut index = 1;
        let mut options = Vec::new();
        if words.get(1).is_some_and(|w| w.starts_with('[')) {
            while let Some(word) = words.get(index) {
                index += 1;
                let bare = word.trim_start_matches('[').trim_end_matches(']');
                if !bare.is_empty() && !bare.starts_with("arch=") {
                    options.push(bare);
                }
                if word.ends_with(']') {
                    break;
                }
            }
        }
        let (Some(uri), Some(suite)) = (words.get(index), words.get(index + 1)) else {
            continue;
        };
        if !is_codename_suite(suite, codename) {
            continue;
        }
        let rest = words[index + 2..].join(" ");
        let options = if options.is_empty() {
            String::new()
        } else {
            format!(" [ {} ]", options.join(" "))
        };
        out.push_str(&format!("deb{options} {uri} {suite} {rest}\n"));
        if *suite == codename {
            out.push_str(&format!("deb{options} {uri} {codename}-backports {rest}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deb822_adds_backports_and_drops_foreign_stanzas() {
        let text = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\
                    Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
                    Types: deb\nURIs: https://deb.nodesource.com/node_20.x\nSuites: nodistro\n\
                    Components: main\nArchitectures: amd64\n";
        let out = private_deb822_sources(text, "bookworm");
        assert!(out.contains("Suites: bookworm bookworm-updates bookworm-backports\n"));
        assert!(!out.contains("nodesource"));
    }

    #[test]
    fn deb822_drops_architectures_and_keeps_security() {
        let text = "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n\
                    Architectures: amd64\nComponents: main\n";
        let out = private_deb822_sources(text, "bookworm");
        assert!(out.contains("Suites: bookworm-security\n"), "{out}");
        assert!(!out.contains("Architectures"));
        assert!(!out.contains("bookworm-backports"));
    }

    #[test]
    fn one_line_entries() {
        let text = "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://deb.debian.org/debian bookworm main\n\
                    deb http://deb.debian.org/debian-security bookworm-security main\n\
                    deb https://packages.example.com/apt cloud-sdk-bookworm main\n\
                    deb-src http://deb.debian.org/debian bookworm main\n";
        let out = private_one_line_sources(text, "bookworm");
        assert_eq!(
            out,
            "deb [ signed-by=/k.gpg ] http://deb.debian.org/debian bookworm main\n\
             deb [ signed-by=/k.gpg ] http://deb.debian.org/debian bookworm-backports main\n\
             deb http://deb.debian.org/debian-security bookworm-security main\n"
        );
    }

    #[test]
    fn versioned_kernel_package() {
        let text = "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-37-cloud-amd64\n";
        assert_eq!(
            first_dependency(text, "linux-image-").as_deref(),
            Some("linux-image-6.1.0-37-cloud-amd64")
        );
        assert_eq!(first_dependency("x\n", "linux-image-"), None);
    }
}
