//! The daemon's life: configure, pick a transport, serve until SIGTERM/SIGINT,
//! clean up.

use super::{Args, StartError, TransportChoice, host};
use crate::backend::perf::PerfBackend;
use crate::device::Device;
use crate::transport::cuse::{CuseError, CuseOptions, CuseTransport};
use crate::transport::fuse::{FuseOptions, FuseTransport};
use nix::sys::signal::{SigSet, Signal};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub fn run(args: &Args) -> Result<(), StartError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(StartError::Config(
            "pfmd serves every user of the machine and must run as root: it mounts its \
             device (or creates it through /dev/cuse) and opens perf events on callers' \
             behalf. Start it with `sudo pfmd` or `systemctl start pfmd`; \
             `pfmd --list-events` works as any user"
                .into(),
        ));
    }
    crate::device::memory::map_large_allocations();
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
    let model = config.implementation;
    let device = Arc::new(Device::new(config, backend));
    super::hotplug::follow_cpus(Arc::clone(&device))
        .map_err(StartError::io("starting the CPU hotplug thread"))?;
    pfmd_device::logging::start_refusal_summaries()
        .map_err(StartError::io("starting the refusal log thread"))?;
    // However run() ends from here, the pending summaries are written.
    let _summaries = pfmd_device::logging::RefusalSummariesAtExit;

    let transport = start_transport(args, Arc::clone(&device))?;
    tracing::info!(
        transport = transport.describe(),
        fuse_uring = ?args.fuse_uring,
        "transport chosen"
    );
    let device_path = transport.device_path().to_path_buf();
    let link = dev_link(args).filter(|link| *link != device_path);
    if let Some(link) = &link {
        make_link(link, &device_path)?;
    }
    let served = link
        .as_deref()
        .unwrap_or(&device_path)
        .display()
        .to_string();
    super::systemd::ready(&format!(
        "serving {served} over {}, model {}",
        transport.describe(),
        model
    ));
    // The watchdog counts from READY=1 on.
    super::systemd::start_watchdog(Arc::clone(&device))
        .map_err(StartError::io("starting the watchdog thread"))?;
    tracing::info!(device = %served, "pfmd ready");

    let signal = stop
        .wait()
        .map_err(|e| StartError::Config(format!("waiting for signals: {e}")))?;
    tracing::info!(%signal, "stopping");
    super::systemd::stopping();
    if let Some(link) = &link {
        remove_link(link, &device_path);
    }
    transport.stop()?;
    pfmd_device::logging::summarize_refusals_now();
    tracing::info!("stopped");
    Ok(())
}

enum Transport {
    Fuse(FuseTransport),
    Cuse(CuseTransport),
}

impl Transport {
    fn device_path(&self) -> &Path {
        match self {
            Transport::Fuse(t) => &t.device_path,
            Transport::Cuse(t) => &t.device_path,
        }
    }

    /// What serves the device, for the start log.
    fn describe(&self) -> &'static str {
        match self {
            Transport::Fuse(t) if t.uring => "FUSE over io_uring (a queue per CPU)",
            Transport::Fuse(_) => "FUSE (classic /dev/fuse readers)",
            Transport::Cuse(_) => "CUSE",
        }
    }

    /// Stops serving. An error when the device had gone before (the daemon
    /// then exits non-zero, so its unit restarts it).
    fn stop(self) -> Result<(), StartError> {
        match self {
            Transport::Fuse(t) => Ok(t.unmount()?),
            Transport::Cuse(t) => Ok(t.stop()?),
        }
    }
}

/// Stops the daemon the way SIGTERM does: what a transport calls when its
/// device goes away under it.
fn stop_daemon() {
    if let Err(e) = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGTERM) {
        tracing::error!("cannot signal the daemon to stop: {e}");
    }
}

/// `--transport`: CUSE (a real character device) where `/dev/cuse` opens
/// and `auto` or `cuse` asked for it, else the FUSE file.
fn start_transport(args: &Args, device: Arc<Device>) -> Result<Transport, StartError> {
    let fuse = |device| {
        if args.group.is_some() {
            tracing::warn!("--group applies to the CUSE device only; the FUSE file keeps group 0");
        }
        let options = FuseOptions {
            mountpoint: args.mountpoint.clone(),
            mode: args.mode,
            threads: args.threads,
            choice: args.fuse_uring,
        };
        Ok(Transport::Fuse(FuseTransport::mount(
            device,
            &options,
            stop_daemon,
        )?))
    };
    match args.transport {
        TransportChoice::Fuse => fuse(device),
        TransportChoice::Cuse => Ok(Transport::Cuse(start_cuse(args, device)?)),
        TransportChoice::Auto => match start_cuse(args, Arc::clone(&device)) {
            Ok(cuse) => {
                tracing::info!("transport auto: /dev/cuse opened, using CUSE");
                Ok(Transport::Cuse(cuse))
            }
            Err(StartError::Cuse(e @ CuseError::Unavailable { .. })) => {
                tracing::info!("transport auto: {e}; using FUSE");
                fuse(device)
            }
            Err(e) => Err(e),
        },
    }
}

fn start_cuse(args: &Args, device: Arc<Device>) -> Result<CuseTransport, StartError> {
    let gid = match &args.group {
        None => None,
        Some(name) => Some(
            nix::unistd::Group::from_name(name)
                .map_err(|e| StartError::Config(format!("--group {name}: {e}")))?
                .ok_or_else(|| StartError::Config(format!("--group {name}: no such group")))?
                .gid
                .as_raw(),
        ),
    };
    let options = CuseOptions::new(&args.dev_name, args.mode, gid, args.threads);
    Ok(CuseTransport::start(device, &options, stop_daemon)?)
}

fn dev_link(args: &Args) -> Option<PathBuf> {
    (args.dev_link != "none" && !args.dev_link.is_empty()).then(|| PathBuf::from(&args.dev_link))
}

/// Points `link` at the device. An old symlink is replaced only when what it
/// points at is gone (a daemon that died); one that reaches a device another
/// pfmd serves is left alone and pfmd refuses to start; a real file is never
/// touched. A link already pointing at `target` is kept: a daemon that died
/// serving the same path left it, and it reaches this daemon's device now.
fn make_link(link: &Path, target: &Path) -> Result<(), StartError> {
    if let Ok(meta) = std::fs::symlink_metadata(link) {
        if !meta.file_type().is_symlink() {
            return Err(StartError::Config(format!(
                "{} exists and is not a symlink; not replacing it (use --dev-link PATH or none)",
                link.display()
            )));
        }
        let old = std::fs::read_link(link).unwrap_or_default();
        if old == target {
            // Another pfmd serving `target` would have stopped this start
            // at the mount (or the CUSE name) already.
            tracing::info!(link = %link.display(), "keeping the link a daemon that died left to this device");
            return Ok(());
        }
        // statfs, not stat: the kernel answers stat of a FUSE file from its
        // attribute cache after the daemon died, statfs always asks the
        // server. A dead FUSE mount fails (ENOTCONN, or ECONNABORTED while
        // the kernel tears it down), a removed node or mountpoint ENOENT.
        if nix::sys::statfs::statfs(link).is_ok() {
            return Err(StartError::Config(format!(
                "{} points at {}, which another pfmd serves; not taking it over \
                 (stop that daemon, or start this one with --dev-link none or another path)",
                link.display(),
                old.display()
            )));
        }
        tracing::info!(link = %link.display(), old = %old.display(), "replacing a link to a device that is gone");
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
