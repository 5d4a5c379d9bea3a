//! What the device needs of host counting: the [`Backend`] trait (the
//! daemon's implementation is Linux `perf_event_open`, in the `pfmd` crate)
//! and, for tests of the device and the transports, a mock. The device asks
//! for groups of neutral [`HostEvent`]s on one CPU for one target; nothing
//! here knows an Alpha event or a transport.

#[cfg(any(test, feature = "test-fixtures"))]
pub mod mock;

use nix::errno::Errno;
use pfm_model::{HostEvent, HostSupport};

/// Whose activity a group counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// Every task on the CPU (`pid = -1`): `PCNTLOGALL`.
    AllTasks,
    /// One thread and the threads and processes it creates afterwards
    /// (`inherit`): the PME bit of `PCNTLOGSELECT`.
    Thread(i32),
}

/// Which privilege levels are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeFilter {
    pub user: bool,
    pub kernel: bool,
    pub hypervisor: bool,
}

impl ModeFilter {
    pub const ALL: ModeFilter = ModeFilter {
        user: true,
        kernel: true,
        hypervisor: true,
    };
    pub const USER: ModeFilter = ModeFilter {
        user: true,
        kernel: false,
        hypervisor: false,
    };
}

/// A request for one counting group: all `events` on `cpu` for `target`,
/// read together so derived formulas see one consistent snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    pub target: Target,
    pub cpu: u32,
    pub events: Vec<HostEvent>,
    pub modes: ModeFilter,
    /// False: pinned, the group must own its counters. True: it may share them
    /// with other perf users by multiplexing (the privileged "reset busy").
    pub shared: bool,
}

/// One read of a group: a cumulative count per event of the spec (same order)
/// and the times the kernel reports for scaling.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupReading {
    pub values: Vec<u64>,
    pub time_enabled: u64,
    pub time_running: u64,
}

impl GroupReading {
    /// Counts scaled by time enabled / time running: what the events would
    /// have counted had the group run all the time it was enabled.
    pub fn scaled(&self) -> Vec<u64> {
        if self.time_running == 0 || self.time_running >= self.time_enabled {
            return self.values.clone();
        }
        self.values
            .iter()
            .map(|&v| (v as u128 * self.time_enabled as u128 / self.time_running as u128) as u64)
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("perf_event_open({event}) on cpu {cpu}: {errno}")]
    Open {
        event: HostEvent,
        cpu: u32,
        errno: Errno,
    },
    #[error("perf {op}: {errno}")]
    Io { op: &'static str, errno: Errno },
    #[error("the group cannot be scheduled: its counters are held by another perf user")]
    Unschedulable,
}

/// A live counting group. Created disabled.
pub trait CountingGroup: Send {
    fn enable(&mut self) -> Result<(), BackendError>;
    fn disable(&mut self) -> Result<(), BackendError>;
    fn read(&mut self) -> Result<GroupReading, BackendError>;
}

/// A request for one sampling event: every `period` host events of `event`
/// on `cpu` for `target`, one sample (one Alpha counter "interrupt" tick).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplerSpec {
    pub target: Target,
    pub cpu: u32,
    pub event: HostEvent,
    pub period: u64,
    pub modes: ModeFilter,
    /// Record a one-deep kernel callchain (caller attribution).
    pub callchain: bool,
    /// Record the event's own count in each sample (`PERF_SAMPLE_READ`), so
    /// ticks can follow the exact count rather than the nominal period.
    pub read_count: bool,
    pub shared: bool,
}

/// One sample as the histograms need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    /// Taken in user mode (else kernel or hypervisor).
    pub user: bool,
    /// The kernel caller of `ip` (the first return address of the callchain).
    pub caller: Option<u64>,
    /// The sampled event's count when the sample was taken (CPU-wide: the
    /// CPU's; per thread: that thread's), when the sampler reads it.
    pub count: Option<u64>,
}

/// Where a sampler delivers. Called from the backend's sampler thread or from
/// [`SamplingStream::drain`]; must not block on anything slow.
pub trait SampleSink: Send + Sync {
    fn sample(&self, sample: &Sample);
    /// PERF_RECORD_LOST: `records` samples on `cpu` the kernel could not
    /// store.
    fn lost(&self, cpu: u32, records: u64);
    /// PERF_RECORD_THROTTLE: the kernel slowed the event down.
    fn throttled(&self);
}

/// A live sampling event. Created disabled.
pub trait SamplingStream: Send {
    fn enable(&mut self) -> Result<(), BackendError>;
    fn disable(&mut self) -> Result<(), BackendError>;
    /// Delivers every sample already in the buffer now, so a reader sees all
    /// samples up to this moment.
    fn drain(&mut self);
}

/// The host's counting facility.
pub trait Backend: HostSupport + Send + Sync {
    fn open_sampler(
        &self,
        spec: &SamplerSpec,
        sink: std::sync::Arc<dyn SampleSink>,
    ) -> Result<Box<dyn SamplingStream>, BackendError>;
    /// Samples per second per CPU the kernel allows (`perf_event_max_sample_rate`).
    fn max_sample_rate(&self) -> u64;
    /// Memory one sampler's ring buffer takes (data and header page).
    fn sampler_ring_bytes(&self) -> u64;
    fn open_group(&self, spec: &GroupSpec) -> Result<Box<dyn CountingGroup>, BackendError>;
    /// True when another perf user holds the hardware counters on any of
    /// `cpus` so that pinned events of ours would never run (docs/device.md §2).
    /// Always false on a host without hardware counters.
    fn hardware_contended(&self, cpus: &[u32]) -> bool;
    /// Who thread `tid` is now; `None` once it has exited.
    fn thread_identity(&self, tid: i32) -> Option<ThreadIdentity>;
}

/// Who a thread is, for following it from one request to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadIdentity {
    /// When it started: a later thread that gets its number has another.
    pub birth: u64,
    /// Who owns its `/proc` files: its effective uid and gid while it is
    /// dumpable, root once an exec of a setuid, setgid or file-capability
    /// program (or another change of credentials) made it not. The kernel
    /// then removes the perf events others opened on it and refuses them
    /// new ones.
    pub owner: (u32, u32),
    /// Its real, effective and saved uids and gids, and its permitted
    /// capabilities: what the kernel compares with a caller's before it
    /// lets it watch the thread (`__ptrace_may_access`).
    pub uids: [u32; 3],
    pub gids: [u32; 3],
    pub cap_permitted: u64,
}
