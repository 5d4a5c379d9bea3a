//! The two install routes of docs/install.md, taken as a user takes them.
//!
//! - `script_install_puts_everything_in_place`: `scripts/install --prefix
//!   <tmp>` (building with cargo into this test's target directory): every
//!   file in its place, `sbin/pfmd --version`, examples/c/ev4count.c built
//!   with plain `cc -I<prefix>/include`, the installed man pages lint clean
//!   (`scripts/lint-man`), the shipped configuration examples change nothing
//!   until edited and parse once uncommented; then a staged install
//!   (`--destdir --etc`), run again (nothing rewritten) and `--uninstall`.
//! - `deb_installs_into_a_clean_chroot`: `scripts/build-deb`, the package
//!   installed with dpkg into a minimal Debian bookworm chroot (mmdebstrap
//!   `--variant=minbase` plus gcc, made once in `target/install-chroot/base`;
//!   each run works in an overlay of it, or a copy where overlayfs is not
//!   available): `pfmd --version`, `cc ev4count.c` against
//!   /usr/include/sys/pfcntr.h, `dpkg -L`, the pfm group, the unit neither
//!   enabled nor started; `dpkg -r` leaves only the conffiles, `dpkg -P`
//!   nothing.
//!
//! Both need root (chroot, apt for missing tools). As root they install what
//! is missing: mandoc/man-db/groff and mmdebstrap with apt, cargo-deb
//! (pinned, as in scripts/build-deb) with `cargo install` into
//! `target/install-chroot/tools`. A prerequisite that cannot be had prints
//! `SKIPPED: <test>: <why>`, or fails the test under `CI=true`
//! (`xtask::ci::skip_or_fail`).
//!
//! Cold, the release build, cargo-deb and the chroot take several minutes;
//! warm, each test takes seconds.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Instant, SystemTime};

use xtask::ci::skip_or_fail;
use xtask::host::{self, FileLock, Tool};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The cargo-deb the package is made with (scripts/build-deb says the same).
const CARGO_DEB_VERSION: &str = "3.8.0";
/// The chroot: Debian's minimal base and a C compiler.
const SUITE: &str = "bookworm";
const CHROOT_INCLUDE: &str = "gcc,libc6-dev";
const MODELS: [&str; 7] = ["ev4", "ev45", "ev5", "ev56", "pca56", "ev6", "ev67"];

const MANDOC: Tool = Tool {
    program: "mandoc",
    packages: &["mandoc"],
};
const MAN: Tool = Tool {
    program: "man",
    packages: &["man-db"],
};
const GROFF: Tool = Tool {
    program: "groff",
    packages: &["groff"],
};

fn repo() -> PathBuf {
    Path::new(REPO)
        .canonicalize()
        .expect("the repository exists")
}

/// The target directory this test binary was built into
/// (target/<profile>/deps/<test>): the release build and the chroot cache go
/// there too.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .expect("a test binary lives in target/<profile>/deps")
        .to_path_buf()
}

fn cache() -> PathBuf {
    target_dir().join("install-chroot")
}

/// `PATH` with cargo's directory (the cargo running this test) and the
/// cached cargo-deb first, for the scripts.
fn path_env() -> std::ffi::OsString {
    let mut dirs = vec![cache().join("tools/bin")];
    if let Some(dir) = std::env::var_os("CARGO")
        .map(PathBuf::from)
        .and_then(|c| c.parent().map(Path::to_path_buf))
    {
        dirs.push(dir);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    dirs.extend(std::env::split_paths(&path));
    std::env::join_paths(dirs).expect("PATH entries without ':'")
}

/// Runs `command`; panics with its output unless it succeeds.
fn run(command: &mut Command) -> Output {
    let output = output_of(command);
    assert!(
        output.status.success(),
        "`{}` failed ({}):\nstdout:\n{}\nstderr:\n{}",
        describe(command),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn output_of(command: &mut Command) -> Output {
    command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", describe(command)))
}

fn stdout(command: &mut Command) -> String {
    String::from_utf8(run(command).stdout).expect("UTF-8 output")
}

fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn script(name: &str) -> Command {
    let mut command = Command::new(repo().join("scripts").join(name));
    command.env("PATH", path_env()).current_dir(repo());
    command
}

/// Root, and the listed tools (installed with apt when missing). On failure
/// the test is skipped (or fails under CI) and this returns false.
fn prerequisites(test: &str, tools: &[Tool]) -> bool {
    if !host::is_root() {
        skip_or_fail(
            test,
            "needs root (chroot, dpkg, apt for missing tools); run the tests as root",
        );
        return false;
    }
    let _lock = FileLock::acquire(&cache().join(".tools.lock")).expect("lock the tool cache");
    if let Err(e) = host::ensure_tools(tools, &cache(), &|m| eprintln!("install test: {m}")) {
        skip_or_fail(test, e);
        return false;
    }
    true
}

/// Runs `f`, printing how long it took (the cold and warm figures of
/// docs/install.md come from these lines).
fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let value = f();
    eprintln!(
        "install test: {what}: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    value
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn mtime(path: &Path) -> SystemTime {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The manual pages of the repository: (file name, section).
fn man_pages() -> Vec<(String, String)> {
    let mut pages: Vec<(String, String)> = fs::read_dir(repo().join("man"))
        .expect("man/")
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let section = name.rsplit_once('.')?.1.to_string();
            (section.len() == 1 && section.as_bytes()[0].is_ascii_digit())
                .then_some((name, section))
        })
        .collect();
    pages.sort();
    assert!(pages.len() >= 4, "man/ has the four pages: {pages:?}");
    pages
}

/// Every file an install puts under the prefix, relative to it, with its mode.
fn expected_prefix_files() -> Vec<(String, u32)> {
    let mut files = vec![
        ("sbin/pfmd".to_string(), 0o755),
        ("bin/pfmstat".into(), 0o755),
        ("bin/pfmprof".into(), 0o755),
        ("include/sys/pfcntr.h".into(), 0o644),
        ("lib/systemd/system/pfmd.service".into(), 0o644),
        ("lib/udev/rules.d/99-pfcntr.rules".into(), 0o644),
        ("share/doc/pfmd/README.md".into(), 0o644),
        ("share/doc/pfmd/examples/events.map".into(), 0o644),
        ("share/doc/pfmd/examples/pfmd.default".into(), 0o644),
        ("share/doc/pfmd/examples/c/ev4count.c".into(), 0o644),
        ("share/doc/pfmd/examples/c/Makefile".into(), 0o644),
    ];
    for (name, section) in man_pages() {
        files.push((format!("share/man/man{section}/{name}"), 0o644));
    }
    for model in MODELS {
        files.push((
            format!("share/doc/pfmd/examples/costs/{model}.costs"),
            0o644,
        ));
    }
    files
}

/// Lines of a shipped configuration example that are not comments or blank.
fn active_lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// The events map example: all comments, pfmd reads it exactly as no map,
/// and its commented bindings parse once uncommented.
fn check_event_map_example(pfmd: &Path, map: &Path, scratch: &Path) {
    let text = fs::read_to_string(map).expect("the events.map example");
    assert_eq!(
        active_lines(&text),
        Vec::<&str>::new(),
        "{}: every line must be a comment (pfmd reads /etc/pfm/events.map)",
        map.display()
    );
    let print = |map: &Path| {
        stdout(
            Command::new(pfmd)
                .args(["--model", "ev4", "--print-event-map", "--event-map"])
                .arg(map),
        )
    };
    assert_eq!(
        print(map),
        print(Path::new("/dev/null")),
        "the shipped events.map changes what pfmd resolves"
    );
    let bindings: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| l.starts_with("PF") && l.contains(" type="))
        .collect();
    assert!(
        !bindings.is_empty(),
        "the events.map example shows bindings in the --print-event-map format"
    );
    let uncommented = scratch.join("events.map.uncommented");
    fs::write(&uncommented, bindings.join("\n") + "\n").expect("write the uncommented map");
    run(Command::new(pfmd)
        .args(["--model", "ev4", "--print-event-map", "--event-map"])
        .arg(&uncommented));
}

/// The commented site cost table: pfmstat reads it as no table; its rows
/// parse once uncommented. Each model's example table parses for its model.
fn check_cost_examples(pfmstat: &Path, site: &Path, examples: &Path, scratch: &Path) {
    let text = fs::read_to_string(site).expect("the site costs example");
    assert_eq!(
        active_lines(&text),
        Vec::<&str>::new(),
        "{}: every line must be a comment (pfmstat reads /etc/pfm/costs)",
        site.display()
    );
    let table = |site: &Path, extra: &[&Path]| {
        let mut command = Command::new(pfmstat);
        command
            .env("PFM_COSTS", site)
            .args(["-t", "--model", "ev4"]);
        for file in extra {
            command.arg("-c").arg(file);
        }
        stdout(&mut command)
    };
    assert_eq!(
        table(site, &[]),
        table(Path::new("/dev/null"), &[]),
        "the shipped /etc/pfm/costs changes pfmstat's table"
    );
    let rows: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter(|l| l.starts_with("PF"))
        .collect();
    assert!(
        rows.len() > 5,
        "the site table shows the ev4 rows: {rows:?}"
    );
    let uncommented = scratch.join("costs.uncommented");
    fs::write(&uncommented, rows.join("\n") + "\n").expect("write the uncommented costs");
    let overridden = table(Path::new("/dev/null"), &[&uncommented]);
    assert_eq!(
        overridden.matches("# override: ").count(),
        rows.len(),
        "every uncommented row overrides its event:\n{overridden}"
    );
    for model in MODELS {
        let file = examples.join(format!("{model}.costs"));
        run(Command::new(pfmstat)
            .env("PFM_COSTS", "/dev/null")
            .args(["-t", "--model", model, "-c"])
            .arg(&file));
    }
    // Every model's table in one site file, as install.md suggests: each
    // model takes its own rows and passes over the others'.
    let all = scratch.join("costs.all");
    let tables: Vec<String> = MODELS
        .iter()
        .map(|m| fs::read_to_string(examples.join(format!("{m}.costs"))).unwrap())
        .collect();
    fs::write(&all, tables.concat()).expect("write the combined costs");
    for (model, own) in MODELS.iter().zip(&tables) {
        let printed = stdout(
            Command::new(pfmstat)
                .env("PFM_COSTS", &all)
                .args(["-t", "--model", model]),
        );
        assert_eq!(
            printed.matches("# override: ").count(),
            active_lines(own).len(),
            "{model} takes its own rows of the combined file:\n{printed}"
        );
    }
}

#[test]
fn script_install_puts_everything_in_place() {
    let test = "script_install_puts_everything_in_place";
    if !prerequisites(test, &[Tool::GCC, MANDOC, MAN, GROFF]) {
        return;
    }
    let start = Instant::now();
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let tmp_path = tmp.path().canonicalize().expect("the temporary directory");
    let prefix = tmp_path.join("prefix");
    let target = target_dir();

    // 1. Into a prefix, building as needed.
    timed("scripts/install --prefix (with the release build)", || {
        run(script("install")
            .arg("--prefix")
            .arg(&prefix)
            .arg("--target-dir")
            .arg(&target))
    });
    for (file, want) in expected_prefix_files() {
        let path = prefix.join(&file);
        assert!(path.is_file(), "{file} is not installed");
        assert_eq!(mode(&path), want, "{file}: mode {:o}", mode(&path));
    }
    assert_eq!(
        fs::read(prefix.join("include/sys/pfcntr.h")).unwrap(),
        fs::read(repo().join("include/sys/pfcntr.h")).unwrap(),
        "the installed header is the repository's"
    );
    let version = stdout(Command::new(prefix.join("sbin/pfmd")).arg("--version"));
    assert_eq!(version.trim(), format!("pfmd {VERSION}"));

    // The unit runs the installed binary and names the installed docs.
    let unit = fs::read_to_string(prefix.join("lib/systemd/system/pfmd.service")).unwrap();
    let exec = format!("ExecStart={}/sbin/pfmd $PFMD_OPTIONS", prefix.display());
    assert!(unit.lines().any(|l| l == exec), "no `{exec}` in:\n{unit}");
    assert!(
        !unit.contains("/usr/sbin") && !unit.contains("/usr/share/doc"),
        "packaged paths left in the unit:\n{unit}"
    );

    // Plain cc against the installed header, as a user would.
    let example = prefix.join("share/doc/pfmd/examples/c/ev4count.c");
    run(Command::new("cc")
        .arg(format!("-I{}", prefix.join("include").display()))
        .arg("-o")
        .arg(tmp_path.join("ev4count"))
        .arg(&example)
        .current_dir(&tmp_path));
    // And every example with the installed Makefile, into a directory of
    // the user's: it names the installed header.
    let built = tmp_path.join("examples-built");
    run(Command::new("make")
        .arg("-C")
        .arg(prefix.join("share/doc/pfmd/examples/c"))
        .arg(format!("BUILD={}", built.display())));
    for program in ["ev4count", "errno_contract", "ioctl_bench"] {
        assert!(built.join(program).exists(), "make built no {program}");
    }

    // The installed pages, as man finds them, lint clean.
    let pages: Vec<PathBuf> = man_pages()
        .into_iter()
        .map(|(name, section)| prefix.join(format!("share/man/man{section}/{name}")))
        .collect();
    run(script("lint-man").args(&pages));

    check_event_map_example(
        &prefix.join("sbin/pfmd"),
        &prefix.join("share/doc/pfmd/examples/events.map"),
        &tmp_path,
    );

    // 2. Staged for a package (--destdir) with the /etc examples.
    let stage = tmp_path.join("stage");
    let staged = |extra: &[&str]| {
        run(script("install")
            .args(["--prefix", "/usr/local", "--etc", "--no-build"])
            .arg("--destdir")
            .arg(&stage)
            .arg("--target-dir")
            .arg(&target)
            .args(extra))
    };
    staged(&[]);
    let staged_prefix = stage.join("usr/local");
    for (file, want) in expected_prefix_files() {
        let path = staged_prefix.join(&file);
        assert!(path.is_file(), "staged: {file} is not installed");
        assert_eq!(mode(&path), want, "staged: {file}: mode {:o}", mode(&path));
    }
    let unit = fs::read_to_string(staged_prefix.join("lib/systemd/system/pfmd.service")).unwrap();
    assert!(
        unit.lines()
            .any(|l| l == "ExecStart=/usr/local/sbin/pfmd $PFMD_OPTIONS"),
        "a staged unit names the prefix, not the stage:\n{unit}"
    );
    for file in ["etc/pfm/events.map", "etc/pfm/costs", "etc/default/pfmd"] {
        assert!(stage.join(file).is_file(), "--etc: {file} is not installed");
    }
    check_event_map_example(
        &staged_prefix.join("sbin/pfmd"),
        &stage.join("etc/pfm/events.map"),
        &tmp_path,
    );
    check_cost_examples(
        &staged_prefix.join("bin/pfmstat"),
        &stage.join("etc/pfm/costs"),
        &staged_prefix.join("share/doc/pfmd/examples/costs"),
        &tmp_path,
    );

    // 3. Again: nothing rewritten, an edited /etc file kept.
    let pfmd = staged_prefix.join("sbin/pfmd");
    let before = mtime(&pfmd);
    let edited = "PFMD_OPTIONS=\"--model ev6\"\n";
    fs::write(stage.join("etc/default/pfmd"), edited).unwrap();
    staged(&[]);
    assert_eq!(mtime(&pfmd), before, "a second install rewrote sbin/pfmd");
    assert_eq!(
        fs::read_to_string(stage.join("etc/default/pfmd")).unwrap(),
        edited,
        "a second install replaced an edited /etc/default/pfmd"
    );

    // 4. Uninstall: every installed file goes, /etc stays.
    staged(&["--uninstall"]);
    let left: Vec<PathBuf> = walk(&stage)
        .into_iter()
        .filter(|p| !p.starts_with(stage.join("etc")))
        .collect();
    assert!(left.is_empty(), "--uninstall left {left:?}");
    assert!(stage.join("etc/pfm/events.map").is_file());
    run(script("install")
        .arg("--uninstall")
        .arg("--prefix")
        .arg(&prefix));
    let left = walk(&prefix);
    assert!(left.is_empty(), "--uninstall left {left:?}");

    eprintln!(
        "install test: {test}: {:.1} s in all",
        start.elapsed().as_secs_f64()
    );
}

/// The regular files and symbolic links under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => out.extend(walk(&path)),
            Ok(_) => out.push(path),
            Err(_) => {}
        }
    }
    out
}

/// cargo-deb of the pinned version: the one on PATH, else one installed
/// into the cache. Err: why it cannot be had.
fn ensure_cargo_deb() -> Result<(), String> {
    let _lock = FileLock::acquire(&cache().join(".tools.lock")).map_err(|e| e.to_string())?;
    let installed = Command::new("cargo")
        .env("PATH", path_env())
        .args(["deb", "--version"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if installed.as_deref() == Some(&format!("cargo-deb {CARGO_DEB_VERSION}")) {
        return Ok(());
    }
    eprintln!(
        "install test: installing cargo-deb {CARGO_DEB_VERSION} into {} (once, a few minutes)",
        cache().join("tools").display()
    );
    let output = Command::new("cargo")
        .env("PATH", path_env())
        .args(["install", "--locked", "--quiet", "cargo-deb", "--version"])
        .arg(CARGO_DEB_VERSION)
        .arg("--root")
        .arg(cache().join("tools"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run cargo install: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo install cargo-deb {CARGO_DEB_VERSION} failed (no network to crates.io?): {}",
            host_tail(&output.stderr)
        ));
    }
    Ok(())
}

fn host_tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The cached chroot, made once: Err says why it cannot be made.
fn ensure_base_chroot() -> Result<PathBuf, String> {
    let base = cache().join("base");
    let key = format!("{SUITE} minbase {CHROOT_INCLUDE}");
    let ready = base.join(".ready");
    let _lock = FileLock::acquire(&cache().join(".chroot.lock")).map_err(|e| e.to_string())?;
    if fs::read_to_string(&ready).is_ok_and(|k| k.trim() == key) {
        return Ok(base);
    }
    eprintln!(
        "install test: creating the {SUITE} chroot in {} (once, about a minute)",
        base.display()
    );
    let partial = cache().join("base.partial");
    let _ = fs::remove_dir_all(&partial);
    let _ = fs::remove_dir_all(&base);
    let mirror = std::env::var(xtask::aarch64::MIRROR_ENV)
        .unwrap_or_else(|_| "http://deb.debian.org/debian".into());
    let log = cache().join("mmdebstrap.log");
    let mut command = Command::new("mmdebstrap");
    command
        .args([
            "--variant=minbase",
            &format!("--include={CHROOT_INCLUDE}"),
            SUITE,
        ])
        .arg(&partial)
        .arg(&mirror);
    host::run_logged(&mut command, &log)
        .map_err(|e| format!("mmdebstrap failed (no network to {mirror}?): {e}"))?;
    fs::write(partial.join(".ready"), &key).map_err(|e| e.to_string())?;
    fs::rename(&partial, &base).map_err(|e| e.to_string())?;
    Ok(base)
}

/// A throwaway root over the cached chroot: an overlay (its upper directory
/// holds exactly what the run changed), or a copy where overlayfs cannot be
/// mounted. Unmounted and removed when dropped.
struct RunRoot {
    dir: PathBuf,
    root: PathBuf,
    upper: Option<PathBuf>,
}

impl RunRoot {
    fn new(base: &Path) -> RunRoot {
        let runs = cache().join("runs");
        // Runs a killed test left behind.
        if let Ok(entries) = fs::read_dir(&runs) {
            for entry in entries.filter_map(Result::ok) {
                let pid = entry
                    .file_name()
                    .to_string_lossy()
                    .strip_prefix("run-")
                    .and_then(|p| p.parse::<u32>().ok());
                if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = Command::new("umount")
                        .arg(entry.path().join("root"))
                        .stderr(Stdio::null())
                        .status();
                    let _ = fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = runs.join(format!("run-{}", std::process::id()));
        let _ = Command::new("umount")
            .arg(dir.join("root"))
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(&dir);
        let (root, upper, work) = (dir.join("root"), dir.join("upper"), dir.join("work"));
        for d in [&root, &upper, &work] {
            fs::create_dir_all(d).expect("create the run directories");
        }
        let overlay = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o"])
            .arg(format!(
                "lowerdir={},upperdir={},workdir={}",
                base.display(),
                upper.display(),
                work.display()
            ))
            .arg(&root)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if overlay {
            return RunRoot {
                dir,
                root,
                upper: Some(upper),
            };
        }
        eprintln!("install test: no overlayfs here, copying the chroot");
        fs::remove_dir(&root).expect("remove the empty root");
        run(Command::new("cp")
            .args(["-a", "--reflink=auto"])
            .arg(base)
            .arg(&root));
        RunRoot {
            dir,
            root,
            upper: None,
        }
    }

    fn sh(&self, script: &str) -> Command {
        let mut command = Command::new("chroot");
        command
            .arg(&self.root)
            .args(["/bin/sh", "-c", script])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("LC_ALL", "C")
            .env("HOME", "/root");
        command
    }

    fn path(&self, inside: &str) -> PathBuf {
        self.root.join(inside.trim_start_matches('/'))
    }
}

impl Drop for RunRoot {
    fn drop(&mut self) {
        if self.upper.is_some() {
            let _ = Command::new("umount").arg(&self.root).status();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// What the package must install (besides directories).
fn expected_package_files() -> Vec<String> {
    let mut files: Vec<String> = [
        "/usr/sbin/pfmd",
        "/usr/bin/pfmstat",
        "/usr/bin/pfmprof",
        "/usr/include/sys/pfcntr.h",
        "/usr/lib/systemd/system/pfmd.service",
        "/usr/lib/udev/rules.d/99-pfcntr.rules",
        "/etc/pfm/events.map",
        "/etc/pfm/costs",
        "/etc/default/pfmd",
        "/usr/share/doc/pfmd/README.md",
        "/usr/share/doc/pfmd/copyright",
        "/usr/share/doc/pfmd/changelog.Debian.gz",
        "/usr/share/doc/pfmd/examples/events.map",
        "/usr/share/doc/pfmd/examples/pfmd.default",
        "/usr/share/doc/pfmd/examples/c/ev4count.c",
        "/usr/share/doc/pfmd/examples/c/Makefile",
    ]
    .map(String::from)
    .to_vec();
    for (name, section) in man_pages() {
        files.push(format!("/usr/share/man/man{section}/{name}.gz"));
    }
    for model in MODELS {
        files.push(format!("/usr/share/doc/pfmd/examples/costs/{model}.costs"));
    }
    files
}

/// Sorted, as `dpkg -L` order is compared with it.
const CONFFILES: [&str; 3] = ["/etc/default/pfmd", "/etc/pfm/costs", "/etc/pfm/events.map"];

#[test]
fn deb_installs_into_a_clean_chroot() {
    let test = "deb_installs_into_a_clean_chroot";
    if !prerequisites(
        test,
        &[Tool::MMDEBSTRAP, Tool::DPKG_DEB, MANDOC, MAN, GROFF],
    ) {
        return;
    }
    let start = Instant::now();
    if let Err(why) = timed("cargo-deb", ensure_cargo_deb) {
        skip_or_fail(test, why);
        return;
    }
    let base = match timed("the cached chroot", ensure_base_chroot) {
        Ok(base) => base,
        Err(why) => {
            skip_or_fail(test, why);
            return;
        }
    };

    // The package, as scripts/build-deb makes it, into this test's target.
    let deb = {
        let _lock =
            FileLock::acquire(&cache().join(".build-deb.lock")).expect("lock the package build");
        let out = timed("scripts/build-deb (with the release build)", || {
            stdout(
                script("build-deb")
                    .env("CARGO_TARGET_DIR", target_dir())
                    .arg("--output")
                    .arg(cache().join("deb")),
            )
        });
        let path = PathBuf::from(out.lines().last().unwrap_or_default().trim());
        assert!(
            path.is_file(),
            "build-deb's last line is not the .deb: {out}"
        );
        // Kept beside the run: build-deb may rewrite it for another test.
        let copy = cache().join(format!("pfmd-{}.deb", std::process::id()));
        fs::copy(&path, &copy).expect("copy the .deb");
        copy
    };
    let _remove_copy = RemoveOnDrop(deb.clone());

    // What the package holds, before anything is installed.
    let contents = stdout(Command::new("dpkg-deb").arg("-c").arg(&deb));
    let listed: BTreeSet<String> = contents
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').trim_end_matches('/').to_string())
        .collect();
    for file in expected_package_files() {
        assert!(listed.contains(&file), "the .deb lacks {file}:\n{contents}");
    }
    let conffiles = stdout(
        Command::new("dpkg-deb")
            .arg("-I")
            .arg(&deb)
            .arg("conffiles"),
    );
    let conffiles: BTreeSet<&str> = conffiles.lines().map(str::trim).collect();
    assert_eq!(conffiles, CONFFILES.into_iter().collect());

    let root = timed("a fresh root over the chroot", || RunRoot::new(&base));
    fs::copy(&deb, root.path("/tmp/pfmd.deb")).expect("copy the .deb into the chroot");

    timed("dpkg -i", || run(&mut root.sh("dpkg -i /tmp/pfmd.deb")));

    let version = stdout(&mut root.sh("pfmd --version"));
    assert_eq!(version.trim(), format!("pfmd {VERSION}"));

    // Plain cc, the header from /usr/include/sys, the example from the docs.
    run(&mut root.sh("set -e; mkdir -p /root/cc && cd /root/cc && \
         cp /usr/share/doc/pfmd/examples/c/ev4count.c . && cc ev4count.c && test -x a.out"));

    let dpkg_list = stdout(&mut root.sh("dpkg -L pfmd"));
    let owned: BTreeSet<&str> = dpkg_list.lines().map(str::trim).collect();
    for file in expected_package_files() {
        assert!(owned.contains(file.as_str()), "dpkg -L lacks {file}");
        assert!(root.path(&file).is_file(), "{file} is not on disk");
    }
    for binary in ["/usr/sbin/pfmd", "/usr/bin/pfmstat", "/usr/bin/pfmprof"] {
        assert_eq!(mode(&root.path(binary)), 0o755, "{binary}");
    }
    let registered = stdout(&mut root.sh("dpkg-query -W -f='${Conffiles}' pfmd"));
    for file in CONFFILES {
        assert!(
            registered.contains(file),
            "{file} is not a conffile: {registered}"
        );
    }

    // The group for --allow-group; the unit installed but not enabled.
    run(&mut root.sh("getent group pfm"));
    let enabled: Vec<PathBuf> = walk(&root.path("/etc/systemd"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("pfmd"))
        .collect();
    assert!(
        enabled.is_empty(),
        "the package enabled the unit: {enabled:?}"
    );
    let unit = fs::read_to_string(root.path("/usr/lib/systemd/system/pfmd.service")).unwrap();
    assert!(
        unit.contains("\nExecStart=/usr/sbin/pfmd $PFMD_OPTIONS\n"),
        "{unit}"
    );

    // The shipped /etc files change nothing: same output with and without.
    let with_map = stdout(&mut root.sh("pfmd --print-event-map 2>&1"));
    let without = stdout(&mut root.sh("pfmd --print-event-map --event-map /dev/null 2>&1"));
    assert_eq!(with_map, without, "/etc/pfm/events.map changes pfmd");
    let costs = stdout(&mut root.sh("pfmstat -t --model ev4 2>&1"));
    let builtin = stdout(&mut root.sh("PFM_COSTS=/dev/null pfmstat -t --model ev4 2>&1"));
    assert_eq!(costs, builtin, "/etc/pfm/costs changes pfmstat");

    // The man pages as installed (gzip'd) lint clean.
    let pages: Vec<PathBuf> = man_pages()
        .into_iter()
        .map(|(name, section)| root.path(&format!("/usr/share/man/man{section}/{name}.gz")))
        .collect();
    run(script("lint-man").args(&pages));

    // Remove: only the conffiles stay. Purge: nothing.
    let files: Vec<&str> = owned
        .iter()
        .copied()
        .filter(|f| root.path(f).is_file())
        .collect();
    run(&mut root.sh("dpkg -r pfmd"));
    let left: Vec<&str> = files
        .iter()
        .copied()
        .filter(|f| root.path(f).exists())
        .collect();
    assert_eq!(left, CONFFILES, "dpkg -r must leave the conffiles only");
    run(&mut root.sh("dpkg -P pfmd"));
    let left: Vec<&str> = files
        .iter()
        .copied()
        .filter(|f| root.path(f).exists())
        .collect();
    assert!(left.is_empty(), "dpkg -P left {left:?}");
    assert!(!root.path("/etc/pfm").exists(), "dpkg -P left /etc/pfm");
    if let Some(upper) = &root.upper {
        // Everything the run changed is in the overlay's upper directory:
        // nothing named after pfm may be left there but our scratch files.
        let stray: Vec<PathBuf> = walk(upper)
            .into_iter()
            .filter(|p| {
                let rel = p.strip_prefix(upper).unwrap();
                !rel.starts_with("tmp")
                    && !rel.starts_with("root")
                    && rel.to_string_lossy().contains("pfm")
            })
            .collect();
        assert!(stray.is_empty(), "left after purge: {stray:?}");
    }

    eprintln!(
        "install test: {test}: {:.1} s in all",
        start.elapsed().as_secs_f64()
    );
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}
