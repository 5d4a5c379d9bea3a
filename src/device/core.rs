//! The transport-free device: typed requests from a caller in, data or an
//! errno out. Transports (FUSE, CUSE) only translate to and from it.

use super::caller::{Caller, SecurityPolicy};
use super::histogram::{Profile, ProfileMode};
use super::open_file::{CounterState, OpenFile, OpenMode, Registers, Scope, Selected};
use super::tally::{CpuTally, MAX_COUNTERS, Tally};
use crate::backend::Backend;
use crate::ev6::profile_me;
use crate::ev6::sampling::SamplingHardware;
use crate::ioctl::abi::{self, PFM_COUNTERS, PFM_IPL, PFM_PROFILING, PfIpls, PfmInfo};
use crate::ioctl::{DeviceError, Request, decode, numbers};
use crate::model::{CounterSetting, EventMap, Family, Implementation, Resolution, resolve};
use crate::{ev4, ev5, ev6};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};
use zerocopy::{Immutable, IntoBytes};

pub type FileId = u64;

/// What an enabling ioctl does to the raw counters it turns on.
pub(super) enum RawStart<'a> {
    Keep,
    /// `RESTART`: zero them.
    Zero,
    /// `ENABWRITE`: write `values` on `cpus`.
    Write {
        cpus: &'a [u32],
        values: &'a [u64],
    },
}

/// PCNTCALLER ranges a kernel profile may have (contract §6).
pub const MAX_CALLER_RANGES: usize = 4;

/// Fixed facts the device is built with.
#[derive(Debug, Clone)]
pub struct DeviceConfig {
    pub implementation: Implementation,
    /// Nominal clock in kHz, for `pr_cycle` and cycle approximations.
    pub cpu_khz: u64,
    /// `sysconf(_SC_NPROCESSORS_CONF)`: the length of an EACH-mode array.
    pub configured_cpus: usize,
    pub online_cpus: Vec<u32>,
    pub policy: SecurityPolicy,
    pub event_map: EventMap,
    /// Largest profile histogram one open may allocate (`--max-profile-bytes`).
    pub max_profile_bytes: u64,
    /// Kernel text `[_stext, _etext)` from /proc/kallsyms, if readable.
    pub kernel_text: Option<(u64, u64)>,
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
    pub(super) fn none() -> Self {
        IoctlReply::default()
    }
    pub(super) fn out(bytes: &[u8]) -> Self {
        IoctlReply {
            out: bytes.to_vec(),
            store: None,
        }
    }
    pub(super) fn store(addr: u64, bytes: Vec<u8>) -> Self {
        IoctlReply {
            out: Vec::new(),
            store: Some(CallerStore { addr, bytes }),
        }
    }
}

struct State {
    files: HashMap<FileId, OpenFile>,
    next_id: FileId,
    /// Which open holds each CPU.
    holder: Vec<Option<FileId>>,
    tallies: Vec<CpuTally>,
    /// The last selection made: a new open starts with it, as the chip's mux
    /// register keeps its value across opens.
    selection: CounterState,
}

pub struct Device {
    config: DeviceConfig,
    backend: Arc<dyn Backend>,
    state: Mutex<State>,
    /// IBS/PEBS, probed on first need (EV67 profile-me statistics).
    sampling: OnceLock<SamplingHardware>,
    /// Signalled on every release, for opens waiting out a close in flight.
    released: Condvar,
}

/// How long an open waits for CPUs a just-closed file still holds: FUSE sends
/// RELEASE after close(2) has returned, so without this a close-then-open
/// sequence (ordinary for a kernel driver) would race into EBUSY.
const RELEASE_GRACE: Duration = Duration::from_millis(50);

fn now_cycles(khz: u64) -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux; 0 would only make pr_cycle stale.
    let ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|ts| ts.tv_sec() as u128 * 1_000_000_000 + ts.tv_nsec() as u128)
        .unwrap_or(0);
    (ns * khz as u128 / 1_000_000) as u64
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
        let state = State {
            files: HashMap::new(),
            next_id: 1,
            holder: vec![None; slots],
            tallies: vec![CpuTally::default(); slots],
            selection: CounterState {
                registers: Registers::new(first_periods(config.implementation)),
                counters: Default::default(),
            },
        };
        Device {
            config,
            backend,
            state: Mutex::new(state),
            sampling: OnceLock::new(),
            released: Condvar::new(),
        }
    }

    /// The host's instruction-sampling hardware (probed once).
    pub fn sampling_hardware(&self) -> SamplingHardware {
        *self.sampling.get_or_init(SamplingHardware::probe)
    }

    /// Fixes what [`Device::sampling_hardware`] reports (tests).
    #[cfg(test)]
    pub(super) fn assume_sampling_hardware(&self, hardware: SamplingHardware) {
        let _ = self.sampling.set(hardware);
    }

    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock must not take the device down with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `open(2)`: `flags` are the open flags carrying the mode bits.
    pub fn open(&self, caller: &Caller, flags: i32) -> Result<FileId, DeviceError> {
        let creds = caller.credentials()?;
        let mode = match flags & abi::PCNTOPENMASK {
            abi::PCNTOPENONE => match creds.cpus_allowed.as_slice() {
                [cpu] if self.config.online_cpus.contains(cpu) => OpenMode::One(*cpu),
                allowed => {
                    return Err(DeviceError::invalid(format!(
                        "PCNTOPENONE needs the caller bound to exactly one CPU; tid {} may run on {allowed:?}",
                        caller.tid()
                    )));
                }
            },
            abi::PCNTOPENEACH => OpenMode::Each,
            _ => OpenMode::All,
        };
        let cpus = match mode {
            OpenMode::One(cpu) => vec![cpu],
            OpenMode::Each | OpenMode::All => self.config.online_cpus.clone(),
        };
        let mut st = self.lock();
        let deadline = Instant::now() + RELEASE_GRACE;
        while let Some(&cpu) = cpus.iter().find(|&&c| st.holder[c as usize].is_some()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(DeviceError::Busy(format!(
                    "cpu {cpu} is held by another open"
                )));
            }
            st = self
                .released
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let shared = if self.backend.hardware_contended(&cpus) {
            if !creds.perf_privileged() {
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
        let id = st.next_id;
        st.next_id += 1;
        for &cpu in &cpus {
            st.holder[cpu as usize] = Some(id);
        }
        let file = OpenFile::new(
            creds.tgid,
            mode,
            cpus,
            st.selection.reopened(),
            shared,
            self.config.configured_cpus,
        );
        st.files.insert(id, file);
        tracing::info!(file = id, tid = caller.tid(), ?mode, "opened");
        Ok(id)
    }

    /// Last close of an open file: interrupts off, host events stopped, CPUs
    /// free. The counts stay in the device.
    pub fn release(&self, id: FileId) {
        let mut st = self.lock();
        let State {
            files,
            holder,
            tallies,
            ..
        } = &mut *st;
        let Some(mut file) = files.remove(&id) else {
            return;
        };
        if let Err(e) = file.stop_counting(tallies, self.config.cpu_khz) {
            tracing::warn!(file = id, "final read on close failed: {e}");
        }
        for slot in holder.iter_mut().filter(|h| **h == Some(id)) {
            *slot = None;
        }
        tracing::info!(file = id, pid = file.tgid, "closed");
        self.released.notify_all();
    }

    /// `read(2)`: the profile buckets from byte 0 on every call, whatever the
    /// file offset (contract §6). A large read reaches us in pieces whose
    /// offsets count up from 0 within the call; the piece at offset 0 takes
    /// the snapshot every later piece of the same call is served from.
    pub fn read(
        &self,
        id: FileId,
        _caller: &Caller,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, DeviceError> {
        let mut st = self.lock();
        let file = st
            .files
            .get_mut(&id)
            .ok_or_else(|| DeviceError::invalid("no such open file"))?;
        if offset == 0 {
            file.drain_samples();
            file.read_snapshot = file.histograms.lock().profile_bytes();
        }
        let snapshot = &file.read_snapshot;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(snapshot.len());
        let end = start.saturating_add(size as usize).min(snapshot.len());
        Ok(snapshot[start..end].to_vec())
    }

    /// One ioctl, decoded from its number and input bytes.
    pub fn ioctl(
        &self,
        id: FileId,
        caller: &Caller,
        cmd: u32,
        data: &[u8],
    ) -> Result<IoctlReply, DeviceError> {
        let result = decode(cmd, data).and_then(|request| self.request(id, caller, request));
        match &result {
            Ok(_) => tracing::trace!(
                file = id,
                tid = caller.tid(),
                cmd = numbers::name(cmd).unwrap_or("?"),
                "ioctl"
            ),
            Err(e) => tracing::debug!(
                file = id,
                tid = caller.tid(),
                cmd = numbers::name(cmd).unwrap_or("?"),
                errno = %e.errno(),
                "ioctl refused: {e}"
            ),
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
        let family = self.config.implementation.family();
        if let Some(wanted) = request.family().filter(|f| *f != family) {
            return Err(DeviceError::invalid(format!(
                "{wanted:?} ioctl on a device emulating {}",
                self.config.implementation
            )));
        }
        let mut guard = self.lock();
        let st = &mut *guard;
        let file = st
            .files
            .get_mut(&id)
            .ok_or_else(|| DeviceError::invalid("no such open file"))?;
        let khz = self.config.cpu_khz;
        let policy = &self.config.policy;
        match request {
            Request::Disable => {
                if file.enabled {
                    file.enabled = false;
                    file.stop_counting(&mut st.tallies, khz)?;
                }
                Ok(IoctlReply::none())
            }
            Request::Enable => {
                if file.enabled {
                    return Ok(IoctlReply::none());
                }
                // Checked when counting would start: an open already counting
                // was started by a caller allowed to.
                self.check_may_enable(file, caller)?;
                file.enabled = true;
                if let Err(e) = file.start_counting(self.backend.as_ref(), self.config.cpu_khz) {
                    file.enabled = false;
                    return Err(e);
                }
                Ok(IoctlReply::none())
            }
            Request::LogAll => {
                if !policy.may_count_system_wide(caller.credentials()?) {
                    return Err(DeviceError::AccessDenied(format!(
                        "system-wide counting needs perf_event_paranoid <= 0 (it is {}), CAP_PERFMON or --allow-group",
                        policy.paranoid()
                    )));
                }
                self.reconfigure(file, &mut st.tallies, |f| f.scope = Scope::LogAll)
            }
            Request::LogSelect => {
                let creds = caller.credentials()?;
                if !policy.may_count_own_user(creds) {
                    return Err(DeviceError::AccessDenied(format!(
                        "counting your own threads needs perf_event_paranoid <= 2 (it is {})",
                        policy.paranoid()
                    )));
                }
                let kernel = policy.may_count_own_kernel(creds);
                if !kernel {
                    tracing::info!(
                        tid = caller.tid(),
                        "LOGSELECT without kernel-mode privilege: counting user mode only"
                    );
                }
                let tid = caller.tid();
                self.reconfigure(file, &mut st.tallies, |f| {
                    f.scope = Scope::LogSelect;
                    f.pme.insert(tid);
                    f.kernel_allowed &= kernel;
                })
            }
            Request::ClearPcbPme => {
                let tid = caller.tid();
                self.reconfigure(file, &mut st.tallies, |f| {
                    f.pme.remove(&tid);
                })
            }
            Request::ClearCnt => {
                if file.items & (PFM_COUNTERS | PFM_IPL) == 0 {
                    return Err(DeviceError::invalid(
                        "PCNTCLEARCNT needs PFM_COUNTERS or PFM_IPL selected",
                    ));
                }
                if file.items & PFM_COUNTERS != 0 {
                    // Fold first so events before the clear are not counted after it.
                    file.pending_events(khz, true)?;
                    let now = now_cycles(khz);
                    for &cpu in &file.cpus {
                        st.tallies[cpu as usize].clear(now);
                    }
                }
                if file.items & PFM_IPL != 0 {
                    file.drain_samples();
                    file.histograms.lock().clear_ipl();
                }
                Ok(IoctlReply::none())
            }
            Request::Caller => {
                let profiling_kernel = file
                    .histograms
                    .lock()
                    .profile
                    .as_ref()
                    .is_some_and(|p| p.mode == ProfileMode::Kernel);
                if !profiling_kernel {
                    return Err(DeviceError::invalid("PCNTCALLER needs kernel profiling on"));
                }
                self.reconfigure(file, &mut st.tallies, |f| {
                    if let Some(p) = f.histograms.lock().profile.as_mut() {
                        p.caller_mode = true;
                    }
                })
            }
            Request::GetRsize => {
                // 0 when profiling is off or no range is set (contract §6).
                let profiling = file.items & PFM_PROFILING != 0;
                let bytes = file
                    .histograms
                    .lock()
                    .profile
                    .as_ref()
                    .filter(|_| profiling)
                    .map_or(0, |p| {
                        p.buckets.iter().map(|b| b.len() as u64 * 4).sum::<u64>()
                    });
                Ok(IoctlReply::out(bytes.as_bytes()))
            }
            Request::GetIplHis { addr } => {
                if file.items & PFM_IPL == 0 {
                    return Err(DeviceError::invalid("PCNTGETIPLHIS needs PFM_IPL selected"));
                }
                file.drain_samples();
                let out: Vec<PfIpls> = file
                    .histograms
                    .lock()
                    .ipl
                    .iter()
                    .map(|&ipl| PfIpls { ipl })
                    .collect();
                Ok(IoctlReply::store(addr, out.as_bytes().to_vec()))
            }
            Request::SetItems(items) => {
                if items & abi::PFM_ITEMS_MASK == 0 {
                    return Err(DeviceError::invalid(format!(
                        "PCNTSETITEMS({items:#x}) selects no item"
                    )));
                }
                let profile_me = (items & abi::PFM_PROFME_MODE_MASK) >> abi::PFM_PROFME_MODE_SHIFT;
                if profile_me != 0 && self.config.implementation != Implementation::Ev67 {
                    return Err(DeviceError::invalid(format!(
                        "profile-me statistic {profile_me} needs --model ev67"
                    )));
                }
                if let Some(plan) = profile_me::plan(profile_me, &self.sampling_hardware())? {
                    tracing::info!(
                        file = id,
                        statistic = plan.statistic.name,
                        method = ?plan.method,
                        "profile-me statistic selected"
                    );
                }
                self.reconfigure(file, &mut st.tallies, |f| {
                    f.items = items;
                    f.histograms.lock().ipl_on = items & PFM_IPL != 0;
                })
            }
            Request::SetUaddr(r) => {
                let stride = file.stride;
                self.set_range(file, caller, ProfileMode::User, r.start, r.end, stride)
            }
            Request::SetKaddr(r) => {
                let stride = file.stride;
                self.set_range(file, caller, ProfileMode::Kernel, r.start, r.end, stride)
            }
            Request::SetUrange(r) => {
                self.set_range(file, caller, ProfileMode::User, r.start, r.end, r.stride)
            }
            Request::SetKrange(r) => {
                self.set_range(file, caller, ProfileMode::Kernel, r.start, r.end, r.stride)
            }
            Request::GetInfo => Ok(IoctlReply::out(self.info(file).as_bytes())),
            Request::Ev4(r) => self.ev4_request(file, &mut st.tallies, &mut st.selection, r),
            Request::Ev5(r) => {
                self.ev5_request(file, &mut st.tallies, &mut st.selection, caller, r)
            }
            Request::Ev6(r) => {
                self.ev6_request(file, &mut st.tallies, &mut st.selection, caller, r)
            }
        }
    }

    /// PCNTSET[UK]ADDR/RANGE: a new profiled range (turning that mode on), or
    /// in CALLER mode a kernel caller range (contract §6).
    fn set_range(
        &self,
        file: &mut OpenFile,
        caller: &Caller,
        mode: ProfileMode,
        start: u64,
        end: u64,
        stride: u64,
    ) -> Result<IoctlReply, DeviceError> {
        Self::need_profiling(file)?;
        if mode == ProfileMode::Kernel
            && !self
                .config
                .policy
                .may_count_system_wide(caller.credentials()?)
        {
            return Err(DeviceError::AccessDenied(
                "kernel PC profiling needs perf_event_paranoid <= 0, CAP_PERFMON or --allow-group"
                    .into(),
            ));
        }
        file.drain_samples();
        let mut histograms = file.histograms.lock();
        if mode == ProfileMode::Kernel
            && let Some(profile) = histograms.profile.as_mut().filter(|p| p.caller_mode)
        {
            let (text_start, text_end) = self.config.kernel_text.unwrap_or((0, 0));
            if end <= start
                || !start.is_multiple_of(4)
                || !end.is_multiple_of(4)
                || start < text_start
                || end > text_end
            {
                return Err(DeviceError::Fault(format!(
                    "caller range [{start:#x}, {end:#x}) is not aligned kernel text [{text_start:#x}, {text_end:#x})"
                )));
            }
            if profile.caller_ranges.len() >= MAX_CALLER_RANGES {
                return Err(DeviceError::NoSpace(format!(
                    "only {MAX_CALLER_RANGES} caller ranges"
                )));
            }
            profile.caller_ranges.push((start, end));
            return Ok(IoctlReply::none());
        }
        if stride != 0 && !stride.is_power_of_two() {
            return Err(DeviceError::invalid(format!(
                "stride {stride} is not 0 or a power of two"
            )));
        }
        if end <= start {
            return Err(DeviceError::invalid(format!(
                "empty range [{start:#x}, {end:#x})"
            )));
        }
        let buckets = Profile::bucket_count(start, end, stride);
        let slots = histograms.slots() as u64;
        let bytes = buckets.saturating_mul(4).saturating_mul(slots);
        if bytes > self.config.max_profile_bytes {
            return Err(DeviceError::NoMemory(format!(
                "{bytes} bytes of buckets exceed --max-profile-bytes {}",
                self.config.max_profile_bytes
            )));
        }
        let mut cells = Vec::new();
        for _ in 0..slots {
            let mut slot: Vec<u32> = Vec::new();
            slot.try_reserve_exact(buckets as usize)
                .map_err(|e| DeviceError::NoMemory(format!("{bytes} bytes of buckets: {e}")))?;
            slot.resize(buckets as usize, 0);
            cells.push(slot);
        }
        histograms.profile = Some(Profile {
            mode,
            start,
            end,
            bucket_bytes: stride.saturating_mul(4),
            buckets: cells,
            caller_mode: false,
            caller_ranges: Vec::new(),
        });
        drop(histograms);
        file.stride = if stride == 0 { file.stride } else { stride };
        tracing::info!(?mode, start, end, stride, buckets, "profiling range set");
        Ok(IoctlReply::none())
    }

    fn need_profiling(file: &OpenFile) -> Result<(), DeviceError> {
        if file.items & PFM_PROFILING == 0 {
            return Err(DeviceError::invalid(
                "the device is not open for profiling (PFM_PROFILING)",
            ));
        }
        Ok(())
    }

    /// Resolves a counter's event against the host; `EOPNOTSUPP` naming the
    /// event when the host cannot count it. Only counters that count are
    /// resolved: a disabled counter's event was validated by the model only.
    fn resolve_setting(&self, setting: &CounterSetting) -> Result<Selected, DeviceError> {
        match resolve(setting.event, self.backend.as_ref(), &self.config.event_map) {
            Resolution::Resolved(resolved) => Ok(Selected {
                resolved,
                period: setting.period,
            }),
            Resolution::Unavailable { event, reason } => {
                tracing::warn!(
                    event = event.name,
                    "selected event cannot be counted on this host: {reason}"
                );
                Err(DeviceError::NotSupported(format!(
                    "{}: {reason}",
                    event.name
                )))
            }
        }
    }

    /// Applies a settings change: stop counting, change, start again if enabled.
    pub(super) fn reconfigure(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        change: impl FnOnce(&mut OpenFile),
    ) -> Result<IoctlReply, DeviceError> {
        self.reconfigure_with(file, tallies, |f, _| change(f))
    }

    /// As [`Device::reconfigure`], with the tallies at hand: when `change`
    /// runs, every event counted so far is folded into them.
    pub(super) fn reconfigure_with(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        change: impl FnOnce(&mut OpenFile, &mut [CpuTally]),
    ) -> Result<IoctlReply, DeviceError> {
        let was_counting = file.counting();
        if was_counting {
            file.stop_counting(tallies, self.config.cpu_khz)?;
        }
        change(file, tallies);
        if let Err(e) = file.start_counting(self.backend.as_ref(), self.config.cpu_khz) {
            // The settings stay; counting resumes at the next PCNTRENABLE.
            file.enabled = false;
            return Err(e);
        }
        Ok(IoctlReply::none())
    }

    /// The counts of each of the open's CPUs as of now, with `pr_cycle`.
    pub(super) fn snapshot(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
    ) -> Result<Vec<(u32, [Tally; MAX_COUNTERS], u64)>, DeviceError> {
        let pending = file.pending_events(self.config.cpu_khz, false)?;
        let now = now_cycles(self.config.cpu_khz);
        Ok(file
            .cpus
            .iter()
            .map(|&cpu| {
                let tally = &mut tallies[cpu as usize];
                let seen = file.projected(tally, pending.get(&cpu));
                tally.stamp(&seen, now);
                (cpu, seen, tally.pr_cycle)
            })
            .collect())
    }

    fn info(&self, file: &OpenFile) -> PfmInfo {
        let implementation = self.config.implementation;
        let widths: &[u32] = match implementation.family() {
            Family::Ev4 => &ev4::WIDTHS,
            Family::Ev5 => &ev5::WIDTHS,
            Family::Ev6 => &ev6::WIDTHS,
        };
        let mut info = PfmInfo {
            pi_version: abi::PFM_INFO_VERSION,
            pi_family: implementation.family() as u64,
            pi_impl: implementation as u64,
            pi_ncpus: self.config.configured_cpus as u64,
            pi_ncounters: widths.len() as u64,
            pi_open_mode: match file.mode {
                OpenMode::One(_) => abi::PFM_MODE_ONE,
                OpenMode::Each => abi::PFM_MODE_EACH,
                OpenMode::All => abi::PFM_MODE_ALL,
            },
            pi_items: file.items,
            pi_cpu_khz: self.config.cpu_khz,
            ..PfmInfo::default()
        };
        let flag = |on: bool, bit: u64| if on { bit } else { 0 };
        info.pi_flags = flag(file.shared, abi::PFM_INFO_SHARED)
            | flag(file.scope == Scope::LogSelect, abi::PFM_INFO_LOGSELECT)
            | flag(file.enabled, abi::PFM_INFO_ENABLED)
            | flag(!file.modes().kernel, abi::PFM_INFO_USER_ONLY);
        for (i, width) in widths.iter().enumerate() {
            info.pi_width[i] = u64::from(*width);
            if let Some(selected) = &file.counters[i] {
                info.pi_fidelity[i] = selected.resolved.fidelity.abi_code();
                info.pi_period[i] = selected.period;
                info.pi_sample_period[i] = file.sample_period[i];
            }
        }
        info.pi_lost_samples = file
            .histograms
            .lost
            .load(std::sync::atomic::Ordering::Relaxed);
        info.pi_throttled = file
            .histograms
            .throttled
            .load(std::sync::atomic::Ordering::Relaxed);
        info
    }
}

/// The periods a family's counters have before any selection.
fn first_periods(implementation: Implementation) -> [u64; MAX_COUNTERS] {
    match implementation.family() {
        Family::Ev4 => [65536, 4096, 0],
        Family::Ev5 => ev5::DEFAULT_PERIODS,
        Family::Ev6 => [ev6::PERIOD, ev6::PERIOD, 0],
    }
}

// Per-counter registers: shared by every family's mux, enable and counter
// ioctls (ev4_ioctl.rs, ev5_ioctl.rs, ev6_ioctl.rs).
impl Device {
    /// `EACCES` where enabling would count system-wide for a caller not
    /// allowed to (contract §8): PCNTRENABLE and every family's
    /// ENABLE/RESTART/ENABWRITE.
    pub(super) fn check_may_enable(
        &self,
        file: &OpenFile,
        caller: &Caller,
    ) -> Result<(), DeviceError> {
        if file.scope == Scope::LogAll
            && !self
                .config
                .policy
                .may_count_system_wide(caller.credentials()?)
        {
            return Err(DeviceError::AccessDenied(
                "system-wide counting (LOGALL) is not allowed for this caller; select PCNTLOGSELECT first".into(),
            ));
        }
        Ok(())
    }

    /// Applies new registers to an open: resolves every counter they make
    /// count (`EOPNOTSUPP` leaves everything as it was), remembers them for
    /// the next open, then reconfigures; `change` runs with the tallies
    /// folded, before counting restarts.
    pub(super) fn apply_registers(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        saved: &mut CounterState,
        registers: Registers,
        change: impl FnOnce(&mut OpenFile, &mut [CpuTally]),
    ) -> Result<IoctlReply, DeviceError> {
        let mut counters: [Option<Selected>; MAX_COUNTERS] = Default::default();
        for (slot, setting) in counters.iter_mut().zip(registers.effective()) {
            if let Some(setting) = setting {
                *slot = Some(self.resolve_setting(&setting)?);
            }
        }
        *saved = CounterState {
            registers: registers.clone(),
            counters: counters.clone(),
        };
        self.reconfigure_with(file, tallies, |f, t| {
            f.registers = registers;
            f.counters = counters;
            change(f, t);
        })
    }

    /// The CPUs a `pmctrs` cpu field names for this open: `PMCTRS_ALL_CPUS`
    /// is every CPU it holds; another CPU must be one it holds.
    pub(super) fn pmctrs_cpus(file: &OpenFile, cpu: u64) -> Result<Vec<u32>, DeviceError> {
        if cpu == abi::PMCTRS_ALL_CPUS {
            return Ok(file.cpus.clone());
        }
        file.cpus
            .iter()
            .copied()
            .find(|&c| u64::from(c) == cpu)
            .map(|c| vec![c])
            .ok_or_else(|| {
                DeviceError::invalid(format!(
                    "cpu {cpu} is not one this open holds ({:?})",
                    file.cpus
                ))
            })
    }

    /// The one CPU a `*GETCNTRS` reads: the cpu field, or with
    /// `PMCTRS_ALL_CPUS` the CPU of a PCNTOPENONE open.
    pub(super) fn pmctrs_one_cpu(file: &OpenFile, cpu: u64) -> Result<u32, DeviceError> {
        match Self::pmctrs_cpus(file, cpu)?.as_slice() {
            [one] => Ok(*one),
            _ => Err(DeviceError::invalid(
                "GETCNTRS reads the counters of one CPU: name it in the cpu field",
            )),
        }
    }

    /// Sets the raw counter (events since the last interrupt) of the
    /// `selected` counters on `cpus` to `values` modulo the period, so the
    /// next interrupt comes after `period - value` events: `2^width - value`
    /// at the full-width periods, as on the chip. Interrupt counts stay.
    /// `PCNT?ENABLE`, `PCNT?RESTART` and `PCNT6ENABWRITE`: turn the
    /// `selected` counters on, set their raw counters as `start` says, and
    /// start counting as `PCNTRENABLE` would (privilege checked when counting
    /// starts).
    pub(super) fn enable_counters(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        saved: &mut CounterState,
        caller: &Caller,
        selected: &[bool],
        start: RawStart<'_>,
    ) -> Result<IoctlReply, DeviceError> {
        if !selected.contains(&true) {
            return Ok(IoctlReply::none());
        }
        if !file.enabled {
            self.check_may_enable(file, caller)?;
        }
        let mut registers = file.registers.clone();
        for (on, s) in registers.on.iter_mut().zip(selected) {
            *on |= s;
        }
        self.apply_registers(file, tallies, saved, registers, |f, t| {
            match start {
                RawStart::Keep => {}
                RawStart::Zero => {
                    let cpus = f.cpus.clone();
                    Self::preload(f, t, &cpus, selected, &[0; MAX_COUNTERS]);
                }
                RawStart::Write { cpus, values } => Self::preload(f, t, cpus, selected, values),
            }
            f.enabled = true;
        })
    }

    pub(super) fn preload(
        file: &OpenFile,
        tallies: &mut [CpuTally],
        cpus: &[u32],
        selected: &[bool],
        values: &[u64],
    ) {
        for &cpu in cpus {
            let Some(tally) = tallies.get_mut(cpu as usize) else {
                continue;
            };
            for (i, (&sel, &value)) in selected.iter().zip(values).enumerate() {
                if sel {
                    let period = file.registers.periods[i].max(1);
                    tally.counters[i].residual = value % period;
                }
            }
        }
    }

    /// Per CPU of the open, as of one snapshot: `pr_cycle` and each counter's
    /// `(interrupts << width) + raw` (`*READCNTRS`), or its interrupts
    /// (`*GETCNT`). Each CPU's values come from one read of its groups, so
    /// the interrupt and raw parts always belong together (seed 004).
    pub(super) fn counter_values(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        widths: &[u32],
        full: bool,
    ) -> Result<Vec<(u32, [u64; MAX_COUNTERS], u64)>, DeviceError> {
        let per_cpu = self.snapshot(file, tallies)?;
        Ok(per_cpu
            .into_iter()
            .map(|(cpu, t, pr_cycle)| {
                let mut values = [0u64; MAX_COUNTERS];
                for (i, width) in widths.iter().enumerate() {
                    values[i] = if full {
                        t[i].interrupts
                            .wrapping_shl(*width)
                            .wrapping_add(t[i].residual)
                    } else {
                        t[i].interrupts
                    };
                }
                (cpu, values, pr_cycle)
            })
            .collect())
    }

    /// Lays `counter_values` out as the open mode wants: one element per
    /// configured CPU (EACH) or one element summed over the open's CPUs
    /// with the latest `pr_cycle` (ONE, ALL).
    pub(super) fn arrange_values<T: Default>(
        &self,
        mode: OpenMode,
        per_cpu: &[(u32, [u64; MAX_COUNTERS], u64)],
        element: impl Fn(&[u64; MAX_COUNTERS], u64) -> T,
    ) -> Vec<T> {
        match mode {
            OpenMode::Each => {
                let mut out: Vec<T> = (0..self.config.configured_cpus)
                    .map(|_| T::default())
                    .collect();
                for (cpu, values, pr_cycle) in per_cpu {
                    if let Some(slot) = out.get_mut(*cpu as usize) {
                        *slot = element(values, *pr_cycle);
                    }
                }
                out
            }
            OpenMode::One(_) | OpenMode::All => {
                let mut sum = [0u64; MAX_COUNTERS];
                let mut latest = 0;
                for (_, values, pr_cycle) in per_cpu {
                    for (s, v) in sum.iter_mut().zip(values) {
                        *s = s.wrapping_add(*v);
                    }
                    latest = latest.max(*pr_cycle);
                }
                vec![element(&sum, latest)]
            }
        }
    }

    /// `*GETCNT` (interrupts) and `*READCNTRS` (full counts) of any family,
    /// stored at the caller's pointer as `arrange_values` lays them out.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn counts_reply<T: IntoBytes + Immutable + Default>(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        addr: u64,
        widths: &[u32],
        full: bool,
        name: &str,
        element: impl Fn(&[u64; MAX_COUNTERS], u64) -> T,
    ) -> Result<IoctlReply, DeviceError> {
        if file.items & PFM_COUNTERS == 0 {
            return Err(DeviceError::invalid(format!(
                "{name} needs PFM_COUNTERS selected"
            )));
        }
        let per_cpu = self.counter_values(file, tallies, widths, full)?;
        let out: Vec<T> = self.arrange_values(file.mode, &per_cpu, element);
        Ok(IoctlReply::store(addr, out.as_bytes().to_vec()))
    }

    /// The raw counters of one CPU as of now.
    pub(super) fn raw_counters(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        cpu: u32,
    ) -> Result<[u64; MAX_COUNTERS], DeviceError> {
        let per_cpu = self.snapshot(file, tallies)?;
        let (_, t, _) = per_cpu
            .iter()
            .find(|(c, _, _)| *c == cpu)
            .ok_or_else(|| DeviceError::invalid(format!("cpu {cpu} is not held")))?;
        Ok(t.map(|t| t.residual))
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "sampling_tests.rs"]
mod sampling_tests;
