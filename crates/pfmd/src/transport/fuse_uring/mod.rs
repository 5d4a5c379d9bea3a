//! The FUSE transport over io_uring (`--fuse-uring`): the same one-file
//! filesystem as [`super::fuse`], served by one io_uring per CPU instead of
//! reader threads blocked in `read(2)` on `/dev/fuse`.
//!
//! The kernel queues a FUSE request on the queue of the CPU its caller runs
//! on, and each queue here is served by a thread pinned to that CPU, so a
//! call is answered without a cross-CPU wake-up, and callers on different
//! CPUs share nothing. `PCNTGETINFO` answered over a queue carries
//! `PFM_INFO_URING`, so a client can tell.
//!
//! - [`abi`]: INIT, LOOKUP, GETATTR, SETATTR, READDIR, STATFS and ring
//!   structures (the rest of the wire ABI is [`crate::transport::cuse::abi`]);
//! - [`ring`]: ring entries ⇄ the classic framing, and the SQEs;
//! - [`fs`]: the filesystem's answers; device requests go to the CUSE
//!   session's handler ([`crate::transport::cuse::session::answer_with`]),
//!   one codec for all three channels;
//! - [`conn`]: mount(2), INIT, cloned files, the classic read/write loop;
//! - [`queue`]: one ring thread (the `unsafe`: buffers shared with the
//!   kernel).
//!
//! Life: mount(2) `/dev/fuse` (root only), answer INIT over read/write with
//! FUSE_OVER_IO_URING when the kernel offers it (only while
//! `/sys/module/fuse/parameters/enable_uring` is `Y`), start one classic
//! reader (FORGET and INTERRUPT never go through the ring), then one ring
//! per possible CPU (the kernel serves nothing through the ring until every
//! possible CPU's queue has an entry). No queue thread ever waits: a
//! process's close-then-open that finds its own RELEASE still in flight
//! keeps its ring entry and is answered by the
//! [`open_waiter`](super::open_waiter) thread through the queue's mailbox.
//!
//! Fallback: `auto` checks before mounting that enable_uring is `Y`, that
//! pfmd may run on every online CPU (a queue served from another CPU costs
//! ~3 µs a call, worse than the classic loop) and that an SQE128 ring can be
//! set up; otherwise, or if mount(2) is not permitted, the caller uses the
//! fuser transport as before. If INIT then does not offer io_uring, or a
//! queue cannot register, the connection is served by classic readers here.
//! `on` makes each of those an error; `off` never tries.
//!
//! Unmounting ends the connection: readers get `ENODEV`, each ring entry
//! completes with `ENOTCONN`, and the threads finish. With clients still
//! holding the device the mount is detached instead, as the fuser
//! transport does, and serving goes on until pfmd exits.

pub mod abi;
pub mod conn;
pub mod fs;
pub mod queue;
pub mod ring;

use super::open_waiter::OpenWaiter;
use crate::device::Device;
use conn::ClassicReply;
use fs::Filesystem;
use io_uring::{IoUring, cqueue, squeue};
use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// The module parameter that lets a FUSE connection negotiate io_uring.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
/// Entries per ring: requests of one CPU the kernel may hand it at once
/// (all but one may wait for a release at a time).
pub const ENTRIES_PER_RING: usize = 4;
/// How long a ring thread gets to register.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long unmounting waits for the threads.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// `--fuse-uring`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum UringChoice {
    /// io_uring where the kernel allows it and pfmd may run on every CPU,
    /// else the classic FUSE loop.
    #[default]
    Auto,
    /// io_uring or fail.
    On,
    /// The classic FUSE loop (fuser).
    Off,
    /// This module's own classic loop, never io_uring: the fallback path,
    /// for tests and comparisons.
    #[value(hide = true)]
    Classic,
}

#[derive(Debug, Clone)]
pub struct FuseUringOptions {
    pub mountpoint: PathBuf,
    /// Permission bits of the `pfcntr` file.
    pub mode: u16,
    /// Classic readers when io_uring is not negotiated.
    pub threads: usize,
    pub choice: UringChoice,
}

/// Why the io_uring transport could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum FuseUringError {
    /// Checked before mounting; under `auto` the fuser transport is used.
    #[error("FUSE over io_uring unavailable: {0}")]
    Unavailable(String),
    #[error("mounting {}: {source}", path.display())]
    Mount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("FUSE protocol: {0}")]
    Protocol(String),
    #[error("the kernel did not offer FUSE_OVER_IO_URING at INIT (enable_uring turned N?)")]
    NotOffered,
    #[error("FUSE ring queue {qid}: {what}: {source}")]
    Queue {
        qid: u16,
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

impl FuseUringError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> FuseUringError {
        let what = what.into();
        move |source| FuseUringError::Io { what, source }
    }
}

fn cpu_list(path: &str) -> Result<Vec<u32>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    crate::policy::parse_cpu_list(&text).ok_or_else(|| format!("{path}: cannot parse {text:?}"))
}

/// The kernel makes one queue per possible CPU.
fn possible_cpus() -> Result<usize, String> {
    let cpus = cpu_list("/sys/devices/system/cpu/possible")?;
    Ok(cpus.iter().max().map_or(1, |&c| c as usize + 1))
}

/// Online CPUs this process may run on, and those it may not.
fn online_split() -> Result<(Vec<u32>, Vec<u32>), String> {
    let online = cpu_list("/sys/devices/system/cpu/online")?;
    let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map_err(|e| format!("sched_getaffinity: {e}"))?;
    Ok(online
        .into_iter()
        .partition(|&c| allowed.is_set(c as usize).unwrap_or(false)))
}

/// Whether io_uring can serve here; the reason if not.
pub fn probe() -> Result<(), String> {
    match std::fs::read_to_string(ENABLE_URING) {
        Ok(v) if v.trim() == "Y" => {}
        Ok(_) => return Err(format!("{ENABLE_URING} is N")),
        Err(e) => {
            return Err(format!(
                "{ENABLE_URING}: {e} (kernel without CONFIG_FUSE_IO_URING?)"
            ));
        }
    }
    let (_, barred) = online_split()?;
    if !barred.is_empty() {
        return Err(format!(
            "pfmd may not run on CPUs {barred:?}: their queues would be served from another CPU"
        ));
    }
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(1)
        .map(drop)
        .map_err(|e| format!("io_uring_setup: {e}"))
}

/// A mounted device served over io_uring or this module's classic loop.
/// Dropping it unmounts.
pub struct FuseUringTransport {
    mountpoint: PathBuf,
    pub device_path: PathBuf,
    threads: Vec<JoinHandle<()>>,
    /// Requests come through the rings (else through classic readers only).
    pub uring: bool,
    mounted: bool,
}

impl FuseUringTransport {
    /// Mounts and serves. `Ok(None)`: `off`, or `auto` found io_uring
    /// unusable before mounting: the caller mounts the fuser transport.
    pub fn mount(
        device: Arc<Device>,
        options: &FuseUringOptions,
    ) -> Result<Option<FuseUringTransport>, FuseUringError> {
        let (auto, want_uring) = match options.choice {
            UringChoice::Off => return Ok(None),
            UringChoice::Auto => (true, true),
            UringChoice::On => (false, true),
            UringChoice::Classic => (true, false),
        };
        let probed = if want_uring { probe() } else { Ok(()) };
        if let Err(why) = probed {
            if auto {
                tracing::info!("FUSE over io_uring not used: {why}");
                return Ok(None);
            }
            return Err(FuseUringError::Unavailable(why));
        }
        super::fuse::prepare_mountpoint(&options.mountpoint).map_err(FuseUringError::io(
            format!("preparing {}", options.mountpoint.display()),
        ))?;
        let dev = match conn::mount_device(&options.mountpoint) {
            Ok(dev) => dev,
            Err(FuseUringError::Mount { source, .. })
                if auto && source.raw_os_error() == Some(libc::EPERM) =>
            {
                tracing::info!("FUSE over io_uring not used: mount(2) needs root");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let mut transport = FuseUringTransport {
            mountpoint: options.mountpoint.clone(),
            device_path: options.mountpoint.join(super::fuse::FILE_NAME),
            threads: Vec::new(),
            uring: false,
            mounted: true,
        };
        let negotiated = conn::handshake(&dev, want_uring)?;
        if !negotiated.uring && !auto {
            return Err(FuseUringError::NotOffered);
        }
        let classic_fs = Arc::new(Filesystem {
            device: Arc::clone(&device),
            mode: options.mode,
            started: SystemTime::now(),
            info_flags: 0,
        });
        let classic_waiter = OpenWaiter::start(Arc::clone(&device), "pfm-open-waiter")
            .map_err(FuseUringError::io("starting the open waiter"))?;
        let dev = Arc::new(dev);
        // Until every queue has an entry the kernel keeps using the classic
        // channel, so a reader starts first.
        transport.start_readers(&dev, &classic_fs, &classic_waiter, 0..1)?;
        if negotiated.uring {
            let ring_fs = Arc::new(Filesystem {
                info_flags: pfm_abi::PFM_INFO_URING,
                ..Filesystem::clone(&classic_fs)
            });
            match transport.start_rings(&dev, &ring_fs, &device) {
                Ok(queues) => {
                    transport.uring = true;
                    tracing::info!(
                        path = %transport.device_path.display(),
                        queues,
                        entries_per_queue = ENTRIES_PER_RING,
                        "FUSE transport mounted, served over io_uring"
                    );
                    return Ok(Some(transport));
                }
                Err(e) if auto => {
                    tracing::warn!("{e}; serving FUSE with the classic loop");
                }
                Err(e) => return Err(e),
            }
        } else if want_uring {
            tracing::warn!(
                "{}; serving FUSE with the classic loop",
                FuseUringError::NotOffered
            );
        }
        transport.start_readers(
            &dev,
            &classic_fs,
            &classic_waiter,
            1..options.threads.max(2),
        )?;
        tracing::info!(
            path = %transport.device_path.display(),
            readers = transport.threads.len(),
            "FUSE transport mounted, classic loop"
        );
        Ok(Some(transport))
    }

    fn start_readers(
        &mut self,
        dev: &File,
        fs: &Arc<Filesystem>,
        waiter: &OpenWaiter<ClassicReply>,
        indices: std::ops::Range<usize>,
    ) -> Result<(), FuseUringError> {
        for index in indices {
            let file = Arc::new(conn::clone_device(dev)?);
            let fs = Arc::clone(fs);
            let waiter = waiter.clone();
            let thread = std::thread::Builder::new()
                .name(format!("fuse-{index}"))
                .spawn(move || conn::classic_loop(file, &fs, &waiter, index))
                .map_err(FuseUringError::io("starting a FUSE reader"))?;
            self.threads.push(thread);
        }
        Ok(())
    }

    /// Starts every queue's ring and waits until each has registered.
    /// Returns the number of queues.
    fn start_rings(
        &mut self,
        dev: &Arc<File>,
        fs: &Arc<Filesystem>,
        device: &Arc<Device>,
    ) -> Result<usize, FuseUringError> {
        let queues = possible_cpus().map_err(FuseUringError::Unavailable)?;
        let (online, _) = online_split().map_err(FuseUringError::Unavailable)?;
        let waiter = OpenWaiter::start(Arc::clone(device), "pfm-ring-waiter")
            .map_err(FuseUringError::io("starting the open waiter"))?;
        let (ready_tx, ready_rx) = mpsc::channel();
        for qid in 0..queues {
            let spec = queue::QueueSpec {
                qid: qid as u16,
                cpu: online.contains(&(qid as u32)).then_some(qid),
                entries: ENTRIES_PER_RING,
            };
            let shared = queue::Shared {
                dev: Arc::clone(dev),
                fs: Arc::clone(fs),
                waiter: waiter.clone(),
            };
            let ready = ready_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("fuse-q{qid}"))
                .spawn(move || queue::serve(shared, spec, ready))
                .map_err(FuseUringError::io("starting a FUSE ring thread"))?;
            self.threads.push(thread);
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for _ in 0..queues {
            let left = deadline.saturating_duration_since(Instant::now());
            match ready_rx.recv_timeout(left) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(FuseUringError::Protocol(
                        "a ring thread did not register in time".into(),
                    ));
                }
            }
        }
        Ok(queues)
    }

    /// Unmounts. With clients still holding the device a plain unmount is
    /// EBUSY: then the mount is detached, and the connection ends when this
    /// process exits.
    pub fn unmount(mut self) -> io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<()> {
        if !std::mem::take(&mut self.mounted) {
            return Ok(());
        }
        match nix::mount::umount(&self.mountpoint) {
            Ok(()) => {}
            Err(nix::errno::Errno::EBUSY) => {
                tracing::warn!("clients still hold the device: detaching the mount");
                self.threads.clear();
                return nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH)
                    .map_err(io::Error::from);
            }
            Err(e) => return Err(io::Error::from(e)),
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while self.threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        for thread in self.threads.drain(..) {
            if !thread.is_finished() {
                tracing::warn!("a FUSE thread did not stop");
            } else if thread.join().is_err() {
                tracing::error!("a FUSE thread panicked");
            }
        }
        Ok(())
    }
}

impl Drop for FuseUringTransport {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!("unmounting {}: {e}", self.mountpoint.display());
        }
    }
}
