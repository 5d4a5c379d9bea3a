//! The FUSE transport: a one-file filesystem whose `pfcntr` file is the
//! device, for kernels without CUSE. pfmd mounts it itself (mount(2) of
//! `/dev/fuse`) and serves it over one of two channels, both answering
//! through the one [`Handler`]:
//!
//! - **FUSE over io_uring** (`--fuse-uring auto|on`): one ring per CPU,
//!   each served by a thread pinned to that CPU. The kernel queues a
//!   request on the queue of the CPU its caller runs on, so a call is
//!   answered without a cross-CPU wake-up, and callers on different CPUs
//!   share nothing. `PCNTGETINFO` answered over a queue carries
//!   `PFM_INFO_URING`, so a client can tell.
//! - **classic** (`--fuse-uring off`, or where io_uring cannot serve):
//!   reader threads, each on its own clone of the connection, a request per
//!   read(2).
//!
//! - [`conn`]: mount(2), INIT, cloned files, the classic channel;
//! - [`ring`]: ring entries ⇄ the classic framing, and the SQEs;
//! - [`queue`]: one ring thread (the `unsafe`: buffers shared with the
//!   kernel).
//!
//! Life: mount(2) `/dev/fuse` (root only), answer INIT over read/write with
//! FUSE_OVER_IO_URING when the kernel offers it (only while
//! `/sys/module/fuse/parameters/enable_uring` is `Y`), start one classic
//! reader (FORGET and INTERRUPT never go through the ring), then one ring
//! per possible CPU (the kernel serves nothing through the ring until every
//! possible CPU's queue has an entry). No serving thread ever waits: a
//! close-then-open that finds its own RELEASE still in flight is answered by
//! the [`open_waiter`](super::open_waiter) thread, and a pointer ioctl's
//! store is made by the [store helper](super::store), each answer delivered
//! when it is ready.
//!
//! Fallback: `auto` checks before mounting that enable_uring is `Y`, that
//! pfmd may run on every online CPU (a queue served from another CPU costs
//! ~3 µs a call, worse than the classic loop) and that an SQE128 ring can be
//! set up; if INIT then does not offer io_uring, or a queue cannot
//! register, the connection is served by classic readers. `on` makes each
//! of those an error; `off` never tries.
//!
//! Unmounting ends the connection: readers get `ENODEV`, each ring entry
//! completes with `ENOTCONN`, and the threads finish. With clients still
//! holding the device the mount is detached instead, and serving goes on
//! until pfmd exits. A connection that ends while pfmd is not stopping (a
//! `umount -l` whose last client closed) is reported once through
//! `on_lost`: the daemon then stops with an error, so its unit restarts it.

pub mod conn;
mod entries;
pub mod queue;
pub mod ring;

use super::handler::{ChannelKind, FILE_NAME, FileFacts, Handler};
use super::later::LaterServer;
use super::life::Life;
use super::open_waiter::OpenWaiter;
use super::reader::Reader;
use super::store::StoreHelper;
use crate::device::Device;
use conn::ClassicWaits;
use io_uring::{IoUring, cqueue, squeue};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// The module parameter that lets a FUSE connection negotiate io_uring.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
/// Entries per ring: requests of one CPU the kernel may hand it at once.
/// All but one may wait (for a release, a store, or an open's worker), at
/// most [`queue::HELD_PER_USER`] for one user, of which
/// [`queue::WAITING_PER_USER`] opens. The payload buffers are zeroed
/// allocations the kernel fills as far as a request needs, so an entry
/// costs memory only for the largest request it carried. 32: a program's
/// threads on one CPU in pointer ioctls at once each hold one while their
/// stores are made (with 16, and 4 stores a user, 16 threads on 2 CPUs had
/// 42 % of their calls refused; with 32, and 16 a user, none).
pub const ENTRIES_PER_RING: usize = 32;
/// How long a ring thread gets to register: registering is quick, but a
/// start on a machine loaded tenfold has seen a thread wait seconds for a
/// CPU, and a start that gives up leaves no device.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long unmounting waits for the threads.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Why a serving thread ends while pfmd serves: the connection is gone.
const CLASSIC_READER_ENDED: &str = "a classic reader finished: the mount was detached or aborted";
const RING_QUEUE_ENDED: &str = "a ring queue finished: the mount was detached or aborted";

/// `--fuse-uring`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum UringChoice {
    /// io_uring where the kernel allows it and pfmd may run on every CPU,
    /// else the classic channel.
    #[default]
    Auto,
    /// io_uring or fail.
    On,
    /// The classic channel: reader threads on `/dev/fuse`.
    Off,
}

#[derive(Debug, Clone)]
pub struct FuseOptions {
    pub mountpoint: PathBuf,
    /// Permission bits of the `pfcntr` file.
    pub mode: u16,
    /// Classic readers when io_uring is not negotiated.
    pub threads: usize,
    pub choice: UringChoice,
}

/// Why the FUSE transport could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum FuseError {
    /// Checked before mounting; under `auto` the classic channel is used.
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
    #[error("{} is already served (is another pfmd running?)", path.display())]
    AlreadyServed { path: PathBuf },
    #[error("the FUSE connection ended while pfmd was serving (the mount was detached or aborted)")]
    ConnectionLost,
}

impl FuseError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> FuseError {
        let what = what.into();
        move |source| FuseError::Io { what, source }
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

/// The classic readers' shares: a clone of the connection each, and one
/// link to the store helper, which writes each store's reply to the clone
/// its request came from.
struct ClassicChannel {
    files: Vec<Arc<File>>,
    handler: Arc<Handler>,
    waits: Arc<ClassicWaits>,
}

/// The classic readers serve until the connection ends, even once pfmd is
/// stopping: a mount detached with clients still holding the device is
/// served until pfmd exits.
static SERVE_UNTIL_UNMOUNTED: AtomicBool = AtomicBool::new(false);

/// A mounted device. Dropping it unmounts.
pub struct FuseTransport {
    mountpoint: PathBuf,
    pub device_path: PathBuf,
    threads: Vec<JoinHandle<()>>,
    /// Requests come through the rings (else through classic readers only).
    pub uring: bool,
    mounted: bool,
    life: Arc<Life>,
    stores: Option<StoreHelper>,
    /// The mountpoint directory under the mount, locked for the daemon's
    /// life ([`prepare_mountpoint`]).
    _claim: nix::fcntl::Flock<std::fs::File>,
}

impl FuseTransport {
    /// Mounts and serves. `on_lost` runs (once, on a serving thread) if the
    /// connection ends while pfmd is not stopping.
    pub fn mount(
        device: Arc<Device>,
        options: &FuseOptions,
        on_lost: impl Fn() + Send + Sync + 'static,
    ) -> Result<FuseTransport, FuseError> {
        let (auto, want_uring) = match options.choice {
            UringChoice::Off => (true, false),
            UringChoice::Auto => (true, true),
            UringChoice::On => (false, true),
        };
        let mut want_uring = want_uring;
        if want_uring && let Err(why) = probe() {
            if !auto {
                return Err(FuseError::Unavailable(why));
            }
            tracing::info!("FUSE over io_uring not used: {why}");
            want_uring = false;
        }
        let claim = prepare_mountpoint(&options.mountpoint)?;
        let mut stores =
            StoreHelper::spawn().map_err(FuseError::io("starting the store helper"))?;
        let dev = conn::mount_device(&options.mountpoint)?;
        let mut transport = FuseTransport {
            mountpoint: options.mountpoint.clone(),
            device_path: options.mountpoint.join(FILE_NAME),
            threads: Vec::new(),
            uring: false,
            mounted: true,
            life: Arc::new(Life::new(on_lost)),
            stores: None,
            _claim: claim,
        };
        // A helper that dies while pfmd serves leaves pointer ioctls
        // unanswerable: the daemon ends, and its unit restarts it.
        let life = Arc::clone(&transport.life);
        stores
            .watch(move |status| {
                if !life.is_stopping() {
                    tracing::error!(%status, "the store helper died");
                }
                life.ended("FUSE", "the store helper ended");
            })
            .map_err(FuseError::io("watching the store helper"))?;
        transport.stores = Some(stores);
        let negotiated = conn::handshake(&dev, want_uring)?;
        if want_uring && !negotiated.uring && !auto {
            return Err(FuseError::NotOffered);
        }
        let facts = FileFacts {
            mode: options.mode,
            started: SystemTime::now(),
        };
        let classic = Arc::new(Handler {
            device: Arc::clone(&device),
            kind: ChannelKind::Fuse(facts),
            channel_flags: 0,
            later: LaterServer::default(),
        });
        let classic_waiter = OpenWaiter::start(Arc::clone(&device), "pfm-open-waiter")
            .map_err(FuseError::io("starting the open waiter"))?;
        let dev = Arc::new(dev);
        let readers = options.threads.max(2);
        // A reply goes to the clone its request was read from.
        let files: Vec<Arc<File>> = (0..readers)
            .map(|_| conn::clone_device(&dev).map(Arc::new))
            .collect::<Result<_, _>>()?;
        let reply_files: Vec<_> = files
            .iter()
            .map(|f| std::os::fd::AsFd::as_fd(&**f))
            .collect();
        let classic_channel = ClassicChannel {
            waits: Arc::new(ClassicWaits {
                waiter: classic_waiter,
                // The helper writes each store's reply to its reader's clone.
                stores: transport
                    .store_helper()
                    .classic_link(&reply_files)
                    .map_err(FuseError::io("linking to the store helper"))?,
            }),
            files,
            handler: classic,
        };
        // Until every queue has an entry the kernel keeps using the classic
        // channel, so a reader starts first.
        transport.start_classic(&classic_channel, 0..1)?;
        if negotiated.uring {
            let ring = Arc::new(Handler {
                channel_flags: pfm_abi::PFM_INFO_URING,
                ..Handler::clone(&classic_channel.handler)
            });
            match transport.start_rings(&dev, &ring, &device) {
                Ok(queues) => {
                    transport.uring = true;
                    tracing::info!(
                        path = %transport.device_path.display(),
                        queues,
                        entries_per_queue = ENTRIES_PER_RING,
                        "FUSE transport mounted, served over io_uring"
                    );
                    return Ok(transport);
                }
                Err(e) if auto => {
                    tracing::warn!("{e}; serving FUSE with the classic channel");
                }
                Err(e) => return Err(e),
            }
        } else if want_uring {
            tracing::warn!(
                "{}; serving FUSE with the classic channel",
                FuseError::NotOffered
            );
        }
        transport.start_classic(&classic_channel, 1..readers)?;
        tracing::info!(
            path = %transport.device_path.display(),
            readers,
            "FUSE transport mounted, classic channel"
        );
        Ok(transport)
    }

    fn store_helper(&self) -> &StoreHelper {
        self.stores
            .as_ref()
            .expect("the store helper lives as long as the transport")
    }

    /// Starts the classic readers `indices`.
    fn start_classic(
        &mut self,
        channel: &ClassicChannel,
        indices: std::ops::Range<usize>,
    ) -> Result<(), FuseError> {
        for index in indices {
            let reader = Reader {
                file: Arc::clone(&channel.files[index]),
                handler: Arc::clone(&channel.handler),
                waits: Arc::clone(&channel.waits),
                index,
            };
            let life = Arc::clone(&self.life);
            let thread = std::thread::Builder::new()
                .name(format!("fuse-{index}"))
                .spawn(move || {
                    let ended = reader.serve(conn::READ_BUFFER, &SERVE_UNTIL_UNMOUNTED);
                    tracing::debug!(reader = index, ?ended, "classic reader finished");
                    life.ended("FUSE", CLASSIC_READER_ENDED);
                })
                .map_err(FuseError::io("starting a FUSE reader"))?;
            self.threads.push(thread);
        }
        Ok(())
    }

    /// Starts every queue's ring and waits until each has registered.
    /// Returns the number of queues.
    fn start_rings(
        &mut self,
        dev: &Arc<File>,
        handler: &Arc<Handler>,
        device: &Arc<Device>,
    ) -> Result<usize, FuseError> {
        let queues = possible_cpus().map_err(FuseError::Unavailable)?;
        let (online, _) = online_split().map_err(FuseError::Unavailable)?;
        let waiter = OpenWaiter::start(Arc::clone(device), "pfm-ring-waiter")
            .map_err(FuseError::io("starting the open waiter"))?;
        let (ready_tx, ready_rx) = mpsc::channel();
        for qid in 0..queues {
            let cpu = online.contains(&(qid as u32)).then_some(qid);
            let spec = queue::QueueSpec {
                qid: qid as u16,
                cpu,
                entries: ENTRIES_PER_RING,
            };
            let shared = queue::Shared {
                dev: Arc::clone(dev),
                handler: Arc::clone(handler),
                waiter: waiter.clone(),
                stores: self
                    .store_helper()
                    .link(cpu)
                    .map_err(FuseError::io("linking to the store helper"))?,
            };
            let ready = ready_tx.clone();
            let life = Arc::clone(&self.life);
            let thread = std::thread::Builder::new()
                .name(format!("fuse-q{qid}"))
                .spawn(move || {
                    if queue::serve(shared, spec, ready) {
                        life.ended("FUSE", RING_QUEUE_ENDED);
                    }
                })
                .map_err(FuseError::io("starting a FUSE ring thread"))?;
            self.threads.push(thread);
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        for _ in 0..queues {
            let left = deadline.saturating_duration_since(Instant::now());
            match ready_rx.recv_timeout(left) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(FuseError::Protocol(
                        "a ring thread did not register in time".into(),
                    ));
                }
            }
        }
        Ok(queues)
    }

    /// Unmounts. With clients still holding the device a plain unmount is
    /// EBUSY: then the mount is detached, and the connection ends when this
    /// process exits. An error if the connection had ended before.
    pub fn unmount(mut self) -> Result<(), FuseError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), FuseError> {
        if !std::mem::take(&mut self.mounted) {
            return Ok(());
        }
        self.life.stop();
        if self.life.was_lost() {
            // Detached already: nothing to unmount, and the threads are gone.
            self.stores.take();
            return Err(FuseError::ConnectionLost);
        }
        match nix::mount::umount(&self.mountpoint) {
            Ok(()) => {}
            Err(nix::errno::Errno::EBUSY) => {
                tracing::warn!("clients still hold the device: detaching the mount");
                self.threads.clear();
                // The detached mount is served until pfmd exits, pointer
                // ioctls too (stopping the store helper now would answer
                // those EIO): the helper goes when pfmd's end of its
                // control socket closes at exit, or by PR_SET_PDEATHSIG.
                std::mem::forget(self.stores.take());
                return nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH)
                    .map_err(|e| FuseError::Io {
                        what: format!("detaching {}", self.mountpoint.display()),
                        source: io::Error::from(e),
                    });
            }
            Err(e) => {
                self.stores.take();
                return Err(FuseError::Io {
                    what: format!("unmounting {}", self.mountpoint.display()),
                    source: io::Error::from(e),
                });
            }
        }
        // Unmounted: nothing is served any more. The store helper leaves
        // once its links close; one stuck in a caller's page fault holds
        // nothing of ours.
        self.stores.take();
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

impl Drop for FuseTransport {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!("{e}");
        }
    }
}

/// Whether a request to a FUSE mount failed because its server is gone:
/// ENOTCONN once the kernel has aborted the connection. A killed daemon's
/// connection ends a moment after it was reaped (its store helper still
/// holds it; over io_uring the rings go in steps, up to a second or so): a
/// request made meanwhile ends ECONNABORTED when the abort comes, or
/// ECANCELED where a ring queue of the dead daemon had it.
fn server_gone(errno: nix::errno::Errno) -> bool {
    use nix::errno::Errno;
    matches!(
        errno,
        Errno::ENOTCONN | Errno::ECONNABORTED | Errno::ECANCELED
    )
}

/// Makes `path` a usable mountpoint, and claims it: created if missing; a
/// dead FUSE mount (its server gone after a crash) lazily unmounted; a live
/// pfm mount refused. `statfs` always reaches the FUSE server (attributes
/// may be cached), so it tells a dead mount from a live one without opening
/// the device. Two daemons started at once both find no mount: the
/// directory is locked (`flock`, held until the daemon exits), and the one
/// that does not get the lock is refused; one that opens the directory
/// after the other mounted gets the mount's root instead, and the second
/// look finds the mount.
fn prepare_mountpoint(path: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, FuseError> {
    let io = |what: &str| FuseError::io(format!("{what} {}", path.display()));
    let served = || {
        Err(FuseError::AlreadyServed {
            path: path.to_path_buf(),
        })
    };
    let live_pfm_mount = |fs: &nix::sys::statfs::Statfs| {
        fs.filesystem_type() == nix::sys::statfs::FUSE_SUPER_MAGIC
            && std::fs::symlink_metadata(path.join(FILE_NAME)).is_ok()
    };
    match nix::sys::statfs::statfs(path) {
        Err(errno) if server_gone(errno) => {
            tracing::warn!(path = %path.display(), %errno, "stale FUSE mount from a crashed daemon: detaching it");
            nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH)
                .map_err(|e| io("detaching")(e.into()))?;
        }
        Err(nix::errno::Errno::ENOENT) => std::fs::create_dir_all(path).map_err(io("creating"))?,
        Err(e) => return Err(io("examining")(e.into())),
        Ok(fs) if live_pfm_mount(&fs) => return served(),
        Ok(_) => {}
    }
    let dir = std::fs::File::open(path).map_err(io("opening"))?;
    let claim = match nix::fcntl::Flock::lock(dir, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(claim) => claim,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return served(),
        Err((_, e)) => return Err(io("locking")(e.into())),
    };
    match nix::sys::statfs::statfs(path) {
        Ok(fs) if live_pfm_mount(&fs) => served(),
        _ => Ok(claim),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    #[test]
    fn a_mount_whose_server_died_is_told_by_its_errno_also_while_it_goes() {
        for gone in [Errno::ENOTCONN, Errno::ECONNABORTED, Errno::ECANCELED] {
            assert!(server_gone(gone), "{gone}");
        }
        for other in [Errno::ENOENT, Errno::EACCES, Errno::EIO, Errno::EINTR] {
            assert!(!server_gone(other), "{other}");
        }
    }
}
