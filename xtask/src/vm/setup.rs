//! What every run of an architecture shares, built once and cached: the
//! host tools, the kernel (a Debian .deb, extracted), busybox (the Debian
//! busybox-static .deb of the guest's architecture) and the base initramfs
//! (busybox, the modules, /init).
//!
//! Cache layout, under the cache directory:
//! `apt.log`, `apt-<debian arch>/` (private apt states), and per
//! architecture `<arch>/debs/<source>/` (downloads, with a `current` file
//! naming the one in use), `<arch>/extracted/<deb>/`, `<arch>/base/base-<key>.cpio`
//! and `<arch>/runs/` (per-run scratch, removed after the run).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::cpio::CpioWriter;
use super::{Arch, VmError, elf, guest};
use crate::host::{self, Apt, FileLock, HostError, IoContext, Tool};

/// Bump when the base initramfs layout changes, so cached bases are rebuilt.
const BASE_FORMAT: &str = "pfm-vm base 1";

/// Where a kernel comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelSource {
    /// The system's apt sources (x86_64 default: bookworm's 6.1).
    System,
    /// One suite of the host's Debian release, through a private apt state
    /// (aarch64 default: `<codename>-backports`, 6.12 on bookworm).
    Suite(String),
}

/// What the runs of one configuration share.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub kernel_image: PathBuf,
    pub kernel_release: String,
    pub base: PathBuf,
}

/// Installs, downloads and builds what is missing, under the cache's lock.
pub(crate) fn prepare(
    arch: Arch,
    cache: &Path,
    source: &KernelSource,
    modules: &[String],
    progress: &dyn Fn(&str),
) -> Result<Prepared, VmError> {
    let _lock = FileLock::acquire(&cache.join(".setup.lock"))?;
    host::ensure_tools(
        &[arch.qemu(), Tool::XZ, Tool::DPKG_DEB, Tool::APT_GET],
        cache,
        progress,
    )?;
    let arch_dir = cache.join(arch.name());
    let kernel_deb = kernel_deb(arch, cache, &arch_dir, source, progress)?;
    let kernel_dir = extract(&kernel_deb, &arch_dir, progress)?;
    let (module_dir, release) = module_dir(&kernel_dir, &kernel_deb)?;
    let mut kernel_image = kernel_dir.join("boot").join(format!("vmlinuz-{release}"));
    if !kernel_image.is_file() {
        return Err(setup_error(format!(
            "no boot/vmlinuz-{release} in {}",
            kernel_deb.display()
        )));
    }
    if arch == Arch::Aarch64 {
        kernel_image = unpack_efi_zboot(&kernel_image)?;
    }
    let busybox_deb = busybox_deb(arch, cache, &arch_dir, progress)?;
    let busybox = extract(&busybox_deb, &arch_dir, progress)?.join("bin/busybox");
    if !busybox.is_file() {
        return Err(setup_error(format!(
            "no bin/busybox in {}",
            busybox_deb.display()
        )));
    }
    let base = base_initramfs(
        arch,
        &arch_dir,
        &kernel_deb,
        &module_dir,
        &busybox_deb,
        &busybox,
        modules,
        progress,
    )?;
    Ok(Prepared {
        kernel_image,
        kernel_release: release,
        base,
    })
}

pub(crate) fn setup_error(message: String) -> VmError {
    VmError::Host(HostError::Other(message))
}

/// The kernel .deb: downloaded once per source, then reused (delete
/// `<arch>/debs/` to take a newer one).
fn kernel_deb(
    arch: Arch,
    cache: &Path,
    arch_dir: &Path,
    source: &KernelSource,
    progress: &dyn Fn(&str),
) -> Result<PathBuf, VmError> {
    let label = match source {
        KernelSource::System => "system".to_string(),
        KernelSource::Suite(suite) => suite.clone(),
    };
    let dir = arch_dir.join("debs").join(label);
    if let Some(deb) = current_download(&dir) {
        return Ok(deb);
    }
    let meta = format!("linux-image-{}", arch.kernel_flavour());
    let (apt, suite) = apt_for(arch, cache, source)?;
    let resolve = |apt: &Apt| -> Result<String, VmError> {
        apt.versioned_dependency(&meta, "linux-image-", suite.as_deref())?
            .ok_or_else(|| {
                setup_error(format!(
                    "cannot resolve {meta} to a versioned kernel package (apt-cache depends {meta} names none{})",
                    if host::is_root() { "" } else { "; as root, run apt-get update" }
                ))
            })
    };
    let deb = download_fresh(&apt, &dir, progress, &resolve)?;
    remember_download(&dir, &deb)?;
    Ok(deb)
}

/// Resolves the package and downloads it into `dir`. Package lists can be
/// missing (a fresh machine) or stale (the mirror moved on: 404); when
/// either step fails and the lists may be refreshed (a private state, or
/// the system's as root), fetches fresh lists and tries once more.
fn download_fresh(
    apt: &Apt,
    dir: &Path,
    progress: &dyn Fn(&str),
    resolve: &dyn Fn(&Apt) -> Result<String, VmError>,
) -> Result<PathBuf, VmError> {
    let attempt = || -> Result<PathBuf, VmError> {
        let package = resolve(apt)?;
        progress(&format!(
            "downloading {package} (once; cached in {})",
            dir.display()
        ));
        Ok(apt.download(&package, dir)?)
    };
    match attempt() {
        Ok(deb) => Ok(deb),
        Err(first) if apt.is_private() || host::is_root() => {
            progress(&format!(
                "{first}\nfetching fresh package lists and trying again"
            ));
            apt.update()?;
            attempt()
        }
        Err(e) => Err(e),
    }
}

/// busybox-static of the guest's architecture, from the host's release.
fn busybox_deb(
    arch: Arch,
    cache: &Path,
    arch_dir: &Path,
    progress: &dyn Fn(&str),
) -> Result<PathBuf, VmError> {
    let dir = arch_dir.join("debs").join("busybox");
    if let Some(deb) = current_download(&dir) {
        return Ok(deb);
    }
    let (apt, _) = apt_for(arch, cache, &KernelSource::System)?;
    let deb = download_fresh(&apt, &dir, progress, &|_| Ok("busybox-static".into()))?;
    remember_download(&dir, &deb)?;
    Ok(deb)
}

/// The apt that serves `arch` from `source`, and the suite to ask for.
/// The system's apt serves only its own architecture; other architectures
/// and explicit suites go through a private state.
fn apt_for(
    arch: Arch,
    cache: &Path,
    source: &KernelSource,
) -> Result<(Apt, Option<String>), VmError> {
    let native = host::native_architecture()?;
    match source {
        KernelSource::System if arch.debian_arch() == native => Ok((Apt::system(cache), None)),
        _ => {
            let apt = Apt::private(
                &cache.join(format!("apt-{}", arch.debian_arch())),
                arch.debian_arch(),
                cache,
            )?;
            let suite = match source {
                // The release itself: its default candidates already
                // include security updates.
                KernelSource::Suite(suite) if *suite != host::codename()? => Some(suite.clone()),
                _ => None,
            };
            Ok((apt, suite))
        }
    }
}

fn current_download(dir: &Path) -> Option<PathBuf> {
    let name = fs::read_to_string(dir.join("current")).ok()?;
    let deb = dir.join(name.trim());
    deb.is_file().then_some(deb)
}

fn remember_download(dir: &Path, deb: &Path) -> Result<(), VmError> {
    let name = deb
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let current = dir.join("current");
    Ok(fs::write(&current, format!("{name}\n"))
        .context(|| format!("write {}", current.display()))?)
}

/// `dpkg-deb -x` of `deb` into `<arch>/extracted/<deb name>/`, once.
fn extract(deb: &Path, arch_dir: &Path, progress: &dyn Fn(&str)) -> Result<PathBuf, VmError> {
    let stem = deb
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = arch_dir.join("extracted");
    let dir = parent.join(&stem);
    if dir.join(".done").exists() {
        return Ok(dir);
    }
    progress(&format!("extracting {stem}"));
    fs::create_dir_all(&parent).context(|| format!("create {}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".extract-")
        .tempdir_in(&parent)
        .context(|| format!("create a directory in {}", parent.display()))?;
    host::run_captured(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(deb)
            .arg(staging.path()),
    )?;
    fs::write(staging.path().join(".done"), b"").context(|| "mark extraction done".into())?;
    let _ = fs::remove_dir_all(&dir);
    let staged = staging.keep();
    fs::rename(&staged, &dir).context(|| format!("rename to {}", dir.display()))?;
    Ok(dir)
}

/// `lib/modules/<release>` of an extracted kernel package, and `<release>`.
fn module_dir(kernel_dir: &Path, deb: &Path) -> Result<(PathBuf, String), VmError> {
    for base in ["lib/modules", "usr/lib/modules"] {
        let Ok(entries) = fs::read_dir(kernel_dir.join(base)) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            if entry.path().join("kernel").is_dir() {
                let release = entry.file_name().to_string_lossy().into_owned();
                return Ok((entry.path(), release));
            }
        }
    }
    Err(setup_error(format!(
        "no lib/modules/<release>/kernel in {}",
        deb.display()
    )))
}

/// qemu boots a plain arm64 Image (or a gzip one), but not an EFI "zboot"
/// image (a PE file wrapping a compressed Image); should Debian switch to
/// those, the payload is taken out here.
fn unpack_efi_zboot(image: &Path) -> Result<PathBuf, VmError> {
    let data = fs::read(image).context(|| format!("read {}", image.display()))?;
    if data.get(4..8) != Some(b"zimg") {
        return Ok(image.to_path_buf());
    }
    let unpacked = image.with_extension("unpacked");
    if unpacked.is_file() {
        return Ok(unpacked);
    }
    let word = |at: usize| {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let (Some(offset), Some(size)) = (word(8), word(12)) else {
        return Err(setup_error(format!(
            "{}: short zboot header",
            image.display()
        )));
    };
    let compression = String::from_utf8_lossy(data.get(24..32).unwrap_or_default())
        .trim_end_matches('\0')
        .to_string();
    let payload = data
        .get(offset..offset + size)
        .ok_or_else(|| setup_error(format!("{}: zboot payload out of range", image.display())))?;
    let tool = match compression.as_str() {
        "gzip" => "gzip",
        "zstd" | "zstd22" => "zstd",
        "xzkern" => "xz",
        other => {
            return Err(setup_error(format!(
                "{}: EFI zboot image with unknown compression {other:?}",
                image.display()
            )));
        }
    };
    let plain = decompress(tool, payload)?;
    fs::write(&unpacked, plain).context(|| format!("write {}", unpacked.display()))?;
    Ok(unpacked)
}

/// `tool -dc` of `data` (gzip, xz, zstd).
fn decompress(tool: &str, data: &[u8]) -> Result<Vec<u8>, VmError> {
    use std::process::Stdio;
    let mut child = Command::new(tool)
        .args(["-d", "-c", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| HostError::Spawn {
            program: tool.into(),
            source,
        })?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    // Feed from another thread: the output pipe fills while we write.
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child
        .wait_with_output()
        .map_err(|source| HostError::Spawn {
            program: tool.into(),
            source,
        })?;
    let fed = writer.join().unwrap_or(Ok(()));
    if !output.status.success() || fed.is_err() {
        return Err(setup_error(format!(
            "{tool} -dc failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(output.stdout)
}

/// The module files of a kernel, by name with `-` written `_`.
fn module_index(module_dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut index = BTreeMap::new();
    let mut pending = vec![module_dir.join("kernel")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Some(name) = module_name(&path.to_string_lossy()) {
                index.insert(name, path);
            }
        }
    }
    index
}

/// `.../fuse.ko.xz` → `fuse`; None for other files.
fn module_name(path: &str) -> Option<String> {
    let file = path.rsplit('/').next()?;
    let stem = [".ko", ".ko.xz", ".ko.zst", ".ko.gz"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))?;
    Some(stem.replace('-', "_"))
}

/// The contents of module `path`, decompressed (busybox insmod wants a
/// plain .ko).
fn module_contents(path: &Path) -> Result<Vec<u8>, VmError> {
    let data = fs::read(path).context(|| format!("read {}", path.display()))?;
    let name = path.to_string_lossy();
    if name.ends_with(".xz") {
        decompress("xz", &data)
    } else if name.ends_with(".zst") {
        decompress("zstd", &data)
    } else if name.ends_with(".gz") {
        decompress("gzip", &data)
    } else {
        Ok(data)
    }
}

/// `modules` and what they depend on, dependencies first, as (file name,
/// contents); modules built into the kernel are left out.
fn modules_in_order(
    module_dir: &Path,
    modules: &[String],
) -> Result<Vec<(String, Vec<u8>)>, VmError> {
    let index = module_index(module_dir);
    let builtin: BTreeSet<String> = fs::read_to_string(module_dir.join("modules.builtin"))
        .unwrap_or_default()
        .lines()
        .filter_map(module_name)
        .collect();
    let mut seen = BTreeSet::new();
    let mut ordered = Vec::new();
    fn visit(
        name: &str,
        index: &BTreeMap<String, PathBuf>,
        builtin: &BTreeSet<String>,
        seen: &mut BTreeSet<String>,
        ordered: &mut Vec<(String, Vec<u8>)>,
    ) -> Result<(), VmError> {
        let name = name.replace('-', "_");
        if !seen.insert(name.clone()) {
            return Ok(());
        }
        let Some(path) = index.get(&name) else {
            if builtin.contains(&name) {
                return Ok(());
            }
            return Err(setup_error(format!(
                "module {name} is neither in the kernel package nor built in"
            )));
        };
        let contents = module_contents(path)?;
        let depends = elf::module_depends(&contents)
            .map_err(|e| setup_error(format!("{}: {e}", path.display())))?;
        for dependency in depends {
            visit(&dependency, index, builtin, seen, ordered)?;
        }
        ordered.push((format!("{name}.ko"), contents));
        Ok(())
    }
    for module in modules {
        visit(module, &index, &builtin, &mut seen, &mut ordered)?;
    }
    Ok(ordered)
}

/// The base initramfs, keyed by everything that goes into it.
#[allow(clippy::too_many_arguments)]
fn base_initramfs(
    arch: Arch,
    arch_dir: &Path,
    kernel_deb: &Path,
    module_dir: &Path,
    busybox_deb: &Path,
    busybox: &Path,
    modules: &[String],
    progress: &dyn Fn(&str),
) -> Result<PathBuf, VmError> {
    let init = guest::init_script(arch);
    let mut hasher = Fnv1a::default();
    for part in [
        BASE_FORMAT,
        &kernel_deb.to_string_lossy(),
        &busybox_deb.to_string_lossy(),
        &modules.join(" "),
        &init,
    ] {
        hasher.write(part.as_bytes());
        hasher.write(b"\n");
    }
    let dir = arch_dir.join("base");
    let base = dir.join(format!("base-{:016x}.cpio", hasher.finish()));
    if base.is_file() {
        return Ok(base);
    }
    progress(&format!(
        "building the base initramfs ({}, modules: {})",
        module_dir
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        modules.join(" ")
    ));
    let ordered = modules_in_order(module_dir, modules)?;
    fs::create_dir_all(&dir).context(|| format!("create {}", dir.display()))?;
    let staging = tempfile::NamedTempFile::new_in(&dir)
        .context(|| format!("create a file in {}", dir.display()))?;
    let write = || -> std::io::Result<()> {
        let mut archive = CpioWriter::new(std::io::BufWriter::new(staging.as_file()), 0);
        for d in [
            "bin",
            "sbin",
            "usr",
            "usr/bin",
            "usr/sbin",
            "dev",
            "proc",
            "sys",
            "tmp",
            "run",
            "root",
            "etc",
            "lib",
            "lib/modules",
            guest::MODULE_DIR,
            guest::WORK_DIR,
        ] {
            archive.dir(d, 0o755)?;
        }
        // The kernel opens /dev/console for /init before devtmpfs is up.
        archive.char_device("dev/console", 0o600, 5, 1)?;
        archive.char_device("dev/null", 0o666, 1, 3)?;
        let mut busybox_file = fs::File::open(busybox)?;
        let size = busybox_file.metadata()?.len();
        archive.file_from("bin/busybox", 0o755, size, &mut busybox_file)?;
        archive.symlink("bin/sh", "busybox")?;
        archive.file("init", 0o755, init.as_bytes())?;
        archive.file("etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\n")?;
        archive.file("etc/group", 0o644, b"root:x:0:\ntty:x:5:\n")?;
        let mut order = String::new();
        for (name, contents) in &ordered {
            archive.file(&format!("{}/{name}", guest::MODULE_DIR), 0o644, contents)?;
            order.push_str(name);
            order.push('\n');
        }
        archive.file(
            &format!("{}/order", guest::MODULE_DIR),
            0o644,
            order.as_bytes(),
        )?;
        archive.finish()?.flush()
    };
    write().context(|| format!("write {}", staging.path().display()))?;
    // Temporary files are private; a shared cache must be readable by all.
    staging
        .as_file()
        .set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .context(|| format!("chmod {}", staging.path().display()))?;
    staging
        .persist(&base)
        .map_err(|e| e.error)
        .context(|| format!("write {}", base.display()))?;
    Ok(base)
}

/// FNV-1a: a hash that stays the same across Rust versions, for cache keys.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names() {
        assert_eq!(
            module_name("kernel/fs/fuse/fuse.ko").as_deref(),
            Some("fuse")
        );
        assert_eq!(
            module_name("x/nf-tables.ko.xz").as_deref(),
            Some("nf_tables")
        );
        assert_eq!(module_name("x/modules.order"), None);
    }
}
