//! Building the workspace for `aarch64-unknown-linux-gnu`.
//!
//! The host's Rust toolchains have only the x86_64 std, and rustup cannot
//! download another, so the build runs in a Debian chroot (made once with
//! mmdebstrap) whose rustc and cargo come with `libstd-rust-dev:arm64`,
//! linking with `aarch64-linux-gnu-gcc`. The toolchain comes from the first
//! of [`CHROOT_RECIPES`] that the mirror can install: trixie-backports, then
//! testing, then unstable. (A suite's amd64 and arm64 builds of a new rustc
//! land hours or days apart, and until both have, the compiler and the
//! arm64 std cannot be installed together from that suite. Plain trixie's
//! rustc 1.85 is too old for the edition-2024 code here.)
//! The sources are synchronised into the chroot (the work tree is never
//! written to), keeping modification times so that cargo's incremental
//! builds work; binaries are static unless asked otherwise, so they run in
//! the busybox guest as they are.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::host::{self, FileLock, HostError, IoContext, Tool};

pub const TARGET: &str = "aarch64-unknown-linux-gnu";

/// The mirror the chroot's packages come from (`PFM_DEBIAN_MIRROR`
/// overrides).
pub const MIRROR_ENV: &str = "PFM_DEBIAN_MIRROR";
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
const SECURITY_MIRROR_ENV: &str = "PFM_DEBIAN_SECURITY_MIRROR";
const DEFAULT_SECURITY_MIRROR: &str = "http://deb.debian.org/debian-security";

/// One way to make the chroot: the suite it is made of, the extra suites
/// its sources list names, and the packages it gets. The `.ready` marker
/// holds [`ChrootRecipe::identity`]; a recipe changed here makes a new chroot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChrootRecipe {
    pub suite: &'static str,
    /// Suites besides `suite` (`security` ones come from the security mirror).
    pub extra_suites: &'static [&'static str],
    pub packages: &'static str,
    /// Accept a Release file past its Valid-Until. Testing's and unstable's
    /// expire a week after they are made, so a mirror that is a cache or a
    /// frozen copy serves them expired, and apt would refuse the suite.
    pub accept_expired_release: bool,
}

/// Tried in order until one installs.
pub const CHROOT_RECIPES: &[ChrootRecipe] = &[
    ChrootRecipe {
        suite: "trixie",
        extra_suites: &["trixie-updates", "trixie-security", "trixie-backports"],
        packages: "rustc/trixie-backports,cargo/trixie-backports,\
            libstd-rust-dev:arm64/trixie-backports,gcc-aarch64-linux-gnu,\
            libc6-dev-arm64-cross,ca-certificates",
        accept_expired_release: false,
    },
    ChrootRecipe::whole("forky"),
    ChrootRecipe::whole("sid"),
];

impl ChrootRecipe {
    /// Everything from `suite` (testing or unstable).
    const fn whole(suite: &'static str) -> ChrootRecipe {
        ChrootRecipe {
            suite,
            extra_suites: &[],
            packages: "rustc,cargo,libstd-rust-dev:arm64,gcc-aarch64-linux-gnu,\
                libc6-dev-arm64-cross,ca-certificates",
            accept_expired_release: true,
        }
    }

    /// What the `.ready` marker of a chroot made this way holds.
    pub fn identity(&self) -> String {
        format!("{} {}", self.suite, self.packages)
    }

    /// The sources list, one `deb` line per suite.
    fn sources(&self, mirror: &str, security: &str) -> Vec<String> {
        let options = if self.accept_expired_release {
            "[check-valid-until=no] "
        } else {
            ""
        };
        std::iter::once(self.suite)
            .chain(self.extra_suites.iter().copied())
            .map(|suite| {
                let from = if suite.ends_with("-security") {
                    security
                } else {
                    mirror
                };
                format!("deb {options}{from} {suite} main")
            })
            .collect()
    }
}

/// Environment passed into the chroot as it is, so that a proxy in front of
/// crates.io works there too.
const PASSED_ENV: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "CARGO_HTTP_PROXY",
    "CARGO_NET_OFFLINE",
    "CARGO_TERM_COLOR",
];

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("building in a chroot needs root")]
    NotRoot,
    #[error("no Cargo.toml in {}", .0.display())]
    NotACargoProject(PathBuf),
    #[error("cargo build for {TARGET} failed ({0})")]
    Cargo(String),
    #[error(
        "no Debian suite could make the aarch64 chroot (set {MIRROR_ENV} to another mirror, or \
         try again once the mirror's amd64 and arm64 rustc agree):\n{}",
        .0.join("\n")
    )]
    NoChroot(Vec<String>),
    #[error(transparent)]
    Host(#[from] HostError),
}

/// Static (`+crt-static`, the default) or dynamically linked binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linkage {
    Static,
    Dynamic,
}

/// One build.
#[derive(Debug, Clone)]
pub struct Build {
    /// The project (its root Cargo.toml; a workspace or a package).
    pub project: PathBuf,
    /// Passed to `cargo build --target aarch64-unknown-linux-gnu`.
    pub cargo_args: Vec<String>,
    pub linkage: Linkage,
    /// The chroot; default [`default_chroot`].
    pub chroot: PathBuf,
}

impl Build {
    /// This repository, static, in the default chroot.
    pub fn new<S: AsRef<str>>(cargo_args: impl IntoIterator<Item = S>) -> Build {
        Build {
            project: crate::repo_root(),
            cargo_args: cargo_args
                .into_iter()
                .map(|a| a.as_ref().to_string())
                .collect(),
            linkage: Linkage::Static,
            chroot: default_chroot(),
        }
    }
}

/// `<cache>/aarch64-chroot`.
pub fn default_chroot() -> PathBuf {
    crate::cache_dir().join("aarch64-chroot")
}

fn progress(message: &str) {
    eprintln!("[xtask build-aarch64] {message}");
}

/// Builds and returns the target directory
/// (`.../aarch64-unknown-linux-gnu/<profile>`), outside the work tree.
pub fn build(build: &Build) -> Result<PathBuf, BuildError> {
    let (target, _) = run_cargo(build, &["build"], false)?;
    Ok(target)
}

/// An executable cargo built: a binary or a test harness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executable {
    /// The package's name (`pfmd`).
    pub package: String,
    /// The target's name (the crate name of a library, a binary's name).
    pub target: String,
    /// The target's kinds (`lib`, `bin`, `test`, ...).
    pub kinds: Vec<String>,
    /// Built as a test harness (`cargo test`), not as the program itself.
    pub test: bool,
    /// Where it is, on the host (inside the chroot's target directory).
    pub path: PathBuf,
}

impl Executable {
    /// The unit-test harness of a package's library (`cargo test --lib`).
    pub fn is_lib_tests(&self) -> bool {
        self.test && self.kinds.iter().any(|k| k == "lib")
    }
}

/// Builds the test harnesses `cargo test --no-run ARGS` would build (e.g.
/// `["--locked", "-p", "pfmd", "--lib"]`) and returns every executable cargo
/// reported, found through `--message-format=json`: their file names carry
/// a hash, and a package's library tests and its binary's tests both start
/// with the package name.
pub fn test_executables(build: &Build) -> Result<Vec<Executable>, BuildError> {
    let (_, messages) = run_cargo(
        build,
        &[
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ],
        true,
    )?;
    let chroot = build.chroot.clone();
    Ok(messages
        .lines()
        .filter_map(|line| executable_of(line, &chroot))
        .collect())
}

/// The executable of one `compiler-artifact` message, if it has one.
fn executable_of(line: &str, chroot: &Path) -> Option<Executable> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" {
        return None;
    }
    let inside = message["executable"].as_str()?;
    // "path+file:///build/src-x/crates/pfmd#0.2.0" (the directory names the
    // package) or "...#pfmd@0.2.0".
    let id = message["package_id"].as_str().unwrap_or_default();
    let fragment = id.rsplit_once('#').map_or(id, |(_, f)| f);
    let package = match fragment.split_once('@') {
        Some((name, _)) => name.to_string(),
        None => id
            .rsplit_once('#')
            .map_or(id, |(path, _)| path)
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string(),
    };
    let target = &message["target"];
    Some(Executable {
        package,
        target: target["name"].as_str().unwrap_or_default().to_string(),
        kinds: target["kind"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k.as_str().map(String::from))
            .collect(),
        test: message["profile"]["test"] == true,
        path: chroot.join(inside.trim_start_matches('/')),
    })
}

/// Runs `cargo SUBCOMMAND --target aarch64-unknown-linux-gnu ARGS` in the
/// chroot; returns the target directory and, when `capture` is set, cargo's
/// stdout (else that goes to our stderr, with cargo's progress).
fn run_cargo(
    build: &Build,
    subcommand: &[&str],
    capture: bool,
) -> Result<(PathBuf, String), BuildError> {
    if !host::is_root() {
        return Err(BuildError::NotRoot);
    }
    let project = fs::canonicalize(&build.project)
        .context(|| format!("resolve {}", build.project.display()))?;
    if !project.join("Cargo.toml").is_file() {
        return Err(BuildError::NotACargoProject(project));
    }
    let chroot = &build.chroot;
    let lock_path = chroot.with_extension("lock");
    let _lock = FileLock::acquire(&lock_path)?;
    ensure_chroot(chroot)?;
    copy_host_certificates(chroot)?;

    // One source copy and target directory per project path, so that two
    // clones do not overwrite each other's sources.
    let label = project_label(&project);
    let source_in_chroot = format!("/build/src-{label}");
    let target_in_chroot = format!("/build/target-{label}");
    sync_sources(
        &project,
        &chroot.join(source_in_chroot.trim_start_matches('/')),
    )?;

    let mut rustflags = String::new();
    if build.linkage == Linkage::Static {
        rustflags.push_str("-C target-feature=+crt-static");
    }
    let mut cargo = Command::new("chroot");
    cargo
        .arg(chroot)
        .args(["/usr/bin/env", "-i", "-C", &source_in_chroot])
        .arg("PATH=/usr/local/bin:/usr/bin:/bin")
        .arg("HOME=/root")
        .arg("CARGO_HOME=/build/cargo-home")
        .arg(format!("CARGO_TARGET_DIR={target_in_chroot}"))
        .arg("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc")
        .arg(format!(
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS={rustflags}"
        ));
    for name in PASSED_ENV {
        if let Some(value) = std::env::var_os(name) {
            let mut pair = std::ffi::OsString::from(format!("{name}="));
            pair.push(value);
            cargo.arg(pair);
        }
    }
    cargo
        .arg("cargo")
        .args(subcommand)
        .args(["--target", TARGET])
        .args(&build.cargo_args)
        .stdin(Stdio::null());
    if capture {
        cargo.stdout(Stdio::piped()).stderr(Stdio::inherit());
    } else {
        // Cargo's progress goes to our stderr; stdout stays for the result.
        cargo.stdout(Stdio::from(
            std::io::stderr()
                .as_fd()
                .try_clone_to_owned()
                .context(|| "dup stderr".into())?,
        ));
    }
    progress(&format!(
        "cargo {} --target {TARGET} {} (in {}{source_in_chroot})",
        subcommand.join(" "),
        build.cargo_args.join(" "),
        chroot.display()
    ));
    let spawn_error = |source| HostError::Spawn {
        program: "chroot".into(),
        source,
    };
    let (status, stdout) = if capture {
        let output = cargo.output().map_err(spawn_error)?;
        (
            output.status,
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    } else {
        (cargo.status().map_err(spawn_error)?, String::new())
    };
    if !status.success() {
        return Err(BuildError::Cargo(status.to_string()));
    }
    let target = chroot
        .join(target_in_chroot.trim_start_matches('/'))
        .join(TARGET)
        .join(profile_dir(&build.cargo_args));
    Ok((target, stdout))
}

/// The profile directory cargo writes to for these arguments.
pub(crate) fn profile_dir(cargo_args: &[String]) -> String {
    let mut profile = "debug".to_string();
    let mut args = cargo_args.iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        }
        if arg == "--release" || arg == "-r" {
            profile = "release".into();
        } else if let Some(name) = arg.strip_prefix("--profile=") {
            profile = name.into();
        } else if arg == "--profile"
            && let Some(name) = args.next()
        {
            profile = name.clone();
        }
    }
    match profile.as_str() {
        "dev" | "test" => "debug".into(),
        "bench" => "release".into(),
        _ => profile,
    }
}

fn project_label(project: &Path) -> String {
    let name = project
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into());
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for b in project.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{name}-{:08x}", hash as u32)
}

/// Creates the chroot unless it is there (`.ready` marks a complete one),
/// from the first of [`CHROOT_RECIPES`] that installs.
pub fn ensure_chroot(chroot: &Path) -> Result<(), BuildError> {
    let ready = chroot.join(".ready");
    if fs::read_to_string(&ready).is_ok_and(|text| {
        CHROOT_RECIPES
            .iter()
            .any(|recipe| text.trim() == recipe.identity())
    }) {
        return Ok(());
    }
    let cache = chroot.parent().unwrap_or(Path::new("."));
    host::ensure_tools(&[Tool::MMDEBSTRAP, Tool::GIT], cache, &progress)?;
    let mirror = std::env::var(MIRROR_ENV).unwrap_or_else(|_| DEFAULT_MIRROR.into());
    let security =
        std::env::var(SECURITY_MIRROR_ENV).unwrap_or_else(|_| DEFAULT_SECURITY_MIRROR.into());
    let mut failures = Vec::new();
    for recipe in CHROOT_RECIPES {
        progress(&format!(
            "creating the Debian {} chroot in {} (once: about a minute, 1.4 GB)",
            recipe.suite,
            chroot.display()
        ));
        let _ = fs::remove_dir_all(chroot);
        let mut mmdebstrap = Command::new("mmdebstrap");
        mmdebstrap
            .args([
                "--variant=apt",
                "--architectures=amd64,arm64",
                &format!("--include={}", recipe.packages),
                recipe.suite,
            ])
            .arg(chroot)
            .args(recipe.sources(&mirror, &security));
        match host::run_logged(&mut mmdebstrap, &cache.join("mmdebstrap.log")) {
            Ok(()) => {
                let build_dir = chroot.join("build");
                fs::create_dir_all(&build_dir)
                    .context(|| format!("create {}", build_dir.display()))?;
                fs::write(&ready, recipe.identity())
                    .context(|| format!("write {}", ready.display()))?;
                return Ok(());
            }
            Err(error) => {
                progress(&format!(
                    "{} cannot make it, trying the next suite: {error}",
                    recipe.suite
                ));
                failures.push(format!("{}: {error}", recipe.suite));
            }
        }
    }
    let _ = fs::remove_dir_all(chroot);
    Err(BuildError::NoChroot(failures))
}

/// The host's own CA certificates (e.g. of a TLS-inspecting proxy in front
/// of crates.io), so cargo in the chroot trusts what cargo on the host does.
fn copy_host_certificates(chroot: &Path) -> Result<(), BuildError> {
    let host_dir = Path::new("/usr/local/share/ca-certificates");
    let Ok(entries) = fs::read_dir(host_dir) else {
        return Ok(());
    };
    let chroot_dir = chroot.join("usr/local/share/ca-certificates");
    let mut changed = false;
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.extension() != Some(OsStr::new("crt")) {
            continue;
        }
        let contents = fs::read(&path).context(|| format!("read {}", path.display()))?;
        let copy = chroot_dir.join(entry.file_name());
        if fs::read(&copy).ok().as_deref() != Some(&contents[..]) {
            fs::create_dir_all(&chroot_dir)
                .context(|| format!("create {}", chroot_dir.display()))?;
            fs::write(&copy, &contents).context(|| format!("write {}", copy.display()))?;
            changed = true;
        }
    }
    if changed {
        host::run_captured(
            Command::new("chroot")
                .arg(chroot)
                .arg("update-ca-certificates"),
        )?;
    }
    Ok(())
}

/// The project's files as cargo should see them: in a git work tree, the
/// tracked files and the untracked ones git does not ignore; else every
/// file outside `target/` and `.git/`.
fn project_files(project: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let listed = Command::new("git")
        .arg("-C")
        .arg(project)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .stderr(Stdio::null())
        .output();
    if let Ok(output) = listed
        && output.status.success()
    {
        return Ok(output
            .stdout
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
            .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
            // Deleted in the work tree but not yet in the index.
            .filter(|name| project.join(name).is_file())
            .collect());
    }
    let mut files = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let entries = fs::read_dir(project.join(&relative))
            .context(|| format!("read {}", project.join(&relative).display()))?;
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            if relative.as_os_str().is_empty() && (name == "target" || name == ".git") {
                continue;
            }
            let path = relative.join(&name);
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(kind) if kind.is_file() => files.push(path),
                _ => {}
            }
        }
    }
    Ok(files)
}

/// Makes `destination` hold exactly the project's files, copying only what
/// changed and keeping modification times (cargo's fingerprints use them).
fn sync_sources(project: &Path, destination: &Path) -> Result<(), BuildError> {
    let files = project_files(project)?;
    let wanted: BTreeSet<PathBuf> = files.iter().cloned().collect();
    for relative in &files {
        let from = project.join(relative);
        let to = destination.join(relative);
        let source_meta = fs::metadata(&from).context(|| format!("stat {}", from.display()))?;
        let unchanged = fs::metadata(&to).is_ok_and(|m| {
            m.len() == source_meta.len() && m.modified().ok() == source_meta.modified().ok()
        });
        if unchanged {
            continue;
        }
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).context(|| format!("create {}", parent.display()))?;
        }
        fs::copy(&from, &to).context(|| format!("copy {}", from.display()))?;
        let modified = source_meta
            .modified()
            .context(|| format!("mtime of {}", from.display()))?;
        fs::File::options()
            .write(true)
            .open(&to)
            .and_then(|f| f.set_modified(modified))
            .context(|| format!("set the mtime of {}", to.display()))?;
    }
    // Files gone from the project must go from the copy: cargo discovers
    // tests, examples and benches by directory.
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let Ok(entries) = fs::read_dir(destination.join(&relative)) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = relative.join(entry.file_name());
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                _ if !wanted.contains(&path) => {
                    let _ = fs::remove_file(entry.path());
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn recipes_list_their_suites_and_differ() {
        let trixie = CHROOT_RECIPES[0].sources("http://m", "http://s");
        assert_eq!(
            trixie,
            [
                "deb http://m trixie main",
                "deb http://m trixie-updates main",
                "deb http://s trixie-security main",
                "deb http://m trixie-backports main",
            ]
        );
        assert_eq!(
            CHROOT_RECIPES[1].sources("http://m", "http://s"),
            ["deb [check-valid-until=no] http://m forky main"]
        );
        let identities: BTreeSet<String> = CHROOT_RECIPES.iter().map(|r| r.identity()).collect();
        assert_eq!(identities.len(), CHROOT_RECIPES.len());
    }

    #[test]
    fn profiles() {
        assert_eq!(profile_dir(&args(&["--bins"])), "debug");
        assert_eq!(profile_dir(&args(&["--release", "--bins"])), "release");
        assert_eq!(profile_dir(&args(&["-r"])), "release");
        assert_eq!(profile_dir(&args(&["--profile", "dev"])), "debug");
        assert_eq!(profile_dir(&args(&["--profile=fast"])), "fast");
        assert_eq!(profile_dir(&args(&["--", "--release"])), "debug");
    }

    #[test]
    fn sync_copies_changes_and_removes_stale_files() {
        let project = tempfile::tempdir().unwrap();
        let copy = tempfile::tempdir().unwrap();
        fs::write(project.path().join("Cargo.toml"), "[package]\n").unwrap();
        fs::create_dir_all(project.path().join("target")).unwrap();
        fs::write(project.path().join("target/junk"), "x").unwrap();
        fs::create_dir_all(copy.path().join("tests")).unwrap();
        fs::write(copy.path().join("tests/old.rs"), "").unwrap();
        sync_sources(project.path(), copy.path()).unwrap();
        assert!(copy.path().join("Cargo.toml").is_file());
        assert!(!copy.path().join("target/junk").exists());
        assert!(!copy.path().join("tests/old.rs").exists());
        let mtime = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
        assert_eq!(
            mtime(&project.path().join("Cargo.toml")),
            mtime(&copy.path().join("Cargo.toml"))
        );
    }

    #[test]
    fn executables_from_cargo_messages() {
        let chroot = Path::new("/cache/aarch64-chroot");
        let lib_tests = r#"{"reason":"compiler-artifact","package_id":"path+file:///build/src-x/crates/pfmd#0.2.0","target":{"kind":["lib"],"crate_types":["lib"],"name":"pfmd"},"profile":{"test":true},"executable":"/build/target-x/aarch64-unknown-linux-gnu/debug/deps/pfmd-0123abcd"}"#;
        let exe = executable_of(lib_tests, chroot).unwrap();
        assert_eq!(exe.package, "pfmd");
        assert_eq!(exe.target, "pfmd");
        assert!(exe.is_lib_tests());
        assert_eq!(
            exe.path,
            Path::new(
                "/cache/aarch64-chroot/build/target-x/aarch64-unknown-linux-gnu/debug/deps/pfmd-0123abcd"
            )
        );
        let bin_tests = r#"{"reason":"compiler-artifact","package_id":"path+file:///build/src-x/crates/pfmd#pfmd@0.2.0","target":{"kind":["bin"],"name":"pfmd"},"profile":{"test":true},"executable":"/t/pfmd-99"}"#;
        let exe = executable_of(bin_tests, chroot).unwrap();
        assert_eq!(exe.package, "pfmd");
        assert!(exe.test && !exe.is_lib_tests());
        let library = r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["lib"],"name":"pfm_abi"},"profile":{"test":false},"executable":null}"#;
        assert_eq!(executable_of(library, chroot), None);
        assert_eq!(
            executable_of(r#"{"reason":"build-finished","success":true}"#, chroot),
            None
        );
        assert_eq!(executable_of("not json", chroot), None);
    }
}
