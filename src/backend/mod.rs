//! Host counting on Linux `perf_event_open`. The device asks for groups of
//! neutral [`HostEvent`]s on one CPU for one target; nothing here knows an
//! Alpha event or a transport.

pub mod mock;
pub mod perf;

use crate::model::{HostEvent, HostSupport};
use nix::errno::Errno;

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

/// The host's counting facility.
pub trait Backend: HostSupport + Send + Sync {
    fn open_group(&self, spec: &GroupSpec) -> Result<Box<dyn CountingGroup>, BackendError>;
    /// True when another perf user holds the hardware counters on any of
    /// `cpus` so that pinned events of ours would never run (contract §2).
    /// Always false on a host without hardware counters.
    fn hardware_contended(&self, cpus: &[u32]) -> bool;
}
