//! One open of the device: its mode and CPUs, what it selected, and the host
//! counting groups that feed the device's tallies while it is enabled.

use super::tally::{CpuTally, MAX_COUNTERS, Tally};
use crate::backend::{Backend, BackendError, CountingGroup, GroupSpec, ModeFilter, Target};
use crate::ioctl::DeviceError;
use crate::ioctl::abi::PFM_COUNTERS;
use crate::model::{HostEvent, ResolvedEvent, evaluate};
use nix::errno::Errno;
use std::collections::{BTreeMap, BTreeSet};

/// The open mode (contract §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Only the CPU the opener is bound to.
    One(u32),
    /// Every CPU, data kept per CPU.
    Each,
    /// Every CPU, data aggregated.
    All,
}

/// Whose activity is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    LogAll,
    LogSelect,
}

/// A counter's selected event, resolved against the host, and its period.
#[derive(Debug, Clone)]
pub struct Selected {
    pub resolved: ResolvedEvent,
    pub period: u64,
}

struct LiveGroup {
    cpu: u32,
    events: Vec<HostEvent>,
    group: Box<dyn CountingGroup>,
    /// Scaled cumulative counts already folded into the tallies.
    baseline: Vec<u64>,
}

pub struct OpenFile {
    /// The process that opened it, for the log.
    pub tgid: i32,
    pub mode: OpenMode,
    /// The CPUs this open holds, in order.
    pub cpus: Vec<u32>,
    pub items: u64,
    pub scope: Scope,
    pub enabled: bool,
    /// Threads that got the PME bit through this open (PCNTLOGSELECT).
    pub pme: BTreeSet<i32>,
    /// False once a LOGSELECT caller was not allowed kernel-mode counting:
    /// then only user mode is counted (contract §8).
    pub kernel_allowed: bool,
    /// Sharing the hardware counters with another perf user (privileged reset
    /// of a busy device): counts are scaled.
    pub shared: bool,
    pub counters: [Option<Selected>; MAX_COUNTERS],
    groups: Vec<LiveGroup>,
}

pub fn host_error(e: BackendError) -> DeviceError {
    match e {
        BackendError::Unschedulable => DeviceError::Busy(e.to_string()),
        BackendError::Open { errno, .. } | BackendError::Io { errno, .. } => {
            DeviceError::Host(e.to_string(), errno)
        }
    }
}

impl OpenFile {
    pub fn new(
        tgid: i32,
        mode: OpenMode,
        cpus: Vec<u32>,
        counters: [Option<Selected>; MAX_COUNTERS],
        shared: bool,
    ) -> Self {
        OpenFile {
            tgid,
            mode,
            cpus,
            items: PFM_COUNTERS,
            scope: Scope::LogAll,
            enabled: false,
            pme: BTreeSet::new(),
            kernel_allowed: true,
            shared,
            counters,
            groups: Vec::new(),
        }
    }

    pub fn counting(&self) -> bool {
        !self.groups.is_empty()
    }

    pub fn modes(&self) -> ModeFilter {
        if self.scope == Scope::LogSelect && !self.kernel_allowed {
            ModeFilter::USER
        } else {
            ModeFilter::ALL
        }
    }

    /// Events each selected counter counted per CPU since the last fold.
    /// With `fold`, the baselines move so the same events are not seen twice.
    pub fn pending_events(
        &mut self,
        khz: u64,
        fold: bool,
    ) -> Result<BTreeMap<u32, [u64; MAX_COUNTERS]>, DeviceError> {
        let mut per_cpu: BTreeMap<u32, [u64; MAX_COUNTERS]> = BTreeMap::new();
        for live in &mut self.groups {
            let now = live.group.read().map_err(host_error)?.scaled();
            let entry = per_cpu.entry(live.cpu).or_default();
            for (slot, selected) in entry.iter_mut().zip(&self.counters) {
                let Some(selected) = selected else { continue };
                *slot += evaluate(&selected.resolved.terms, khz, |event| {
                    live.events
                        .iter()
                        .position(|e| e == event)
                        .map_or(0, |k| now[k].saturating_sub(live.baseline[k]))
                });
            }
            if fold {
                live.baseline = now;
            }
        }
        Ok(per_cpu)
    }

    /// The tallies of `cpu` as they stand with this open's pending events.
    pub fn projected(
        &self,
        tally: &CpuTally,
        pending: Option<&[u64; MAX_COUNTERS]>,
    ) -> [Tally; MAX_COUNTERS] {
        let mut out = tally.counters;
        for (i, selected) in self.counters.iter().enumerate() {
            if let (Some(selected), Some(events)) = (selected, pending) {
                out[i] = out[i].with(events[i], selected.period);
            }
        }
        out
    }

    /// Folds the pending events into `tallies` and closes the host groups.
    pub fn stop_counting(&mut self, tallies: &mut [CpuTally], khz: u64) -> Result<(), DeviceError> {
        let folded = self.pending_events(khz, true);
        self.groups.clear();
        for (cpu, events) in folded? {
            if let Some(cpu_tally) = tallies.get_mut(cpu as usize) {
                cpu_tally.counters = self.projected(cpu_tally, Some(&events));
            }
        }
        Ok(())
    }

    /// Opens and enables the host groups this open's settings call for: one
    /// group per CPU and target, holding every host event the enabled counters
    /// need, so formulas see one consistent read.
    pub fn start_counting(&mut self, backend: &dyn Backend) -> Result<(), DeviceError> {
        debug_assert!(self.groups.is_empty());
        if !self.enabled || self.items & PFM_COUNTERS == 0 {
            return Ok(());
        }
        let mut events: Vec<HostEvent> = Vec::new();
        for selected in self.counters.iter().flatten() {
            for term in &selected.resolved.terms {
                if !events.contains(&term.event) {
                    events.push(term.event);
                }
            }
        }
        if events.is_empty() {
            return Ok(());
        }
        let targets: Vec<Target> = match self.scope {
            Scope::LogAll => vec![Target::AllTasks],
            Scope::LogSelect => self.pme.iter().map(|&tid| Target::Thread(tid)).collect(),
        };
        let modes = self.modes();
        for target in targets {
            for &cpu in &self.cpus.clone() {
                let spec = GroupSpec {
                    target,
                    cpu,
                    events: events.clone(),
                    modes,
                    shared: self.shared,
                };
                match open_enabled(backend, &spec) {
                    Ok(live) => self.groups.push(live),
                    Err(BackendError::Open {
                        errno: Errno::ESRCH,
                        ..
                    }) if matches!(target, Target::Thread(_)) => {
                        let Target::Thread(tid) = target else {
                            unreachable!()
                        };
                        tracing::info!(tid, "PME thread has exited; it no longer counts");
                        self.pme.remove(&tid);
                        break;
                    }
                    Err(e) => {
                        self.groups.clear();
                        return Err(host_error(e));
                    }
                }
            }
        }
        Ok(())
    }
}

fn open_enabled(backend: &dyn Backend, spec: &GroupSpec) -> Result<LiveGroup, BackendError> {
    let mut group = backend.open_group(spec)?;
    let baseline = group.read()?.scaled();
    group.enable()?;
    Ok(LiveGroup {
        cpu: spec.cpu,
        events: spec.events.clone(),
        group,
        baseline,
    })
}
