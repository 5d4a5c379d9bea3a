//! The daemon's life: configure, pick a transport, serve until SIGTERM/SIGINT,
//! clean up.

use super::{Args, StartError, TransportChoice, host};
use crate::backend::perf::PerfBackend;
use crate::device::Device;
use crate::device::fuse::{FuseOptions, FuseTransport};
use nix::sys::signal::{SigSet, Signal};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const CUSE_DEVICE: &str = "/dev/cuse";

pub fn run(args: &Args) -> Result<(), StartError> {
    // Block the stop signals before any thread starts, so every thread
    // inherits the mask and only the sigwait below sees them.
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGINT);
    stop.thread_block()
        .map_err(|e| StartError::Config(format!("blocking signals: {e}")))?;

    let config = host::device_config(args)?;
    tracing::info!(
        model = %config.implementation,
        chip = config.implementation.chip(),
        cpu_khz = config.cpu_khz,
        cpus = ?config.online_cpus,
        "starting"
    );
    let backend = Arc::new(PerfBackend::probe());
    let device = Arc::new(Device::new(config, backend));

    match args.transport {
        TransportChoice::Cuse => {
            return Err(StartError::Config(
                "--transport cuse: the CUSE transport is not implemented yet; use --transport fuse"
                    .into(),
            ));
        }
        TransportChoice::Auto if Path::new(CUSE_DEVICE).exists() => {
            tracing::warn!(
                "/dev/cuse exists but the CUSE transport is not implemented yet: using FUSE"
            );
        }
        TransportChoice::Auto => tracing::info!("no /dev/cuse on this kernel: using FUSE"),
        TransportChoice::Fuse => {}
    }
    let transport = FuseTransport::mount(
        device,
        &FuseOptions {
            mountpoint: args.mountpoint.clone(),
            mode: args.mode,
            threads: args.threads,
        },
    )
    .map_err(StartError::io(format!(
        "mounting {}",
        args.mountpoint.display()
    )))?;
    let link = dev_link(args);
    if let Some(link) = &link {
        make_link(link, &transport.device_path)?;
    }
    notify_ready();
    tracing::info!(device = %link.as_deref().unwrap_or(&transport.device_path).display(), "pfmd ready");

    let signal = stop
        .wait()
        .map_err(|e| StartError::Config(format!("waiting for signals: {e}")))?;
    tracing::info!(%signal, "stopping");
    if let Some(link) = &link {
        remove_link(link, &transport.device_path);
    }
    transport.unmount().map_err(StartError::io(format!(
        "unmounting {}",
        args.mountpoint.display()
    )))?;
    tracing::info!("stopped");
    Ok(())
}

fn dev_link(args: &Args) -> Option<PathBuf> {
    (args.dev_link != "none" && !args.dev_link.is_empty()).then(|| PathBuf::from(&args.dev_link))
}

/// Points `link` at the device, replacing an old symlink but never a real file.
fn make_link(link: &Path, target: &Path) -> Result<(), StartError> {
    if let Ok(meta) = std::fs::symlink_metadata(link) {
        if !meta.file_type().is_symlink() {
            return Err(StartError::Config(format!(
                "{} exists and is not a symlink; not replacing it (use --dev-link)",
                link.display()
            )));
        }
        std::fs::remove_file(link)
            .map_err(StartError::io(format!("removing old {}", link.display())))?;
    }
    if let Some(parent) = link.parent() {
        std::fs::create_dir_all(parent).map_err(StartError::io(parent.display().to_string()))?;
    }
    std::os::unix::fs::symlink(target, link)
        .map_err(StartError::io(format!("linking {}", link.display())))
}

/// Removes `link` if it still points at our device.
fn remove_link(link: &Path, target: &Path) {
    if std::fs::read_link(link).is_ok_and(|t| t == target)
        && let Err(e) = std::fs::remove_file(link)
    {
        tracing::warn!(link = %link.display(), "cannot remove device link: {e}");
    }
}

/// `READY=1` to systemd's `$NOTIFY_SOCKET` (Type=notify), when set.
fn notify_ready() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(Path::new(&path)),
    };
    let sent = addr.and_then(|addr| UnixDatagram::unbound()?.send_to_addr(b"READY=1", &addr));
    if let Err(e) = sent {
        tracing::warn!("cannot notify systemd: {e}");
    }
}
