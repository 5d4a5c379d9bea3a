//! The transport-free device: typed requests from a caller in, data or an
//! errno out. Transports (FUSE, CUSE) only translate to and from it.
//!
//! State is laid out so that no request of one open waits on another open's
//! work:
//! - the open table is read-mostly (an `RwLock` held only to find or insert
//!   a file); each open has its own lock, under which its own perf work runs;
//! - the driver counts of a CPU are checked out by the open that holds the
//!   CPU and go back to the [`store`] at close, so a request touches no
//!   shared counts;
//! - the store (CPU holders, counts not checked out, the carried selection)
//!   is locked only for bookkeeping at open, close and selection changes,
//!   never around perf calls, `/proc` reads or copies.

pub mod budget;
mod counters;
mod error;
mod histogram;
mod hotplug;
pub mod memory;
mod open_file;
mod profiling;
mod readers;
mod requests;
mod selection;
mod session;
mod store;
mod tally;

#[cfg(any(test, feature = "test-fixtures"))]
pub mod test_fixtures;
#[cfg(test)]
mod tests;

pub use error::DeviceError;

use crate::backend::Backend;
use crate::policy::{Caller, SecurityPolicy};
use open_file::{OpenFile, Opening};
use pfm_abi::{Items, OpenMode, Request, numbers};
use pfm_model::{EventMap, Implementation, Model};
use session::Session;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use store::Store;

pub type FileId = u64;

/// PCNTCALLER ranges a kernel profile may have (docs/device.md §6).
pub const MAX_CALLER_RANGES: usize = 4;

/// Fixed facts the device is built with.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    pub implementation: Implementation,
    /// Nominal clock in kHz, for `pr_cycle` and cycle approximations.
    pub cpu_khz: u64,
    /// `sysconf(_SC_NPROCESSORS_CONF)`: the length of an EACH-mode array.
    pub configured_cpus: usize,
    /// The CPUs online at start; [`Device::cpus_changed`] follows them.
    pub online_cpus: Vec<u32>,
    pub policy: SecurityPolicy,
    pub event_map: EventMap,
    /// Largest profile histogram one open may allocate (`--max-profile-bytes`).
    pub max_profile_bytes: u64,
    /// What all opens together, and each user's, may take.
    pub limits: budget::Limits,
    /// Kernel text `[_stext, _etext)` from /proc/kallsyms, if readable.
    pub kernel_text: Option<(u64, u64)>,
    /// Reads spanning this many CPUs or more go to a reader thread per CPU
    /// (`--parallel-reads`); 0: the caller reads every CPU itself.
    pub parallel_reads: usize,
}

/// Bytes to store at an address the caller passed (pointer arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerStore {
    pub addr: u64,
    pub bytes: Vec<u8>,
}

/// A successful ioctl: `out` is copied back through the ioctl's own argument
/// (`_IOR`), `store` is written at the caller's pointer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IoctlReply {
    pub out: Vec<u8>,
    pub store: Option<CallerStore>,
}

impl IoctlReply {
    fn none() -> Self {
        IoctlReply::default()
    }
    fn out(bytes: &[u8]) -> Self {
        IoctlReply {
            out: bytes.to_vec(),
            store: None,
        }
    }
    pub fn store(addr: u64, bytes: Vec<u8>) -> Self {
        IoctlReply {
            out: Vec::new(),
            store: Some(CallerStore { addr, bytes }),
        }
    }
}

/// One open file: its own lock, taken by its own requests only, and when a
/// descriptor of it was last closed (FUSE FLUSH) since its last request,
/// kept apart so that looking at it never waits on the open's work.
struct Slot {
    file: Mutex<OpenFile>,
    /// The process that opened it (fixed; read without the file's lock).
    opener_tgid: i32,
    /// A [`stamp`] of the close, 0 for none: every request clears it with
    /// one store.
    closed: AtomicU64,
    /// A ONE open's CPU (fixed), and whether a caller was found no longer
    /// bound to it (logged once).
    one_cpu: Option<u32>,
    left_one_cpu: AtomicBool,
    /// Whether the open followed any PME thread after its last request:
    /// then its requests are served off the transport's serving threads
    /// (see [`Waiting`]).
    follows_threads: AtomicBool,
}

/// Whether a request may wait for its open (another request on it) and
/// take long. A thread that serves every caller must not: one user's
/// slow changes would hold it, and everyone else would wait for a free
/// one (docs/device.md §8). An open that follows PME threads is always
/// slow to change or read at will: its host events are inherited by every
/// child of those threads (4,000 children of 8 threads made one mux change
/// take 90 ms), a cost that its caller decides and we cannot see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// A thread of the open's own (the transport's per-open worker).
    Allowed,
    /// A serving thread: a request that would wait, or whose open follows
    /// PME threads, is [`DeviceError::ServeElsewhere`].
    Refused,
}

/// Now, in nanoseconds since the first call, never 0.
fn stamp() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX) | 1
}

/// How soon a release follows the last close that FUSE tells of first: past
/// it, the close was not the last (another copy is open), and an open is
/// refused at once instead of waiting.
pub const RELEASE_FOLLOWS_CLOSE: std::time::Duration = std::time::Duration::from_secs(1);

type FileSlot = Arc<Slot>;

pub struct Device {
    config: DeviceConfig,
    model: &'static Model,
    backend: Arc<dyn Backend>,
    files: RwLock<HashMap<FileId, FileSlot>>,
    next_id: AtomicU64,
    store: Store,
    budgets: budget::Budgets,
    /// The CPUs online now, in order.
    online: RwLock<Vec<u32>>,
    readers: readers::GroupReaders,
}

/// Locks `mutex`, taking over a lock a panicking request left behind: the
/// panic was answered with `EIO` and the state it guards stays consistent
/// enough to serve (each request leaves it whole or returns early).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs one request, answering a panic inside it with `EIO` instead of
/// losing the thread that serves it (and every later request with it).
fn contained<T>(
    what: &str,
    work: impl FnOnce() -> Result<T, DeviceError>,
) -> Result<T, DeviceError> {
    catch_unwind(AssertUnwindSafe(work)).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        tracing::error!(request = what, "request failed with a bug in pfmd: {why}");
        Err(DeviceError::Internal(format!("{what}: {why}")))
    })
}

impl Device {
    pub fn new(config: DeviceConfig, backend: Arc<dyn Backend>) -> Self {
        let slots = config.configured_cpus.max(
            config
                .online_cpus
                .iter()
                .map(|&c| c as usize + 1)
                .max()
                .unwrap_or(0),
        );
        let model = Model::of(config.implementation);
        Device {
            store: Store::new(slots, model.first_periods),
            budgets: budget::Budgets::new(config.limits.clone()),
            model,
            backend,
            files: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            online: RwLock::new(config.online_cpus.clone()),
            readers: readers::GroupReaders::new(config.parallel_reads, slots),
            config,
        }
    }

    /// Open files now (takes the open table's lock: a liveness probe).
    pub fn open_count(&self) -> usize {
        self.files.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The CPUs online now, in order.
    pub fn online_cpus(&self) -> Vec<u32> {
        self.online
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    fn file(&self, id: FileId) -> Result<FileSlot, DeviceError> {
        self.files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
            .ok_or_else(|| DeviceError::invalid("no such open file"))
    }

    /// `open(2)`: `flags` are the open flags carrying the mode bits. Never
    /// waits: a device held by someone else is an immediate `EBUSY`.
    pub fn open(&self, caller: &Caller, flags: i32) -> Result<FileId, DeviceError> {
        let result = self.open_again(caller, flags);
        if let Err(e) = &result {
            tracing::debug!(tid = caller.tid(), errno = %e.errno(), "open refused: {e}");
            note_refusal(caller, e);
        }
        result
    }

    /// [`Device::open`] tried again for an open that waits for a release
    /// in flight: its refusal was tallied at the first try, and the retries
    /// (every few milliseconds) would make one refusal hundreds in the log.
    pub fn open_again(&self, caller: &Caller, flags: i32) -> Result<FileId, DeviceError> {
        contained("open", || self.open_file(caller, flags))
    }

    fn open_file(&self, caller: &Caller, flags: i32) -> Result<FileId, DeviceError> {
        let mode = OpenMode::from_open_flags(flags);
        // A device held by another open is refused before anything costs:
        // a loop of refused opens reads no /proc and probes nothing.
        let online = self.online_cpus();
        if mode != OpenMode::One
            && let Some(holder) = self.store.holders_of(&online).first()
        {
            return Err(DeviceError::Busy(format!(
                "the device is held by another open ({holder})"
            )));
        }
        // Everything slow happens before the store is locked: the /proc
        // read and the probe for another perf user of the counters.
        let creds = caller.credentials()?;
        let cpus = match mode {
            OpenMode::One => match creds.cpus_allowed.as_slice() {
                [cpu] if online.contains(cpu) => vec![*cpu],
                allowed => {
                    return Err(DeviceError::invalid(format!(
                        "PCNTOPENONE needs the caller bound to exactly one CPU; tid {} may run on {allowed:?}",
                        caller.tid()
                    )));
                }
            },
            OpenMode::Each | OpenMode::All => online,
        };
        // A device held by another open is refused before the probe, which
        // sleeps: a loop of refused opens must cost nothing.
        if let Some(holder) = self.store.holders_of(&cpus).first() {
            return Err(DeviceError::Busy(format!(
                "the device is held by another open ({holder})"
            )));
        }
        let shared = if self.backend.hardware_contended(&cpus) {
            if !self.config.policy.may_reset_busy(creds) {
                return Err(DeviceError::Busy(
                    "another tool is using the performance counters".into(),
                ));
            }
            tracing::warn!(
                tid = caller.tid(),
                "another perf user holds the hardware counters: privileged open shares them by multiplexing; counts are scaled"
            );
            true
        } else {
            false
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let opener_tgid = creds.tgid;
        let one_cpu = (mode == OpenMode::One).then(|| cpus[0]);
        let checkout =
            self.store
                .check_out(id, creds.euid, &cpus, now_cycles(self.config.cpu_khz))?;
        let file = OpenFile::new(
            Opening {
                tgid: creds.tgid,
                uid: creds.euid,
                mode,
                cpus,
                tallies: checkout.tallies,
                state: checkout.state,
                shared,
            },
            self.store.slots(),
        );
        self.files
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id,
                Arc::new(Slot {
                    file: Mutex::new(file),
                    opener_tgid,
                    closed: AtomicU64::new(0),
                    one_cpu,
                    left_one_cpu: AtomicBool::new(false),
                    follows_threads: AtomicBool::new(false),
                }),
            );
        tracing::debug!(file = id, tid = caller.tid(), ?mode, "opened");
        Ok(id)
    }

    /// `close(2)` of one descriptor of an open file (FUSE FLUSH). The
    /// release that follows the last close comes later and on its own (FUSE
    /// sends it after `close(2)` has returned), so an open right after may
    /// find the device still held: see [`Device::release_in_flight`].
    ///
    /// Only a close by the opener's own process marks its release as on
    /// the way: a child that inherited the descriptor and closes it (an exec
    /// of a close-on-exec descriptor) leaves the opener holding the device,
    /// and other opens must then be refused at once, not made to wait.
    ///
    /// Reads no `/proc` file of the caller: a FLUSH can come from a thread
    /// in the middle of `execve` (closing its close-on-exec descriptors) that
    /// holds locks those need, and waits for this very reply.
    pub fn flush(&self, id: FileId, caller: &Caller) {
        if let Ok(slot) = self.file(id)
            && crate::policy::same_process(slot.opener_tgid, caller.tid())
        {
            slot.closed.store(stamp(), Ordering::Relaxed);
        }
    }

    /// True when every open holding CPUs that an open by `caller` in
    /// `flags`' mode needs had a descriptor closed since its last request,
    /// less than [`RELEASE_FOLLOWS_CLOSE`] ago: its release is probably on
    /// the way (a process that exits, or closes and opens again), and a
    /// transport may wait for it a little instead of answering `EBUSY` at
    /// once. Never true for a holder still at work. A close that was not
    /// the last (a `dup`, a child's copy) cannot be told from one that was
    /// until the second has passed: opens in it wait, then get `EBUSY`.
    pub fn release_in_flight(&self, caller: &Caller, flags: i32) -> bool {
        let cpus = match OpenMode::from_open_flags(flags) {
            OpenMode::One => match caller.credentials() {
                Ok(creds) => creds.cpus_allowed.clone(),
                Err(_) => return false,
            },
            OpenMode::Each | OpenMode::All => self.online_cpus(),
        };
        // No holder any more: the release landed between the refusal and
        // now, and a retry succeeds at once.
        // A holder already out of the open table is being released now.
        self.store.holders_of(&cpus).iter().all(|id| {
            self.file(*id).map_or(true, |slot| {
                let at = slot.closed.load(Ordering::Relaxed);
                at != 0 && stamp().saturating_sub(at) < RELEASE_FOLLOWS_CLOSE.as_nanos() as u64
            })
        })
    }

    /// Blocks until some open is released or `timeout` passes.
    pub fn wait_for_release(&self, timeout: std::time::Duration) {
        self.store.wait_for_release(timeout);
    }

    /// Last close of an open file: interrupts off, host events stopped, CPUs
    /// free. The counts go back to the device.
    pub fn release(&self, id: FileId) {
        let _ = contained("release", || {
            let removed = self
                .files
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            let Some(slot) = removed else {
                return Ok(());
            };
            let mut file = lock(&slot.file);
            if let Err(e) = file.stop_counting(self.config.cpu_khz, &self.readers) {
                tracing::warn!(file = id, "final read on close failed: {e}");
            }
            self.store
                .check_in(id, file.opener.uid, &file.opener.cpus, &file.tallies);
            tracing::debug!(file = id, pid = file.opener.tgid, "closed");
            let freed = file.sampled.profile_charge.is_some();
            drop(file);
            drop(slot);
            if freed {
                memory::return_freed_memory();
            }
            Ok(())
        });
    }

    /// `read(2)`: the profile buckets from byte 0 on every call, whatever the
    /// file offset (docs/device.md §6). A large read reaches us in pieces
    /// whose offsets count up from 0 within the call; the piece at offset 0
    /// takes the snapshot every later piece of the same call is served
    /// from. Copies only the bytes returned.
    pub fn read(
        &self,
        id: FileId,
        caller: &Caller,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, DeviceError> {
        self.read_as(id, caller, offset, size, Waiting::Allowed)
    }

    /// [`Device::read`], or [`DeviceError::ServeElsewhere`] where it would
    /// wait and `waiting` refuses that.
    pub fn read_as(
        &self,
        id: FileId,
        caller: &Caller,
        offset: u64,
        size: u32,
        waiting: Waiting,
    ) -> Result<Vec<u8>, DeviceError> {
        contained("read", || {
            let slot = self.file(id)?;
            note_left_one_cpu(&slot, caller);
            let mut file = lock_as(&slot, waiting)?;
            // Profiling deselected: nothing to read, as PCNTGETRSIZE says
            // (the buckets stay for a later PCNTSETITEMS that selects it).
            if !file.settings.items.contains(Items::PROFILING) {
                file.sampled.read_snapshots.clear();
                return Ok(Vec::new());
            }
            Ok(file.read_profile(caller.tid(), offset, size as usize, &self.budgets))
        })
    }

    /// `write(2)`: the device has none, like a character driver without a
    /// write method.
    pub fn write(&self, _id: FileId) -> Result<usize, DeviceError> {
        Err(DeviceError::invalid("the device has no write method"))
    }

    /// `mmap(2)`: the device has no memory to map (`ENODEV`, as a character
    /// driver without an mmap method).
    pub fn mmap(&self, _id: FileId) -> Result<(), DeviceError> {
        Err(DeviceError::NoDevice("the device cannot be mapped".into()))
    }

    /// The most bytes any ioctl stores through its pointer on this device:
    /// an EACH array of the largest per-CPU structure (`struct pfipls`)
    /// over every configured CPU. What a channel whose kernel copies the
    /// store names as the caller's array.
    pub fn max_store_len(&self) -> usize {
        let largest = size_of::<pfm_abi::PfIpls>()
            .max(size_of::<pfm_abi::PfCntrsEv5>())
            .max(size_of::<pfm_abi::PfCntrsEv6>())
            .max(size_of::<pfm_abi::PfCntrs>());
        let online_slots = self
            .online_cpus()
            .iter()
            .max()
            .map_or(0, |&c| c as usize + 1);
        largest * self.config.configured_cpus.max(online_slots).max(1)
    }

    /// One ioctl, decoded from its number and input bytes.
    pub fn ioctl(
        &self,
        id: FileId,
        caller: &Caller,
        cmd: u32,
        data: &[u8],
    ) -> Result<IoctlReply, DeviceError> {
        self.ioctl_as(id, caller, cmd, data, Waiting::Allowed)
    }

    /// [`Device::ioctl`], or [`DeviceError::ServeElsewhere`] where it would
    /// wait or take long and `waiting` refuses that.
    pub fn ioctl_as(
        &self,
        id: FileId,
        caller: &Caller,
        cmd: u32,
        data: &[u8],
        waiting: Waiting,
    ) -> Result<IoctlReply, DeviceError> {
        let name = numbers::name(cmd).unwrap_or("?");
        let result = contained(name, || {
            let request = pfm_abi::decode(cmd, data)?;
            self.request_as(id, caller, request, waiting)
        });
        match &result {
            Ok(_) => tracing::trace!(file = id, tid = caller.tid(), cmd = name, "ioctl"),
            Err(DeviceError::ServeElsewhere) => {}
            Err(e) => {
                tracing::debug!(
                    file = id,
                    tid = caller.tid(),
                    cmd = name,
                    errno = %e.errno(),
                    "ioctl refused: {e}"
                );
                note_refusal(caller, e);
            }
        }
        result
    }

    /// One typed request.
    pub fn request(
        &self,
        id: FileId,
        caller: &Caller,
        request: Request,
    ) -> Result<IoctlReply, DeviceError> {
        self.request_as(id, caller, request, Waiting::Allowed)
    }

    fn request_as(
        &self,
        id: FileId,
        caller: &Caller,
        request: Request,
        waiting: Waiting,
    ) -> Result<IoctlReply, DeviceError> {
        let family = self.model.family();
        if let Some(wanted) = request.family().filter(|f| *f != family) {
            return Err(DeviceError::invalid(format!(
                "{wanted:?} ioctl on a device emulating {}",
                self.config.implementation
            )));
        }
        let slot = self.file(id)?;
        let mut file = lock_as(&slot, waiting)?;
        slot.closed.store(0, Ordering::Relaxed);
        note_left_one_cpu(&slot, caller);
        self.check_cpu_online(&file, &request)?;
        let reply = Session {
            device: self,
            file: &mut file,
            caller,
        }
        .serve(request);
        slot.follows_threads
            .store(!file.settings.pme.is_empty(), Ordering::Relaxed);
        reply
    }
}

/// The open's lock, as `waiting` allows: a serving thread neither waits for
/// it nor takes an open that follows PME threads.
fn lock_as(slot: &Slot, waiting: Waiting) -> Result<MutexGuard<'_, OpenFile>, DeviceError> {
    if waiting == Waiting::Allowed {
        return Ok(lock(&slot.file));
    }
    if slot.follows_threads.load(Ordering::Relaxed) {
        return Err(DeviceError::ServeElsewhere);
    }
    match slot.file.try_lock() {
        Ok(file) => Ok(file),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => Err(DeviceError::ServeElsewhere),
    }
}

/// Logs, once per open, a ONE open's caller that is no longer bound to its
/// CPU: its counts stay that CPU's, whatever the thread runs on now (the
/// thread must stay bound, docs/device.md §2).
fn note_left_one_cpu(slot: &Slot, caller: &Caller) {
    let Some(cpu) = slot.one_cpu else { return };
    if slot.left_one_cpu.load(Ordering::Relaxed) || caller.bound_to(cpu) != Some(false) {
        return;
    }
    if !slot.left_one_cpu.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            tid = caller.tid(),
            "a PCNTOPENONE caller is no longer bound to CPU {cpu}: its counts are still CPU {cpu}'s, \
             whatever CPU the thread runs on now (bind it to CPU {cpu} again, or open EACH)"
        );
    }
}

/// Tallies a refusal for the per-user log summary (the uid only when the
/// request already read it: no /proc read just for the log).
fn note_refusal(caller: &Caller, e: &DeviceError) {
    let uid = caller.uid_hint().unwrap_or(u32::MAX);
    if let DeviceError::NotSupported(why) = e {
        crate::logging::unavailable_selected(uid, why);
    }
    crate::logging::refused(uid, e.errno_name());
}

/// The host cycle stamp: CLOCK_MONOTONIC nanoseconds at the nominal clock.
fn now_cycles(khz: u64) -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux; 0 would only make pr_cycle stale.
    let ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|ts| ts.tv_sec() as u128 * 1_000_000_000 + ts.tv_nsec() as u128)
        .unwrap_or(0);
    (ns * khz as u128 / 1_000_000) as u64
}
