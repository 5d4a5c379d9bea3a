//! The CUSE transport: `/dev/<name>` as a real character device, served over
//! the FUSE wire protocol on `/dev/cuse` (docs/device.md §1): the same
//! session as FUSE with a different INIT, as libfuse's `cuse_lowlevel` does.
//! Every answer is the [`Handler`](super::handler::Handler)'s; this module
//! is the channel:
//!
//! - [`session`]: CUSE_INIT (asking for unrestricted ioctls, so that the
//!   kernel copies a pointer ioctl's array in the caller's thread), then
//!   reader threads;
//! - [`channel`]: the `/dev/cuse` file and waking its readers (the only
//!   `unsafe`: `poll(2)`, `sigaction(2)`, `pthread_kill(3)`);
//! - [`node`]: the `/dev` node: waiting for it, `--mode`, `--group`.
//!
//! Closing the channel removes the device; `stop()` flags the readers, wakes
//! them out of `read(2)` with a signal, joins them and closes it.

pub mod channel;
pub mod node;
pub mod session;

use super::abi;
use super::handler::{ChannelKind, Handler};
use super::life::Life;
use super::reader::Reader;
use crate::device::Device;
use session::CuseWaits;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The CUSE control device.
pub const CUSE_CHANNEL: &str = "/dev/cuse";
/// How long devtmpfs/udev get to create the node.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long stopping waits for the readers.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct CuseOptions {
    /// Normally [`CUSE_CHANNEL`].
    pub channel: PathBuf,
    /// `DEVNAME`: the device appears as `<dev_dir>/<dev_name>`.
    pub dev_name: String,
    /// Normally `/dev`.
    pub dev_dir: PathBuf,
    /// Permission bits for the node.
    pub mode: u16,
    /// Group owning the node.
    pub gid: Option<u32>,
    /// Reader threads: more than one so no request waits behind another.
    pub threads: usize,
}

impl CuseOptions {
    pub fn new(dev_name: &str, mode: u16, gid: Option<u32>, threads: usize) -> Self {
        CuseOptions {
            channel: PathBuf::from(CUSE_CHANNEL),
            dev_name: dev_name.to_string(),
            dev_dir: PathBuf::from("/dev"),
            mode,
            gid,
            threads,
        }
    }
}

/// Why the CUSE transport could not start or ended.
#[derive(Debug, thiserror::Error)]
pub enum CuseError {
    /// `/dev/cuse` cannot be opened: this kernel has no CUSE (or we lack
    /// permission). The only error after which `--transport auto` uses FUSE.
    #[error("cannot open {}: {source} (no CUSE on this kernel? try `modprobe cuse`, or --transport fuse)", path.display())]
    Unavailable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("--dev-name {0:?}: {1}")]
    BadName(String, &'static str),
    #[error("{} is already served by another CUSE server (/sys/class/cuse/{name} exists)", path.display())]
    AlreadyServed { path: PathBuf, name: String },
    #[error("{} exists and is not a symlink; not replacing it", path.display())]
    InTheWay { path: PathBuf },
    #[error("CUSE protocol: {0}")]
    Protocol(String),
    #[error("the kernel speaks FUSE {major}.{minor}; the CUSE transport needs 7.{min}", min = abi::MIN_KERNEL_MINOR)]
    KernelTooOld { major: u32, minor: u32 },
    #[error("the kernel refused to create the CUSE device {name:?} (name in use? see dmesg)")]
    Refused { name: String },
    #[error("{} did not appear within {waited:?} (no devtmpfs on /dev, and no udev?)", path.display())]
    NodeMissing { path: PathBuf, waited: Duration },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("the kernel ended the CUSE connection while pfmd was serving")]
    ConnectionLost,
}

impl CuseError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> CuseError {
        let what = what.into();
        move |source| CuseError::Io { what, source }
    }
}

/// A served CUSE device. Dropping it stops it too.
pub struct CuseTransport {
    /// None once stopped. The readers hold clones while they run; the last
    /// reference going closes the channel.
    channel: Option<Arc<File>>,
    life: Arc<Life>,
    threads: Vec<JoinHandle<()>>,
    /// The character device, `/dev/<name>`.
    pub device_path: PathBuf,
}

impl CuseTransport {
    /// Opens the channel, creates the device, applies mode and group, and
    /// starts the readers. `on_lost` runs (once, on a reader thread) if the
    /// kernel ends the connection while serving.
    pub fn start(
        device: Arc<Device>,
        options: &CuseOptions,
        on_lost: impl Fn() + Send + Sync + 'static,
    ) -> Result<CuseTransport, CuseError> {
        node::check_name(&options.dev_name)?;
        channel::install_wake_handler()
            .map_err(CuseError::io("installing the reader wake-up handler"))?;
        // Open first: where CUSE is missing, nothing else is touched and
        // `--transport auto` falls back to FUSE.
        let channel = channel::open(&options.channel).map_err(|source| CuseError::Unavailable {
            path: options.channel.clone(),
            source,
        })?;
        let device_path = options.dev_dir.join(&options.dev_name);
        let sys_class = Path::new(node::SYS_CLASS_CUSE);
        node::prepare(&device_path, sys_class, &options.dev_name)?;
        session::handshake(&channel, &options.dev_name)?;
        // The kernel processes the CUSE_INIT reply within our write: the
        // device exists now, or the connection was aborted.
        node::wait_for(
            &device_path,
            sys_class,
            &options.dev_name,
            NODE_TIMEOUT,
            || channel::is_gone(&channel),
        )?;
        node::apply_permissions(&device_path, options.mode, options.gid)?;
        let handler = Arc::new(Handler {
            device,
            kind: ChannelKind::Cuse,
            channel_flags: 0,
            later: crate::later::LaterServer::default(),
        });
        let channel = Arc::new(channel);
        let mut transport = CuseTransport {
            channel: Some(Arc::clone(&channel)),
            life: Arc::new(Life::new(on_lost)),
            threads: Vec::new(),
            device_path,
        };
        let waits = Arc::new(CuseWaits);
        for index in 0..options.threads.max(2) {
            let reader = Reader {
                file: Arc::clone(&channel),
                handler: Arc::clone(&handler),
                waits: Arc::clone(&waits),
                index,
            };
            let life = Arc::clone(&transport.life);
            let thread = std::thread::Builder::new()
                .name(format!("cuse-{index}"))
                .spawn(move || session::serve(&reader, &life))
                .map_err(CuseError::io("starting a CUSE reader thread"))?;
            transport.threads.push(thread);
        }
        tracing::info!(
            path = %transport.device_path.display(),
            mode = format!("{:o}", options.mode),
            gid = options.gid,
            threads = transport.threads.len(),
            "CUSE transport serving"
        );
        Ok(transport)
    }

    /// Stops the readers and closes the channel, which removes the device.
    /// An error if the kernel had ended the connection before.
    pub fn stop(mut self) -> Result<(), CuseError> {
        if self.shutdown() {
            Err(CuseError::ConnectionLost)
        } else {
            Ok(())
        }
    }

    /// Returns whether the connection had been lost.
    fn shutdown(&mut self) -> bool {
        let Some(channel) = self.channel.take() else {
            return false;
        };
        self.life.stop();
        // A reader may be between its flag check and read(2): kick until
        // every one has seen the flag.
        let deadline = Instant::now() + STOP_TIMEOUT;
        while self.threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
            for thread in self.threads.iter().filter(|t| !t.is_finished()) {
                channel::wake(thread);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if self.threads.iter().any(|t| !t.is_finished()) {
            tracing::warn!("a CUSE reader did not stop; closing the channel anyway");
            self.threads.clear();
        }
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("a CUSE reader thread panicked");
            }
        }
        let lost = self.life.was_lost();
        // The readers' references are gone with them (and the per-open
        // workers' with their requests): this drop closes the channel and
        // the kernel removes the device.
        if Arc::strong_count(&channel) != 1 {
            tracing::warn!("CUSE channel still referenced; the device goes when pfmd exits");
        }
        drop(channel);
        node::confirm_removed(&self.device_path);
        lost
    }
}

impl Drop for CuseTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}
