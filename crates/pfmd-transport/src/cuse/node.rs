//! The device node `/dev/<name>`: devtmpfs (or udev) creates it when the
//! kernel adds the CUSE device and removes it when the channel closes. We
//! check nothing is in its way, wait for it, and apply `--mode`/`--group`
//! (the packaged way is the udev rule in `contrib/99-pfcntr.rules`).

use super::CuseError;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// Where the kernel lists CUSE devices (class `cuse`).
pub const SYS_CLASS_CUSE: &str = "/sys/class/cuse";

/// A device name the kernel and devtmpfs accept as a single `/dev` entry.
pub fn check_name(name: &str) -> Result<(), CuseError> {
    let bad = |why: &'static str| Err(CuseError::BadName(name.to_string(), why));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > 64 {
        return bad("longer than 64 bytes");
    }
    if name == "." || name == ".." {
        return bad("not a file name");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'+'))
    {
        return bad("only letters, digits and _ - . + are allowed");
    }
    Ok(())
}

/// Before CUSE_INIT: another live CUSE device of that name makes the kernel
/// refuse ours; a symlink (the FUSE transport's, left behind) would stop
/// devtmpfs creating the node, so it is replaced, as the FUSE transport
/// replaces old links; anything else in the way is refused.
pub fn prepare(path: &Path, sys_class: &Path, name: &str) -> Result<(), CuseError> {
    if sys_class.join(name).exists() {
        return Err(CuseError::AlreadyServed {
            path: path.to_path_buf(),
            name: name.to_string(),
        });
    }
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            tracing::warn!(path = %path.display(), "replacing an old symlink with the CUSE device");
            fs::remove_file(path).map_err(CuseError::io(format!("removing {}", path.display())))
        }
        Ok(_) => Err(CuseError::InTheWay {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CuseError::io(path.display().to_string())(e)),
    }
}

/// `major:minor` from `/sys/class/cuse/<name>/dev`, as a `dev_t`.
fn sys_devt(sys_class: &Path, name: &str) -> Option<u64> {
    let text = fs::read_to_string(sys_class.join(name).join("dev")).ok()?;
    let (major, minor) = text.trim().split_once(':')?;
    Some(libc::makedev(major.parse().ok()?, minor.parse().ok()?))
}

/// Waits until `path` is the character device the kernel registered under
/// `name` (or any character device, where sysfs cannot tell), giving up
/// when `gone()` says the kernel dropped the connection or after `timeout`.
pub fn wait_for(
    path: &Path,
    sys_class: &Path,
    name: &str,
    timeout: Duration,
    gone: impl Fn() -> io::Result<bool>,
) -> Result<(), CuseError> {
    let start = Instant::now();
    loop {
        let want = sys_devt(sys_class, name);
        if let Ok(meta) = fs::symlink_metadata(path)
            && meta.file_type().is_char_device()
            && want.is_none_or(|devt| meta.rdev() == devt)
        {
            tracing::debug!(
                path = %path.display(),
                after_ms = start.elapsed().as_millis() as u64,
                "device node present"
            );
            return Ok(());
        }
        if gone().map_err(CuseError::io("polling /dev/cuse"))? {
            return Err(CuseError::Refused {
                name: name.to_string(),
            });
        }
        if start.elapsed() > timeout {
            return Err(CuseError::NodeMissing {
                path: path.to_path_buf(),
                waited: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `--mode` and `--group` on the node.
pub fn apply_permissions(path: &Path, mode: u16, gid: Option<u32>) -> Result<(), CuseError> {
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(CuseError::io(format!("chgrp {gid} {}", path.display())))?;
    }
    fs::set_permissions(path, fs::Permissions::from_mode(u32::from(mode)))
        .map_err(CuseError::io(format!("chmod {mode:o} {}", path.display())))
}

/// After the channel closed: the node should be gone (devtmpfs removes it
/// synchronously). Logged, never fatal.
pub fn confirm_removed(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_char_device()) {
        if Instant::now() > deadline {
            tracing::warn!(path = %path.display(), "device node still present after closing the CUSE channel");
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    tracing::debug!(path = %path.display(), "device node removed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("pfcntr").is_ok());
        assert!(check_name("pfcntr-1.test").is_ok());
        for bad in ["", ".", "..", "a/b", "a b", "x=y", &"n".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn prepare_replaces_links_and_refuses_files() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys");
        fs::create_dir(&sys).unwrap();
        let node = dir.path().join("pfcntr");
        // Nothing there.
        prepare(&node, &sys, "pfcntr").unwrap();
        // A stale symlink goes.
        std::os::unix::fs::symlink("/run/pfm/pfcntr", &node).unwrap();
        prepare(&node, &sys, "pfcntr").unwrap();
        assert!(fs::symlink_metadata(&node).is_err());
        // A real file stays, and we refuse.
        fs::write(&node, b"").unwrap();
        assert!(matches!(
            prepare(&node, &sys, "pfcntr"),
            Err(CuseError::InTheWay { .. })
        ));
        fs::remove_file(&node).unwrap();
        // Another CUSE device of that name.
        fs::create_dir(sys.join("pfcntr")).unwrap();
        assert!(matches!(
            prepare(&node, &sys, "pfcntr"),
            Err(CuseError::AlreadyServed { .. })
        ));
    }

    #[test]
    fn wait_reports_refusal_and_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("pfcntr");
        let refused = wait_for(&node, dir.path(), "pfcntr", Duration::from_secs(5), || {
            Ok(true)
        });
        assert!(matches!(refused, Err(CuseError::Refused { .. })));
        let missing = wait_for(
            &node,
            dir.path(),
            "pfcntr",
            Duration::from_millis(20),
            || Ok(false),
        );
        assert!(matches!(missing, Err(CuseError::NodeMissing { .. })));
        // A regular file is not the device.
        fs::write(&node, b"").unwrap();
        let missing = wait_for(
            &node,
            dir.path(),
            "pfcntr",
            Duration::from_millis(20),
            || Ok(false),
        );
        assert!(matches!(missing, Err(CuseError::NodeMissing { .. })));
    }

    #[test]
    fn wait_accepts_the_matching_char_device() {
        // /dev/null is 1:3 everywhere.
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path();
        fs::create_dir_all(sys.join("null")).unwrap();
        fs::write(sys.join("null/dev"), "1:3\n").unwrap();
        wait_for(
            Path::new("/dev/null"),
            sys,
            "null",
            Duration::from_secs(1),
            || Ok(false),
        )
        .unwrap();
        fs::write(sys.join("null/dev"), "1:5\n").unwrap();
        let wrong = wait_for(
            Path::new("/dev/null"),
            sys,
            "null",
            Duration::from_millis(20),
            || Ok(false),
        );
        assert!(matches!(wrong, Err(CuseError::NodeMissing { .. })));
    }
}
