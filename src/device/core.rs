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

    /// `write(2)`: the device has none, like a character driver without a
    /// write method.
    pub fn write(&self, _id: FileId) -> Result<usize, DeviceError> {
        Err(DeviceError::invalid("the device has no write method"))
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
                if !file.enabled {
                    return Ok(IoctlReply::none());
                }
                self.reconfigure(file, &mut st.tallies, |f| f.enabled = false)
            }
            Request::Enable => {
                if file.enabled {
                    return Ok(IoctlReply::none());
                }
                // Checked when counting would start: an open already counting
                // was started by a caller allowed to.
                self.check_may_enable(file, caller)?;
                self.reconfigure(file, &mut st.tallies, |f| f.enabled = true)
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
                    // IBS/PEBS samples are decoded (ev6::sampling) but no sampler
                    // drives that hardware yet: refuse rather than fill the buckets
                    // with plain IP samples under the statistic's name.
                    if !matches!(plan.method, profile_me::Method::Ip) {
                        return Err(DeviceError::NotSupported(format!(
                            "{}: this host has {:?} sampling, but pfmd does not drive it yet; \
                             only PF67_PM_RETIRE, PF67_PM_FREQ and PF67_PM_VALID are measured",
                            plan.statistic.name, plan.method
                        )));
                    }
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
        let khz = self.config.cpu_khz;
        let built = file.counting();
        let plan = file.host_plan();
        if built {
            file.fold(tallies, khz)?;
        }
        change(file, tallies);
        if built && file.host_plan() == plan {
            // The same host events: keep them, and the threads and processes
            // they already follow (the PME bit), and only switch them.
            let running = file.enabled;
            return file.set_running(running).map(|()| IoctlReply::none());
        }
        if built {
            file.stop_counting(tallies, khz)?;
        }
        if let Err(e) = file.start_counting(self.backend.as_ref(), khz) {
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

#[path = "counters.rs"]
mod counters;
#[path = "profiling.rs"]
mod profiling;
use counters::first_periods;

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "sampling_tests.rs"]
mod sampling_tests;
