//! The per-run part of the initramfs: the includes under /work, the shared
//! libraries dynamic programs among them need, and the command.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use super::cpio::CpioWriter;
use super::{Arch, VmError, elf, guest};
use crate::host::{HostError, IoContext};

/// Where an aarch64 cross libc lives on the host (libc6-arm64-cross); the
/// environment variable adds a sysroot (e.g. the aarch64 build chroot).
const AARCH64_LIB_DIRS: &[&str] = &["/usr/aarch64-linux-gnu/lib"];
pub const AARCH64_SYSROOT_ENV: &str = "PFM_VM_SYSROOT";

/// The directories ld.so searches without being told.
const DEFAULT_LIB_DIRS: &[&str] = &[
    "/lib",
    "/usr/lib",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
];

/// The name an include gets under /work: its file name (of the real
/// directory for `.` and `..`).
pub(crate) fn include_name(path: &Path) -> Result<String, VmError> {
    let named = match path.file_name() {
        Some(name) => Some(name.to_os_string()),
        None => fs::canonicalize(path)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_os_string())),
    };
    named
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| VmError::Invalid(format!("--include {}: has no name", path.display())))
}

/// Writes base + overlay to `initrd`.
pub(crate) fn write_initrd(
    arch: Arch,
    base: &Path,
    includes: &[PathBuf],
    command: &[String],
    initrd: &Path,
    progress: &dyn Fn(&str),
) -> Result<(), VmError> {
    fs::copy(base, initrd)
        .context(|| format!("copy {} to {}", base.display(), initrd.display()))?;
    let file = fs::OpenOptions::new()
        .append(true)
        .open(initrd)
        .context(|| format!("open {}", initrd.display()))?;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0);
    let mut overlay = Overlay {
        arch,
        archive: CpioWriter::new(std::io::BufWriter::new(file), now),
        dirs: BTreeSet::new(),
        libraries: BTreeSet::new(),
        cross_libraries: Vec::new(),
        progress,
    };
    overlay.dir_all(guest::WORK_DIR)?;
    overlay.dir_all(guest::RUN_DIR)?;
    for include in includes {
        let name = include_name(include)?;
        overlay.add_tree(
            include,
            &format!("{}/{name}", guest::WORK_DIR),
            &mut Vec::new(),
        )?;
    }
    let lib_path = overlay.add_libraries()?;
    let mut env = String::new();
    if !lib_path.is_empty() {
        env.push_str(&format!(
            "export LD_LIBRARY_PATH='{}'\n",
            lib_path.join(":")
        ));
    }
    overlay.file(&format!("{}/env", guest::RUN_DIR), 0o644, env.as_bytes())?;
    overlay.file(
        &format!("{}/cmd", guest::RUN_DIR),
        0o644,
        guest::shell_command(command).as_bytes(),
    )?;
    overlay
        .archive
        .finish()
        .and_then(|mut out| out.flush())
        .context(|| format!("write {}", initrd.display()))?;
    Ok(())
}

struct Overlay<'a, W: Write> {
    arch: Arch,
    archive: CpioWriter<W>,
    /// Directories already in the archive (the kernel needs parents first).
    dirs: BTreeSet<String>,
    /// Absolute host paths of the shared libraries to copy to the same
    /// path in the guest.
    libraries: BTreeSet<PathBuf>,
    /// (guest path, host path) of aarch64 libraries from a cross sysroot.
    cross_libraries: Vec<(PathBuf, PathBuf)>,
    progress: &'a dyn Fn(&str),
}

impl<W: Write> Overlay<'_, W> {
    fn dir_all(&mut self, guest_path: &str) -> Result<(), VmError> {
        let mut so_far = String::new();
        for part in guest_path.split('/').filter(|p| !p.is_empty()) {
            if !so_far.is_empty() {
                so_far.push('/');
            }
            so_far.push_str(part);
            if self.dirs.insert(so_far.clone()) {
                self.archive
                    .dir(&so_far, 0o755)
                    .context(|| format!("archive {so_far}"))?;
            }
        }
        Ok(())
    }

    fn file(&mut self, guest_path: &str, mode: u32, data: &[u8]) -> Result<(), VmError> {
        Ok(self
            .archive
            .file(guest_path, mode, data)
            .context(|| format!("archive {guest_path}"))?)
    }

    /// `host` (followed through symlinks) as `guest_path`; `stack` holds the
    /// directories being walked, to stop at symlink loops.
    fn add_tree(
        &mut self,
        host: &Path,
        guest_path: &str,
        stack: &mut Vec<PathBuf>,
    ) -> Result<(), VmError> {
        let include_error = |source| VmError::Include {
            path: host.to_path_buf(),
            source,
        };
        let metadata = fs::metadata(host).map_err(include_error)?;
        let mode = metadata.permissions().mode() & 0o7777;
        if metadata.is_dir() {
            let real = fs::canonicalize(host).map_err(include_error)?;
            if stack.contains(&real) {
                (self.progress)(&format!("{}: symlink loop, not followed", host.display()));
                return Ok(());
            }
            self.dir_all(guest_path)?;
            let mut entries: Vec<PathBuf> = fs::read_dir(host)
                .map_err(include_error)?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .collect();
            entries.sort();
            stack.push(real);
            for entry in entries {
                let name = entry
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.add_tree(&entry, &format!("{guest_path}/{name}"), stack)?;
            }
            stack.pop();
        } else if metadata.is_file() {
            let mut file = fs::File::open(host).map_err(include_error)?;
            self.archive
                .file_from(guest_path, mode, metadata.len(), &mut file)
                .map_err(include_error)?;
            let name = host.to_string_lossy();
            if mode & 0o111 != 0 || name.ends_with(".so") || name.contains(".so.") {
                self.note_libraries(host)?;
            }
        } else {
            (self.progress)(&format!(
                "{}: not a file or directory, left out",
                host.display()
            ));
        }
        Ok(())
    }

    /// Records the shared libraries a dynamic ELF file needs.
    fn note_libraries(&mut self, path: &Path) -> Result<(), VmError> {
        let Some(info) = elf::probe(path).map_err(|source| VmError::Include {
            path: path.to_path_buf(),
            source,
        })?
        else {
            return Ok(());
        };
        if !info.is_dynamic() {
            return Ok(());
        }
        if info.machine != self.arch.elf_machine() {
            (self.progress)(&format!(
                "WARNING: {} is a dynamic ELF file for another machine (e_machine {}); it will not run in the {} guest",
                path.display(),
                info.machine,
                self.arch.name()
            ));
            return Ok(());
        }
        match self.arch {
            Arch::X86_64 => self.note_host_libraries(path),
            Arch::Aarch64 => {
                self.note_cross_libraries(path, &info);
                Ok(())
            }
        }
    }

    /// The libraries as the host's ld.so resolves them (`ldd`), so RUNPATH,
    /// `$ORIGIN` and `LD_LIBRARY_PATH` work as they do on the host.
    fn note_host_libraries(&mut self, path: &Path) -> Result<(), VmError> {
        let output = Command::new("ldd")
            .arg(path)
            .output()
            .map_err(|source| HostError::Spawn {
                program: "ldd".into(),
                source,
            })?;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                [name, "=>", "not", "found", ..] => (self.progress)(&format!(
                    "WARNING: {}: {name} not found on the host",
                    path.display()
                )),
                [_, "=>", library, ..] if library.starts_with('/') => {
                    self.libraries.insert(normalize(Path::new(library)));
                }
                [interpreter, ..] if interpreter.starts_with('/') => {
                    self.libraries.insert(normalize(Path::new(interpreter)));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The interpreter and `DT_NEEDED` libraries of an aarch64 program,
    /// found in the cross libc (and `$PFM_VM_SYSROOT`), transitively.
    fn note_cross_libraries(&mut self, path: &Path, info: &elf::ElfInfo) {
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(root) = std::env::var_os(AARCH64_SYSROOT_ENV) {
            let root = PathBuf::from(root);
            for sub in [
                "lib/aarch64-linux-gnu",
                "usr/lib/aarch64-linux-gnu",
                "usr/aarch64-linux-gnu/lib",
            ] {
                dirs.push(root.join(sub));
            }
        }
        dirs.extend(AARCH64_LIB_DIRS.iter().map(PathBuf::from));
        let find = |name: &str| dirs.iter().map(|d| d.join(name)).find(|p| p.exists());
        if let Some(interpreter) = &info.interpreter {
            let name = Path::new(interpreter)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            match find(&name) {
                Some(found) => {
                    self.cross_libraries
                        .push((PathBuf::from(interpreter), found));
                }
                None => (self.progress)(&format!(
                    "WARNING: {}: interpreter {interpreter} not found (set {AARCH64_SYSROOT_ENV}, or build static)",
                    path.display()
                )),
            }
        }
        let mut pending = info.needed.clone();
        let mut done = BTreeSet::new();
        while let Some(name) = pending.pop() {
            if !done.insert(name.clone()) {
                continue;
            }
            let Some(found) = find(&name) else {
                (self.progress)(&format!(
                    "WARNING: {}: {name} not found (set {AARCH64_SYSROOT_ENV}, or build static)",
                    path.display()
                ));
                continue;
            };
            if let Ok(Some(library)) = elf::probe(&found) {
                pending.extend(library.needed);
            }
            self.cross_libraries
                .push((Path::new("/lib/aarch64-linux-gnu").join(&name), found));
        }
    }

    /// Copies the recorded libraries; returns the directories ld.so must be
    /// told about.
    fn add_libraries(&mut self) -> Result<Vec<String>, VmError> {
        let mut placed: Vec<(PathBuf, PathBuf)> = self
            .libraries
            .iter()
            .map(|p| (p.clone(), p.clone()))
            .collect();
        placed.append(&mut self.cross_libraries);
        let mut lib_path = Vec::new();
        let mut done = BTreeSet::new();
        for (guest_path, host_path) in placed {
            if !done.insert(guest_path.clone()) {
                continue;
            }
            let guest_name = guest_path
                .to_string_lossy()
                .trim_start_matches('/')
                .to_string();
            if let Some(parent) = guest_path.parent() {
                let parent_name = parent.to_string_lossy().into_owned();
                self.dir_all(&parent_name)?;
                if !DEFAULT_LIB_DIRS.contains(&parent_name.as_str())
                    && !lib_path.contains(&parent_name)
                {
                    lib_path.push(parent_name);
                }
            }
            // Followed through symlinks: the guest gets the contents under
            // the name the program asks for.
            let mut file = fs::File::open(&host_path)
                .context(|| format!("open library {}", host_path.display()))?;
            let size = file
                .metadata()
                .context(|| format!("stat {}", host_path.display()))?
                .len();
            self.archive
                .file_from(&guest_name, 0o755, size, &mut file)
                .context(|| format!("archive {}", host_path.display()))?;
        }
        Ok(lib_path)
    }
}

/// `path` with `.` and `..` resolved lexically (ldd prints `$ORIGIN/../lib`
/// as it is).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalization() {
        assert_eq!(
            normalize(Path::new("/opt/app/bin/../lib/./libx.so")),
            PathBuf::from("/opt/app/lib/libx.so")
        );
    }

    #[test]
    fn include_names() {
        assert_eq!(include_name(Path::new("/a/b/pfmd")).unwrap(), "pfmd");
        assert_eq!(include_name(Path::new("dir/")).unwrap(), "dir");
    }
}
