//! One open of the device: its mode and CPUs, what it selected, and the host
//! counting groups that feed the device's tallies while it is enabled.

use super::tally::{CpuTally, MAX_COUNTERS, Tally};
use crate::backend::{
    Backend, BackendError, CountingGroup, GroupReading, GroupSpec, ModeFilter, Target,
};
use crate::ioctl::DeviceError;
use crate::ioctl::abi::PFM_COUNTERS;
use crate::model::{CounterSetting, HostEvent, ResolvedEvent, evaluate};
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

/// The counter registers as the model's ioctls leave them: what each counter
/// selects, its period, and whether its enable is on. The selection and
/// periods outlive an open, as the chip's mux does; the enables start on in
/// every open (see [`CounterState::reopened`]).
///
/// A counter counts while the open is enabled (`PCNTRENABLE`, or a family's
/// `ENABLE`/`RESTART`/`ENABWRITE`), its setting is selected and intrinsically
/// enabled, and its `on` bit is set. `on` is what `PCNT5DISABLE`/`PCNT6DISABLE`
/// clear and `PCNT5ENABLE`/`RESTART`/`PCNT6ENABWRITE` set; on EV4 it is the
/// complement of the `iccsr_disable` bits. Only counters that count are ever
/// resolved against the host (contract §5).
#[derive(Debug, Clone, Default)]
pub struct Registers {
    /// The model's validated selection per counter.
    pub settings: [Option<CounterSetting>; MAX_COUNTERS],
    /// Per-counter enables.
    pub on: [bool; MAX_COUNTERS],
    /// Events per interrupt, as the model's period ioctl (EV5 `PCNT5FREQ`)
    /// or its mux (EV4) last set them; new selections take them.
    pub periods: [u64; MAX_COUNTERS],
    /// EV67 profile-me mode (`PF67_PROFILE_ME_MODE` through `PCNT6MUX`).
    pub profile_me: bool,
}

impl Registers {
    /// Every counter on, nothing selected, the family's first periods.
    pub fn new(periods: [u64; MAX_COUNTERS]) -> Self {
        Registers {
            settings: Default::default(),
            on: [true; MAX_COUNTERS],
            periods,
            profile_me: false,
        }
    }

    /// The settings of the counters that count when the open is enabled.
    pub fn effective(&self) -> [Option<CounterSetting>; MAX_COUNTERS] {
        let mut out = self.settings;
        for (slot, on) in out.iter_mut().zip(self.on) {
            if !on || slot.is_some_and(|s| !s.enabled) {
                *slot = None;
            }
        }
        out
    }
}

/// What a new open starts from: the last registers and their resolution.
#[derive(Debug, Clone, Default)]
pub struct CounterState {
    pub registers: Registers,
    pub counters: [Option<Selected>; MAX_COUNTERS],
}

impl CounterState {
    /// What a new open starts from. The selection of the counters that were
    /// counting carries over, as the chip's mux keeps its value; every enable
    /// is on again, so no open inherits another's PCNT?DISABLE; a counter that
    /// was selected but off (never resolved) starts with nothing selected.
    pub fn reopened(&self) -> CounterState {
        let mut registers = self.registers.clone();
        registers.on = [true; MAX_COUNTERS];
        for (setting, counter) in registers.settings.iter_mut().zip(&self.counters) {
            if counter.is_none() {
                *setting = None;
            }
        }
        CounterState {
            registers,
            counters: self.counters.clone(),
        }
    }
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
    /// The model's counter registers; `counters` is their resolution.
    pub registers: Registers,
    /// Modes `PCNT5CTXTS` asked for; `None` counts every mode.
    pub contexts: Option<ModeFilter>,
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
        state: CounterState,
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
            counters: state.counters,
            registers: state.registers,
            contexts: None,
            groups: Vec::new(),
        }
    }

    pub fn counting(&self) -> bool {
        !self.groups.is_empty()
    }

    pub fn modes(&self) -> ModeFilter {
        Self::modes_for(self.scope, self.kernel_allowed, self.contexts)
    }

    /// The modes counted: those the contexts ask for (all by default), less
    /// kernel and hypervisor mode for a LOGSELECT caller not allowed them.
    pub fn modes_for(
        scope: Scope,
        kernel_allowed: bool,
        contexts: Option<ModeFilter>,
    ) -> ModeFilter {
        let wanted = contexts.unwrap_or(ModeFilter::ALL);
        if scope == Scope::LogSelect && !kernel_allowed {
            ModeFilter {
                user: wanted.user,
                kernel: false,
                hypervisor: false,
            }
        } else {
            wanted
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
            let now = counts(&live.group.read().map_err(host_error)?, self.shared);
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
    /// After it, `tallies` hold everything counted so far.
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
        let modes = self.modes();
        if !(modes.user || modes.kernel || modes.hypervisor) {
            return Err(DeviceError::AccessDenied(
                "the contexts leave no mode this caller may count: kernel and PAL mode of your own threads need perf_event_paranoid <= 1".into(),
            ));
        }
        let targets: Vec<Target> = match self.scope {
            Scope::LogAll => vec![Target::AllTasks],
            Scope::LogSelect => self.pme.iter().map(|&tid| Target::Thread(tid)).collect(),
        };
        for target in targets {
            for &cpu in &self.cpus.clone() {
                let spec = GroupSpec {
                    target,
                    cpu,
                    events: events.clone(),
                    modes,
                    shared: self.shared,
                };
                match open_enabled(backend, &spec, self.shared) {
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

/// The counts of a reading. Only a group that shares the hardware counters
/// (multiplexed) is scaled by time enabled / time running. A pinned group
/// always runs while it can count; its time running falls short of time
/// enabled only because a thread's group on one CPU runs only while the
/// thread is on that CPU, and scaling that would multiply a thread's
/// counts by the number of CPUs it moved between.
fn counts(reading: &GroupReading, shared: bool) -> Vec<u64> {
    if shared {
        reading.scaled()
    } else {
        reading.values.clone()
    }
}

fn open_enabled(
    backend: &dyn Backend,
    spec: &GroupSpec,
    shared: bool,
) -> Result<LiveGroup, BackendError> {
    let mut group = backend.open_group(spec)?;
    let baseline = counts(&group.read()?, shared);
    group.enable()?;
    Ok(LiveGroup {
        cpu: spec.cpu,
        events: spec.events.clone(),
        group,
        baseline,
    })
}
