//! One open of the device: its mode and CPUs, what it selected, the host
//! events that count for it while it is enabled, and the driver counts of
//! its CPUs, which it holds while it is open (they go back to the device's
//! store at close, so they survive close and reopen).

use super::DeviceError;
use super::budget::{Budgets, Charge, Resource};
use super::histogram::{Histograms, Profile, SharedHistograms, TickSink};
use super::readers::GroupReaders;
use super::tally::{CpuTally, MAX_COUNTERS, Tally};
use crate::backend::{
    Backend, BackendError, CountingGroup, GroupSpec, ModeFilter, SampleSink, SamplerSpec,
    SamplingStream, Target, ThreadIdentity,
};
use nix::errno::Errno;
use pfm_abi::{Items, OpenMode};
use pfm_model::{CounterSetting, HostEvent, ResolvedEvent, Scale, evaluate};
use std::collections::BTreeMap;
use std::sync::Arc;

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
/// resolved against the host (docs/device.md §5).
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

pub(super) struct LiveGroup {
    pub(super) cpu: u32,
    pub(super) target: Target,
    events: Vec<HostEvent>,
    group: Box<dyn CountingGroup>,
    /// Scaled cumulative counts already folded into the tallies.
    baseline: Vec<u64>,
}

/// Who opened the file and what it holds: fixed for the open's life.
pub struct Opener {
    /// The process that opened it, for the log.
    pub tgid: i32,
    /// The user that opened it: counts and settings are kept per user.
    pub uid: u32,
    pub mode: OpenMode,
    /// The CPUs this open holds, in order.
    pub cpus: Vec<u32>,
    /// Sharing the hardware counters with another perf user (privileged reset
    /// of a busy device): counts are scaled.
    pub shared: bool,
}

/// What the open's ioctls set. The host events follow from it
/// ([`OpenFile::host_plan`]); every change goes through the session's
/// `reconfigure`, which rebuilds or switches them.
#[derive(Clone)]
pub struct Settings {
    pub items: Items,
    /// EV67 profile-me statistic (`PCNTSETITEMS` bits 8..15).
    pub statistic: u64,
    pub scope: Scope,
    pub enabled: bool,
    /// Threads that got the PME bit through this open (PCNTLOGSELECT), and
    /// who each was then ([`Backend::thread_identity`]): a thread that exited
    /// is forgotten, even where a later thread got its number, and so is one
    /// whose credentials changed (a setuid exec).
    pub pme: BTreeMap<i32, ThreadIdentity>,
    /// False once a LOGSELECT caller was not allowed kernel-mode counting:
    /// then only user mode is counted (docs/device.md §8).
    pub kernel_allowed: bool,
    /// The model's counter registers; `counters` is their resolution.
    pub registers: Registers,
    pub counters: [Option<Selected>; MAX_COUNTERS],
    /// Modes `PCNT5CTXTS` asked for; `None` counts every mode.
    pub contexts: Option<ModeFilter>,
    /// Instructions per profile bucket for PCNTSETUADDR/KADDR (last stride set).
    pub stride: u64,
}

/// What sampling fills, and what it costs.
pub struct Sampled {
    /// IPL histograms and profile buckets, shared with the sampler thread.
    pub histograms: Arc<SharedHistograms>,
    /// The snapshots read(2) calls in progress are served from, one per
    /// reading thread, oldest first (docs/device.md §6).
    pub read_snapshots: Vec<ReadSnapshot>,
    /// The budget the profile buckets are charged to.
    pub profile_charge: Option<Charge>,
    /// Per counter: Alpha events per sample (`period x weight`) of the last
    /// sampling run.
    pub sample_period: [u64; MAX_COUNTERS],
}

/// The buckets one `read(2)` call is served from, piece after piece. When a
/// new range replaces the profile during the call, the snapshot keeps the
/// old buckets, and their budget charge, until the call has them all.
pub struct ReadSnapshot {
    /// The thread whose call it is (every piece of a call comes from it).
    pub reader: i32,
    pub buckets: super::histogram::BucketSnapshot,
    /// The old profile's charge, or this snapshot's own where another
    /// thread's call had one already (the profile's charge covers one).
    pub charge: Option<Charge>,
}

/// Most `read(2)` calls of one open in progress at once with a snapshot of
/// their own; a further reader's takes the oldest one's place.
pub const READ_SNAPSHOTS: usize = 4;

/// The host events counting and sampling for the open, and their budget.
#[derive(Default)]
struct HostEvents {
    groups: Vec<LiveGroup>,
    /// Groups on PME threads that cleared their bit while what they had
    /// created counts on (`PCNTCLEARPCBPME`): inherited as the groups are,
    /// so they count the thread and what it creates from then on, which
    /// the groups' counts leave out.
    exclusions: Vec<LiveGroup>,
    samplers: Vec<Box<dyn SamplingStream>>,
    /// Per sampled counter, what its samplers were opened with (each
    /// sampler's target and CPU its own) and the sink they share: a thread
    /// that takes the PME bit later gets samplers of its own like them.
    sampler_kinds: Vec<(SamplerSpec, Arc<dyn SampleSink>)>,
    host_charges: Vec<Charge>,
    /// They count every task on their CPUs in kernel mode too (LOGALL),
    /// as the settings were when they opened: see
    /// [`OpenFile::ipl_reconciled`].
    system_wide_with_kernel: bool,
}

pub struct OpenFile {
    pub opener: Opener,
    pub settings: Settings,
    /// The driver counts, indexed by CPU number; only the entries of the
    /// opener's CPUs are this open's (the rest stay default).
    pub tallies: Vec<CpuTally>,
    pub sampled: Sampled,
    host: HostEvents,
    /// Host events of earlier settings under `PCNTLOGSELECT`, switched off
    /// and kept open with their budget, newest last: settings changed back
    /// take them again. Inherited host events follow what the PME threads
    /// created while they were open; new ones would follow only what the
    /// threads create from then on (a mux rotated by `pfmstat -a`, a tool
    /// switching back and forth). At most [`KEPT_SETTINGS`]; dropped when
    /// a budget runs short, when the PME threads change, at a CPU change
    /// and at close.
    kept: Vec<KeptEvents>,
    /// The PME threads the open's host events followed when last opened or
    /// joined (never more than `settings.pme` then held).
    followed: std::collections::BTreeSet<i32>,
    /// Times host events were opened anew on a thread in `followed`
    /// (`pi_reopened`): what it had created is no longer counted.
    pub reopened: u64,
}

/// Settings whose host events an open keeps (see [`OpenFile`]'s `kept`).
pub const KEPT_SETTINGS: usize = 32;

struct KeptEvents {
    plan: HostPlan,
    host: HostEvents,
    sample_period: [u64; MAX_COUNTERS],
}

/// See [`OpenFile::host_plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPlan {
    /// Per counter: its host terms, and its period where it is sampled.
    counters: Vec<Option<(Vec<pfm_model::Term>, Option<u64>)>>,
    items: Items,
    scope: Scope,
    pme: Vec<i32>,
    modes: ModeFilter,
    shared: bool,
    callchain: bool,
}

impl HostPlan {
    /// True when these host events count nothing `before`'s did not: the
    /// same, or less (a counter, its sampling or an item off, fewer
    /// threads or modes).
    pub fn within(&self, before: &HostPlan) -> bool {
        let modes = |m: ModeFilter| [m.user, m.kernel, m.hypervisor];
        self.scope == before.scope
            && self.shared == before.shared
            && (!self.callchain || before.callchain)
            && before.items.contains(self.items)
            && self.pme.iter().all(|tid| before.pme.contains(tid))
            && (modes(self.modes).iter().zip(modes(before.modes))).all(|(&now, was)| !now || was)
            && self.counters.len() == before.counters.len()
            && (self.counters.iter().zip(&before.counters)).all(|(now, was)| match (now, was) {
                (None, _) => true,
                (Some((terms, period)), Some((was_terms, was_period))) => {
                    terms == was_terms && (period.is_none() || period == was_period)
                }
                (Some(_), None) => false,
            })
    }
}

/// How one counter is sampled: which host event, every how many host events,
/// and the weight (ticks per sample) that keeps totals in interrupt units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplingPlan {
    pub event: HostEvent,
    pub host_period: u64,
    pub weight: u64,
}

/// The kernel floor on a cpu-clock/task-clock sample period (hrtimer), ns.
const MIN_CLOCK_PERIOD_NS: u64 = 10_000;

/// Plans sampling for one counter: an Alpha period of `period` events is
/// `period` host events through the formula's first positive term; when that
/// would exceed a quarter of the host's sample-rate budget (several samplers
/// share a CPU), sample every `weight` periods instead and count each sample
/// `weight` times (docs/device.md §6).
pub fn sampling_plan(selected: &Selected, khz: u64, max_sample_rate: u64) -> Option<SamplingPlan> {
    let term = selected.resolved.terms.iter().find(|t| match t.scale {
        Scale::Ratio { num, den } => num > 0 && den > 0,
        Scale::NsToCycles => true,
    })?;
    let khz = khz.max(1) as u128;
    let host_events = |periods: u64| -> u64 {
        let alpha = selected.period as u128 * periods as u128;
        let host = match term.scale {
            Scale::NsToCycles => (alpha * 1_000_000).div_ceil(khz),
            Scale::Ratio { num, den } => (alpha * den as u128).div_ceil(num as u128),
        };
        host.clamp(1, u64::MAX as u128) as u64
    };
    let clock = matches!(term.event, HostEvent::CpuClock | HostEvent::TaskClock);
    // Host events per second on one CPU, at most.
    let rate: u128 = match term.event {
        HostEvent::CpuClock | HostEvent::TaskClock => 1_000_000_000,
        HostEvent::Instructions => 4 * khz * 1000,
        _ => khz * 1000,
    };
    let budget = (max_sample_rate / 4).max(1) as u128;
    let floor = if clock {
        MIN_CLOCK_PERIOD_NS as u128
    } else {
        1
    };
    let min_host_period = rate.div_ceil(budget).max(floor);
    let per_period = host_events(1) as u128;
    let weight = min_host_period.div_ceil(per_period).max(1) as u64;
    Some(SamplingPlan {
        event: term.event,
        host_period: host_events(weight),
        weight,
    })
}

pub fn host_error(e: BackendError) -> DeviceError {
    match e {
        BackendError::Unschedulable => DeviceError::Busy(e.to_string()),
        BackendError::Open { errno, .. } | BackendError::Io { errno, .. } => {
            DeviceError::Host(e.to_string(), errno)
        }
    }
}

/// Who opened a file and what it was given.
pub struct Opening {
    pub tgid: i32,
    pub uid: u32,
    pub mode: OpenMode,
    pub cpus: Vec<u32>,
    /// The counts of `cpus` (indexed by CPU number, `cpu_slots` long).
    pub tallies: Vec<CpuTally>,
    pub state: CounterState,
    pub shared: bool,
}

impl OpenFile {
    pub fn new(opening: Opening, cpu_slots: usize) -> Self {
        let Opening {
            tgid,
            uid,
            mode,
            cpus,
            tallies,
            state,
            shared,
        } = opening;
        let histograms = Histograms::new(mode == OpenMode::Each, cpu_slots);
        OpenFile {
            opener: Opener {
                tgid,
                uid,
                mode,
                cpus,
                shared,
            },
            settings: Settings {
                items: Items::COUNTERS,
                statistic: 0,
                scope: Scope::LogAll,
                enabled: false,
                pme: BTreeMap::new(),
                kernel_allowed: true,
                registers: state.registers,
                counters: state.counters,
                contexts: None,
                stride: 4,
            },
            tallies,
            sampled: Sampled {
                histograms: Arc::new(SharedHistograms::new(histograms)),
                read_snapshots: Vec::new(),
                profile_charge: None,
                sample_period: [0; MAX_COUNTERS],
            },
            host: HostEvents::default(),
            kept: Vec::new(),
            followed: Default::default(),
            reopened: 0,
        }
    }

    /// Each counter's period, where it counts.
    pub fn periods(&self) -> [Option<u64>; MAX_COUNTERS] {
        std::array::from_fn(|i| self.settings.counters[i].as_ref().map(|s| s.period))
    }

    /// After a settings change: a counter whose period changed keeps only
    /// the low part of its raw events below the new period, as the chip's
    /// counter register keeps its low bits when its width changes. The
    /// events counted below the old period (or of another event) raise no
    /// interrupt the new setting did not count: interrupts come only while
    /// enabled.
    pub fn narrow_residuals(&mut self, before: [Option<u64>; MAX_COUNTERS]) {
        let after = self.periods();
        for (i, (old, new)) in before.into_iter().zip(after).enumerate() {
            let Some(period) = new.filter(|&p| Some(p) != old) else {
                continue;
            };
            for &cpu in &self.opener.cpus {
                if let Some(tally) = self.tallies.get_mut(cpu as usize) {
                    tally.counters[i].residual %= period.max(1);
                }
            }
        }
    }

    /// Undoes a refused change's edits of the tallies (a preload, a
    /// narrowing): each CPU's counters go back to `before`, plus the events
    /// folded since the change took `changed` (counted at the periods of
    /// the change, `new_periods`), now counted at the periods of `before`
    /// (`old_periods`). A counter off on either side had none.
    pub fn roll_back_tallies(
        &mut self,
        before: Vec<CpuTally>,
        changed: &[CpuTally],
        old_periods: [Option<u64>; MAX_COUNTERS],
        new_periods: [Option<u64>; MAX_COUNTERS],
        now_cycles: u64,
    ) {
        let mut restored = before;
        for (cpu, tally) in restored.iter_mut().enumerate() {
            let (Some(now), Some(then)) = (self.tallies.get(cpu), changed.get(cpu)) else {
                continue;
            };
            let mut counters = tally.counters;
            for (i, counter) in counters.iter_mut().enumerate() {
                if let (Some(old), Some(new)) = (old_periods[i], new_periods[i]) {
                    let events = now.counters[i].events_since(then.counters[i], new);
                    *counter = counter.with(events, old);
                }
            }
            tally.counters = counters;
            tally.stamp(&counters, now_cycles);
        }
        self.tallies = restored;
    }

    /// One piece of a `read(2)` call by thread `reader`: bytes from
    /// `offset` of the snapshot the call's first piece took. Every piece of
    /// a call comes from its thread, and each reading thread has its own
    /// snapshot, so two threads reading one descriptor, or a range set
    /// meanwhile, cut no call short. A piece past 0 with none (a fifth
    /// reader took its place) is served from a new one rather than short.
    pub fn read_profile(
        &mut self,
        reader: i32,
        offset: u64,
        size: usize,
        budgets: &Budgets,
    ) -> Vec<u8> {
        let mine = (self.sampled.read_snapshots.iter()).position(|s| s.reader == reader);
        let index = match mine {
            Some(i) if offset != 0 => i,
            _ => {
                if let Some(i) = mine {
                    self.sampled.read_snapshots.remove(i);
                }
                self.drain_samples();
                let buckets = self.sampled.histograms.lock().profile_snapshot();
                let snapshots = &mut self.sampled.read_snapshots;
                // The profile's charge covers one kept copy; another
                // thread's is charged on its own, or the others give way.
                let charge = if snapshots.is_empty() {
                    None
                } else {
                    let bytes = buckets.byte_len() as u64;
                    match budgets.charge(self.opener.uid, Resource::ProfileBytes, bytes) {
                        Ok(charge) => Some(charge),
                        Err(_) => {
                            snapshots.clear();
                            None
                        }
                    }
                };
                if snapshots.len() >= READ_SNAPSHOTS {
                    snapshots.remove(0);
                }
                snapshots.push(ReadSnapshot {
                    reader,
                    buckets,
                    charge,
                });
                snapshots.len() - 1
            }
        };
        let snapshots = &mut self.sampled.read_snapshots;
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        let snapshot = &snapshots[index].buckets;
        let bytes = snapshot.bytes(offset, size);
        if offset.saturating_add(bytes.len()) >= snapshot.byte_len() {
            // The call has everything: the snapshot's chunks go back to
            // being the live buckets' alone.
            snapshots.remove(index);
        }
        bytes
    }

    /// Delivers every sample taken so far into the histograms.
    pub fn drain_samples(&mut self) {
        for sampler in &mut self.host.samplers {
            sampler.drain();
        }
    }

    fn sampling_wanted(&self) -> bool {
        self.settings.items.sampled()
    }

    /// Everything the host events of this open depend on. While it stays the
    /// same, a settings change keeps the events (and every thread they
    /// already follow) and only switches them on or off.
    pub fn host_plan(&self) -> HostPlan {
        // A period matters to the host only where it sets a sampler's;
        // counting groups count events, whatever the period.
        let sampling = self.sampling_wanted();
        HostPlan {
            counters: self
                .settings
                .counters
                .iter()
                .map(|c| {
                    c.as_ref()
                        .map(|s| (s.resolved.terms.clone(), sampling.then_some(s.period)))
                })
                .collect(),
            items: self.settings.items,
            scope: self.settings.scope,
            pme: self.settings.pme.keys().copied().collect(),
            modes: self.modes(),
            shared: self.opener.shared,
            callchain: self
                .sampled
                .histograms
                .lock()
                .profile
                .as_ref()
                .is_some_and(|p| p.caller_mode),
        }
    }

    fn targets(&self) -> Vec<Target> {
        match self.settings.scope {
            Scope::LogAll => vec![Target::AllTasks],
            Scope::LogSelect => self
                .settings
                .pme
                .keys()
                .map(|&tid| Target::Thread(tid))
                .collect(),
        }
    }

    /// Whether host events of a thread that cleared its PME bit come off
    /// the counts (see [`OpenFile::exclude_pme_thread`]).
    pub fn has_exclusions(&self) -> bool {
        !self.host.exclusions.is_empty()
    }

    pub fn counting(&self) -> bool {
        !self.host.groups.is_empty() || !self.host.samplers.is_empty()
    }

    /// `f` of the profile range in force: one is set and `PFM_PROFILING`
    /// selected (a range kept while the item is off profiles nothing, and
    /// reads as none: docs/device.md §6).
    pub fn with_active_profile<R>(&self, f: impl FnOnce(&Profile) -> R) -> Option<R> {
        if !self.settings.items.contains(Items::PROFILING) {
            return None;
        }
        self.sampled.histograms.lock().profile.as_ref().map(f)
    }

    pub fn modes(&self) -> ModeFilter {
        Self::modes_for(
            self.settings.scope,
            self.settings.kernel_allowed,
            self.settings.contexts,
        )
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
        readers: &GroupReaders,
    ) -> Result<BTreeMap<u32, [u64; MAX_COUNTERS]>, DeviceError> {
        let mut per_cpu: BTreeMap<u32, [u64; MAX_COUNTERS]> = BTreeMap::new();
        let counters = &self.settings.counters;
        let shared = self.opener.shared;
        // The exclusions' events come off what the groups counted.
        for (groups, add) in [
            (&mut self.host.groups, true),
            (&mut self.host.exclusions, false),
        ] {
            let counts = readers.read(groups, shared);
            for (live, now) in groups.iter_mut().zip(counts) {
                let now = now?;
                let entry = per_cpu.entry(live.cpu).or_default();
                for (slot, selected) in entry.iter_mut().zip(counters) {
                    let Some(selected) = selected else { continue };
                    let events = evaluate(&selected.resolved.terms, khz, |event| {
                        live.events
                            .iter()
                            .position(|e| e == event)
                            .map_or(0, |k| now[k].saturating_sub(live.baseline[k]))
                    });
                    *slot = if add {
                        *slot + events
                    } else {
                        slot.saturating_sub(events)
                    };
                }
                if fold {
                    live.baseline = now;
                }
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
        for (i, selected) in self.settings.counters.iter().enumerate() {
            if let (Some(selected), Some(events)) = (selected, pending) {
                out[i] = out[i].with(events[i], selected.period);
            }
        }
        out
    }

    /// Folds the pending events into the tallies and the pending samples
    /// into the histograms. After it, both hold everything counted so far.
    /// An interrupt folded in happened before now, and nothing counts
    /// after a fold until the open runs again: `pr_cycle` is stamped here,
    /// so a read long after a disable does not date the last interrupt to
    /// the read.
    pub fn fold(&mut self, khz: u64, readers: &GroupReaders) -> Result<(), DeviceError> {
        self.drain_samples();
        let now = super::now_cycles(khz);
        let reconciled = self.ipl_reconciled();
        for (cpu, events) in self.pending_events(khz, true, readers)? {
            if let Some(cpu_tally) = self.tallies.get(cpu as usize) {
                let counters = self.projected(cpu_tally, Some(&events));
                let tally = &mut self.tallies[cpu as usize];
                let interrupts =
                    |t: &[Tally; MAX_COUNTERS]| t.iter().map(|t| t.interrupts).sum::<u64>();
                let grown = interrupts(&counters).saturating_sub(interrupts(&tally.counters));
                tally.counters = counters;
                tally.stamp(&counters, now);
                if reconciled {
                    self.sampled.histograms.lock().counted(cpu, grown);
                }
            }
        }
        Ok(())
    }

    /// Whether the IPL histogram's total is kept up with the counting
    /// groups' interrupts (docs/device.md §6): CPU-wide samplers, whose
    /// idle stretches the kernel may throttle, counting kernel mode (where
    /// idle time is), next to counting groups. A fact of the host events
    /// open now, which a settings change about to replace them does not
    /// alter.
    fn ipl_reconciled(&self) -> bool {
        self.host.system_wide_with_kernel
            && !self.host.samplers.is_empty()
            && !self.host.groups.is_empty()
    }

    /// Folds, and brings the IPL histogram up to the interrupts counted
    /// (see [`Histograms::reconcile`](super::histogram::Histograms::reconcile)).
    pub fn fold_for_ipl(&mut self, khz: u64, readers: &GroupReaders) -> Result<(), DeviceError> {
        self.fold(khz, readers)?;
        if !self.ipl_reconciled() {
            return Ok(());
        }
        // One sample's worth of interrupts per sampling counter and CPU.
        let per_cpu: u64 = self
            .settings
            .counters
            .iter()
            .zip(self.sampled.sample_period)
            .filter_map(|(c, sample_period)| Some(sample_period / c.as_ref()?.period.max(1)))
            .sum();
        let mut histograms = self.sampled.histograms.lock();
        let cpus = if histograms.slots() > 1 {
            1
        } else {
            self.opener.cpus.len() as u64
        };
        histograms.reconcile(|_| per_cpu * cpus);
        Ok(())
    }

    /// Folds, then closes the host events. The samplers go, so what they
    /// never sampled (a throttled idle CPU's stretch, the part of a sample
    /// not yet reached) can no longer come in a later sample: the IPL
    /// histogram is brought up to every interrupt counted now, even when no
    /// host events follow (every counter turned off).
    pub fn stop_counting(&mut self, khz: u64, readers: &GroupReaders) -> Result<(), DeviceError> {
        // The samplers stop before the groups' last read, as at a disable
        // (`set_running`): a sample taken after that read, and booked
        // before the samplers close, would be time no count holds (+30 of
        // 11,900 ticks on a contended CPU, +581 under heavier load).
        let switched = self.switch_samplers(false);
        let folded = self.fold(khz, readers);
        if self.ipl_reconciled() {
            self.sampled.histograms.lock().reconcile(|_| 0);
        }
        self.clear_host_events();
        self.kept.clear();
        switched.and(folded)
    }

    /// Folds, then switches off and keeps the host events, which counted
    /// `plan`, for settings changed back to it; where they are not kept
    /// (`PCNTLOGALL`: new CPU-wide events miss nothing), as
    /// [`stop_counting`](Self::stop_counting) without dropping those kept.
    pub fn put_away_counting(
        &mut self,
        khz: u64,
        readers: &GroupReaders,
        plan: HostPlan,
    ) -> Result<(), DeviceError> {
        // Not kept with exclusions, for the reason `add_pme_thread` gives.
        if plan.scope != Scope::LogSelect
            || !self.host.exclusions.is_empty()
            || self.set_running(false).is_err()
        {
            let kept = std::mem::take(&mut self.kept);
            let stopped = self.stop_counting(khz, readers);
            self.kept = kept;
            return stopped;
        }
        let folded = self.fold(khz, readers);
        if folded.is_err() {
            self.clear_host_events();
            return folded;
        }
        // No kept set has `plan`: the live one would have been taken.
        if self.kept.len() == KEPT_SETTINGS {
            self.kept.remove(0);
        }
        self.kept.push(KeptEvents {
            plan,
            host: std::mem::take(&mut self.host),
            sample_period: self.sampled.sample_period,
        });
        Ok(())
    }

    /// Closes the host events kept for earlier settings.
    pub fn drop_kept(&mut self) {
        self.kept.clear();
    }

    /// Takes the kept host events of the current settings, if any, and
    /// switches them on where the open is enabled.
    fn take_kept(&mut self) -> Result<bool, DeviceError> {
        let plan = self.host_plan();
        let Some(at) = self.kept.iter().position(|k| k.plan == plan) else {
            return Ok(false);
        };
        let kept = self.kept.remove(at);
        self.host = kept.host;
        self.sampled.sample_period = kept.sample_period;
        if self.settings.enabled
            && let Err(e) = self.set_running(true)
        {
            self.clear_host_events();
            return Err(e);
        }
        Ok(true)
    }

    /// Switches every host event of this open on or off, keeping them open.
    pub fn set_running(&mut self, on: bool) -> Result<(), DeviceError> {
        // The samplers run inside the counting groups' window (on after
        // them, off before them), so no sample is taken while its CPU's
        // interrupts are not counted: the IPL histogram never holds more
        // ticks than the counters counted interrupts (the reconcile books
        // the difference, docs/device.md §6).
        if on {
            self.switch_groups(true)?;
            self.switch_samplers(true)
        } else {
            self.switch_samplers(false)?;
            self.switch_groups(false)
        }
    }

    fn switch_groups(&mut self, on: bool) -> Result<(), DeviceError> {
        for live in self.host.groups.iter_mut().chain(&mut self.host.exclusions) {
            if on {
                live.group.enable()
            } else {
                live.group.disable()
            }
            .map_err(host_error)?;
        }
        Ok(())
    }

    fn switch_samplers(&mut self, on: bool) -> Result<(), DeviceError> {
        for sampler in &mut self.host.samplers {
            if on {
                sampler.enable()
            } else {
                sampler.disable()
            }
            .map_err(host_error)?;
        }
        Ok(())
    }

    /// Opens the host events this open's settings call for: one group per
    /// CPU and target, holding every host event the counting counters need,
    /// so formulas see one consistent read; and the samplers. They run only
    /// while the open is enabled.
    /// Only CPUs in `online` get host events (the kernel has none for an
    /// offline CPU); the others keep their counts until they come back
    /// (`hotplug`).
    pub fn start_counting(
        &mut self,
        backend: &dyn Backend,
        budgets: &Budgets,
        khz: u64,
        online: &[u32],
    ) -> Result<(), DeviceError> {
        debug_assert!(
            self.host.groups.is_empty()
                && self.host.exclusions.is_empty()
                && self.host.samplers.is_empty()
        );
        let cpus = self.online_cpus(online);
        self.forget_exited_pme(backend);
        if self.take_kept()? {
            return Ok(());
        }
        let mut result;
        let mut tries = 0;
        loop {
            self.forget_exited_pme(backend);
            let places = self.targets().len() * cpus.len();
            result = self
                .host_event_charges(backend, budgets, places)
                .map(|charges| self.host.host_charges = charges)
                .and_then(|()| self.start_groups(backend, &cpus))
                .and_then(|()| self.start_samplers(backend, khz, &cpus));
            // A thread that changed credentials (a setuid exec) between
            // the look at its identity and the open has events the kernel
            // did not remove (it removes them at the exec): looked at
            // again after the open, it is forgotten and the events go. One
            // that changes after this look had its events before the exec,
            // and the kernel removes them there.
            let changed = (self.settings.pme.iter())
                .any(|(&tid, known)| backend.thread_identity(tid) != Some(*known));
            tries += 1;
            if result.is_err() && !self.kept.is_empty() {
                // What is kept holds budget and descriptors: let it go first.
                tracing::debug!("dropping the host events kept for earlier settings: {result:?}");
                self.kept.clear();
                self.clear_host_events();
                continue;
            }
            if result.is_err() || !changed || tries == 3 {
                if changed {
                    result = Err(DeviceError::Busy(
                        "the open's threads kept changing credentials while their events opened"
                            .into(),
                    ));
                }
                break;
            }
            self.clear_host_events();
        }
        if result.is_err() {
            self.clear_host_events();
        } else if self.counting() && self.settings.scope == Scope::LogSelect {
            let pme = self.settings.pme.keys();
            if pme.clone().any(|tid| self.followed.contains(tid)) {
                self.reopened += 1;
            }
            self.followed = pme.copied().collect();
        }
        self.host.system_wide_with_kernel =
            self.settings.scope == Scope::LogAll && self.modes().kernel;
        result
    }

    /// A counting group of `events` for `target` on `cpu`.
    fn group_spec(
        &self,
        target: Target,
        cpu: u32,
        events: Vec<HostEvent>,
        modes: ModeFilter,
    ) -> GroupSpec {
        GroupSpec {
            target,
            cpu,
            events,
            modes,
            shared: self.opener.shared,
        }
    }

    /// The open's CPUs that are online.
    fn online_cpus(&self, online: &[u32]) -> Vec<u32> {
        (self.opener.cpus.iter().copied())
            .filter(|c| online.contains(c))
            .collect()
    }

    /// Closes the host events without reading them (none has counted
    /// anything the open keeps) and refunds their budget.
    fn clear_host_events(&mut self) {
        self.host = HostEvents::default();
    }

    /// Charges the descriptors and ring memory the host events of the
    /// current settings take in `places` (targets × CPUs), before any is
    /// opened.
    fn host_event_charges(
        &self,
        backend: &dyn Backend,
        budgets: &Budgets,
        places: usize,
    ) -> Result<Vec<Charge>, DeviceError> {
        let places = places as u64;
        let samplers = if self.sampling_wanted() {
            self.settings.counters.iter().flatten().count() as u64 * places
        } else {
            0
        };
        let descriptors = self.group_events().len() as u64 * places + samplers;
        let mut charges = Vec::new();
        if descriptors > 0 {
            charges.push(budgets.charge(
                self.opener.uid,
                Resource::PerfDescriptors,
                descriptors,
            )?);
        }
        if samplers > 0 {
            let rings = samplers * backend.sampler_ring_bytes();
            charges.push(budgets.charge(self.opener.uid, Resource::RingBytes, rings)?);
        }
        Ok(charges)
    }

    /// The host events a counting group holds: every term of every counter
    /// that counts, once each; none without `PFM_COUNTERS`.
    fn group_events(&self) -> Vec<HostEvent> {
        let mut events: Vec<HostEvent> = Vec::new();
        if self.settings.items.contains(Items::COUNTERS) {
            for selected in self.settings.counters.iter().flatten() {
                for term in &selected.resolved.terms {
                    if !events.contains(&term.event) {
                        events.push(term.event);
                    }
                }
            }
        }
        events
    }

    /// One sampler per enabled counter, CPU and target: each sample is one
    /// counter interrupt for the IPL histogram and the profile.
    fn start_samplers(
        &mut self,
        backend: &dyn Backend,
        khz: u64,
        cpus: &[u32],
    ) -> Result<(), DeviceError> {
        if !self.sampling_wanted() {
            return Ok(());
        }
        let callchain = self
            .sampled
            .histograms
            .lock()
            .profile
            .as_ref()
            .is_some_and(|p| p.caller_mode);
        let max_rate = backend.max_sample_rate();
        let modes = self.modes();
        for (i, selected) in self.settings.counters.clone().iter().enumerate() {
            let Some(selected) = selected else { continue };
            let Some(plan) = sampling_plan(selected, khz, max_rate) else {
                return Err(DeviceError::NotSupported(format!(
                    "{}: no host event to sample for {}",
                    selected.resolved.event.name, selected.resolved.formula
                )));
            };
            self.sampled.sample_period[i] = selected.period * plan.weight;
            if plan.weight > 1 {
                tracing::debug!(
                    event = selected.resolved.event.name,
                    period = selected.period,
                    effective = self.sampled.sample_period[i],
                    max_sample_rate = max_rate,
                    "sampling at a larger period than the Alpha's; each sample counts {} interrupts",
                    plan.weight
                );
            }
            let cpu_wide = self.settings.scope == Scope::LogAll;
            let sink: Arc<dyn SampleSink> = Arc::new(
                TickSink::new(
                    self.sampled.histograms.clone(),
                    plan.weight,
                    plan.host_period,
                    cpu_wide,
                )
                .user_only(modes.user && !modes.kernel && !modes.hypervisor),
            );
            let kind = SamplerSpec {
                target: Target::AllTasks,
                cpu: 0,
                event: plan.event,
                period: plan.host_period,
                modes,
                callchain,
                read_count: true,
                shared: self.opener.shared,
            };
            self.host.sampler_kinds.push((kind.clone(), sink.clone()));
            for target in self.targets() {
                for &cpu in cpus {
                    let spec = SamplerSpec {
                        target,
                        cpu,
                        ..kind.clone()
                    };
                    let mut sampler = match backend.open_sampler(&spec, sink.clone()) {
                        Ok(sampler) => sampler,
                        Err(e) if self.thread_exited(target, &e) => break,
                        Err(e) => return Err(host_error(e)),
                    };
                    if self.settings.enabled {
                        sampler.enable().map_err(host_error)?;
                    }
                    self.host.samplers.push(sampler);
                }
            }
        }
        Ok(())
    }

    fn start_groups(&mut self, backend: &dyn Backend, cpus: &[u32]) -> Result<(), DeviceError> {
        let events = self.group_events();
        if events.is_empty() {
            return Ok(());
        }
        let modes = self.modes();
        if !(modes.user || modes.kernel || modes.hypervisor) {
            return Err(DeviceError::AccessDenied(
                "the contexts leave no mode this caller may count: kernel and PAL mode of your own threads need perf_event_paranoid <= 1".into(),
            ));
        }
        for target in self.targets() {
            for &cpu in cpus {
                let spec = self.group_spec(target, cpu, events.clone(), modes);
                match open_group(backend, &spec, self.settings.enabled) {
                    Ok(live) => self.host.groups.push(live),
                    Err(e) if self.thread_exited(target, &e) => break,
                    Err(e) => return Err(host_error(e)),
                }
            }
        }
        Ok(())
    }
}

impl OpenFile {
    /// `PCNTLOGSELECT` by `tid`, a thread new to an open that counts PME
    /// threads already: host events on it alone (groups and samplers, as
    /// the others') join the live ones, which go on counting what their
    /// threads created before (new events would follow only what a thread
    /// creates after them), and nothing counted so far is folded. False
    /// where the caller rebuilds the host events with the thread instead:
    /// the open not counting yet, a thread that cleared its bit (its
    /// exclusions count it), or the budget or the host refusing the new
    /// events (a rebuild says why).
    pub fn add_pme_thread(
        &mut self,
        backend: &dyn Backend,
        budgets: &Budgets,
        online: &[u32],
        tid: i32,
        identity: ThreadIdentity,
    ) -> bool {
        let target = Target::Thread(tid);
        // Exclusions (a thread that cleared its bit) are read apart from
        // the groups they come off, so what both count moves between the
        // two reads and a count could seem to go back; a rebuild drops them
        // where no thread needs them, as it always did.
        if self.settings.scope != Scope::LogSelect
            || !self.counting()
            || self.settings.pme.contains_key(&tid)
            || !self.host.exclusions.is_empty()
        {
            return false;
        }
        let cpus = self.online_cpus(online);
        let Ok(charges) = self.host_event_charges(backend, budgets, cpus.len()) else {
            return false;
        };
        let (modes, running) = (self.modes(), self.settings.enabled);
        let mut groups = Vec::new();
        let events = self.group_events();
        if !events.is_empty() {
            for &cpu in &cpus {
                let spec = self.group_spec(target, cpu, events.clone(), modes);
                match open_group(backend, &spec, running) {
                    Ok(live) => groups.push(live),
                    Err(e) => {
                        tracing::debug!(tid, "PCNTLOGSELECT joining the live events: {e}");
                        return false;
                    }
                }
            }
        }
        let mut samplers = Vec::new();
        for (kind, sink) in &self.host.sampler_kinds {
            for &cpu in &cpus {
                let spec = SamplerSpec {
                    target,
                    cpu,
                    ..kind.clone()
                };
                // Switched on after the groups, as at an enable.
                let opened = backend.open_sampler(&spec, sink.clone()).and_then(|mut s| {
                    if running {
                        s.enable()?;
                    }
                    Ok(s)
                });
                match opened {
                    Ok(sampler) => samplers.push(sampler),
                    Err(e) => {
                        tracing::debug!(tid, "PCNTLOGSELECT joining the live samplers: {e}");
                        return false;
                    }
                }
            }
        }
        // The thread must still be the one that asked (see `start_counting`).
        if backend.thread_identity(tid) != Some(identity) {
            return false;
        }
        self.host.groups.extend(groups);
        self.host.samplers.extend(samplers);
        self.host.host_charges.extend(charges);
        self.settings.pme.insert(tid, identity);
        self.followed = self.settings.pme.keys().copied().collect();
        // Kept events lack the thread: settings changed back rebuild.
        self.kept.clear();
        true
    }

    /// `PCNTCLEARPCBPME` by `tid`, a thread that set its PME bit, keeping
    /// what it created since counted (their bits are their own, as on
    /// Tru64): its groups stay, and groups on it alone (inherited, so also
    /// what it creates from now on) count what is left out. False where
    /// that cannot be done and the caller rebuilds the host events without
    /// the thread instead: no such groups to keep, samplers (samples cannot
    /// be taken off), or the budget or the host refusing the new groups.
    pub fn exclude_pme_thread(
        &mut self,
        backend: &dyn Backend,
        budgets: &Budgets,
        tid: i32,
    ) -> bool {
        let target = Target::Thread(tid);
        if self.host.exclusions.iter().any(|g| g.target == target) {
            return true; // cleared before
        }
        if self.settings.scope != Scope::LogSelect
            || !self.host.samplers.is_empty()
            || !self.settings.pme.contains_key(&tid)
        {
            return false;
        }
        let kept: Vec<(u32, Vec<HostEvent>)> = self
            .host
            .groups
            .iter()
            .filter(|g| g.target == target)
            .map(|g| (g.cpu, g.events.clone()))
            .collect();
        if kept.is_empty() {
            return false;
        }
        let descriptors = kept.iter().map(|(_, events)| events.len() as u64).sum();
        let Ok(charge) = budgets.charge(self.opener.uid, Resource::PerfDescriptors, descriptors)
        else {
            return false;
        };
        let modes = self.modes();
        let mut opened = Vec::with_capacity(kept.len());
        for (cpu, events) in kept {
            let spec = self.group_spec(target, cpu, events, modes);
            match open_group(backend, &spec, self.settings.enabled) {
                Ok(live) => opened.push(live),
                Err(e) => {
                    tracing::debug!(tid, "PCNTCLEARPCBPME keeping descendants: {e}");
                    return false;
                }
            }
        }
        self.host.exclusions.extend(opened);
        // Kept events would count the thread again.
        self.kept.clear();
        self.host.host_charges.push(charge);
        self.settings.pme.remove(&tid);
        true
    }

    /// Forgets the PME threads that have exited, those whose number a
    /// later thread took (perhaps another user's), and those whose
    /// credentials changed: events are opened on a thread id only while it
    /// names the thread that took the bit, as it was then. (At an exec
    /// that makes a thread not dumpable the kernel removes the events on
    /// it; pfmd must not open them again.)
    pub fn forget_exited_pme(&mut self, backend: &dyn Backend) {
        self.settings.pme.retain(|&tid, known| {
            let same = backend.thread_identity(tid) == Some(*known);
            if !same {
                tracing::debug!(
                    tid,
                    "PME thread has exited or changed credentials; it no longer counts"
                );
            }
            same
        });
    }

    /// True when `e` says a PME thread has exited (`ESRCH`): it no longer
    /// counts and is forgotten, and the open goes on with the others. A
    /// thread that exits between its LOGSELECT and the next settings change
    /// must not wedge the open.
    fn thread_exited(&mut self, target: Target, e: &BackendError) -> bool {
        let (Target::Thread(tid), BackendError::Open { errno, .. }) = (target, e) else {
            return false;
        };
        if *errno != Errno::ESRCH {
            return false;
        }
        tracing::debug!(tid, "PME thread has exited; it no longer counts");
        self.settings.pme.remove(&tid);
        true
    }
}

impl LiveGroup {
    /// Cumulative counts. Scaled by time enabled / running only for CPU-wide
    /// groups sharing counters with another perf user: a per-thread group on
    /// one CPU is "enabled but not running" whenever its thread runs on
    /// another CPU, and scaling that would count the thread once per CPU.
    pub(super) fn counts(&mut self, shared: bool) -> Result<Vec<u64>, DeviceError> {
        let reading = self.group.read().map_err(host_error)?;
        Ok(if shared && self.target == Target::AllTasks {
            reading.scaled()
        } else {
            reading.values
        })
    }
}

pub(super) fn open_group(
    backend: &dyn Backend,
    spec: &GroupSpec,
    running: bool,
) -> Result<LiveGroup, BackendError> {
    let mut group = backend.open_group(spec)?;
    let reading = group.read()?;
    let baseline = if spec.shared && spec.target == Target::AllTasks {
        reading.scaled()
    } else {
        reading.values
    };
    if running {
        group.enable()?;
    }
    Ok(LiveGroup {
        cpu: spec.cpu,
        target: spec.target,
        events: spec.events.clone(),
        group,
        baseline,
    })
}
