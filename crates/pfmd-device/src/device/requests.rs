//! The family-independent ioctls (docs/device.md §3), and the dispatch of the
//! rest to `counters`, `selection` and `profiling`.

use super::histogram::ProfileMode;
use super::open_file::Scope;
use super::session::Session;
use super::{DeviceError, IoctlReply, now_cycles};
use crate::backend::ModeFilter;
use pfm_abi::{Items, PfIpls, PfmInfo, Request, structs as abi};
use pfm_model::ev6::profile_me;
use zerocopy::IntoBytes;

impl Session<'_> {
    pub fn serve(mut self, request: Request) -> Result<IoctlReply, DeviceError> {
        let policy = &self.device.config.policy;
        match request {
            Request::Disable => {
                if !self.file.settings.enabled {
                    return Ok(IoctlReply::none());
                }
                self.reconfigure(|f| f.settings.enabled = false)
            }
            Request::Enable => {
                if self.file.settings.enabled {
                    return Ok(IoctlReply::none());
                }
                // Checked when counting would start: an open already counting
                // was started by a caller allowed to.
                self.check_may_enable()?;
                self.reconfigure(|f| f.settings.enabled = true)
            }
            Request::LogAll => {
                if !policy.may_count_system_wide(self.caller.credentials()?) {
                    return Err(DeviceError::AccessDenied(format!(
                        "system-wide counting needs perf_event_paranoid <= 0 (it is {}), CAP_PERFMON or --allow-group",
                        policy.paranoid()
                    )));
                }
                self.reconfigure(|f| f.settings.scope = Scope::LogAll)
            }
            Request::LogSelect => {
                let creds = self.caller.credentials()?;
                if !policy.may_count_own_user(creds) {
                    return Err(DeviceError::AccessDenied(format!(
                        "counting your own threads needs perf_event_paranoid <= 2 (it is {})",
                        policy.paranoid()
                    )));
                }
                let kernel = policy.may_count_own_kernel(creds);
                let tid = self.caller.tid();
                let identity = self.check_pme_room(tid)?;
                if !kernel {
                    tracing::debug!(
                        tid,
                        "LOGSELECT without kernel-mode privilege: counting user mode only"
                    );
                }
                if self.add_pme_thread(tid, identity, kernel) {
                    return Ok(IoctlReply::none());
                }
                self.reconfigure(|f| {
                    f.settings.scope = Scope::LogSelect;
                    f.settings.pme.insert(tid, identity);
                    f.settings.kernel_allowed &= kernel;
                })
            }
            Request::ClearPcbPme => {
                let tid = self.caller.tid();
                let device = self.device;
                if self
                    .file
                    .exclude_pme_thread(device.backend.as_ref(), &device.budgets, tid)
                {
                    return Ok(IoctlReply::none());
                }
                if !self.file.settings.pme.contains_key(&tid) && !self.file.settings.pme.is_empty()
                {
                    // The host events that carry an inherited bit cannot
                    // leave one descendant out (docs/device.md §3).
                    crate::logging::once(
                        "clearpcbpme-inherited",
                        "PCNTCLEARPCBPME from a thread that did not set the PME bit itself: an inherited bit cannot be cleared, the thread keeps counting",
                    );
                }
                self.reconfigure(|f| {
                    f.settings.pme.remove(&tid);
                })
            }
            Request::ClearCnt => self.clear_counts(),
            Request::Caller => {
                let profiling_kernel = self
                    .file
                    .with_active_profile(|p| p.mode == ProfileMode::Kernel);
                if profiling_kernel != Some(true) {
                    return Err(DeviceError::invalid("PCNTCALLER needs kernel profiling on"));
                }
                self.reconfigure(|f| {
                    if let Some(p) = f.sampled.histograms.lock().profile.as_mut() {
                        p.caller_mode = true;
                    }
                })
            }
            Request::GetRsize => {
                // 0 when profiling is off or no range is set (docs/device.md §6).
                let bytes = self
                    .file
                    .with_active_profile(|p| p.buckets.len() as u64 * 4)
                    .unwrap_or(0);
                Ok(IoctlReply::out(bytes.as_bytes()))
            }
            Request::GetIplHis { addr } => {
                if !self.file.settings.items.contains(Items::IPL) {
                    return Err(DeviceError::invalid("PCNTGETIPLHIS needs PFM_IPL selected"));
                }
                let khz = self.khz();
                self.file.fold_for_ipl(khz, &self.device.readers)?;
                let out: Vec<PfIpls> = self
                    .file
                    .sampled
                    .histograms
                    .lock()
                    .ipl
                    .iter()
                    .map(|&ipl| PfIpls { ipl })
                    .collect();
                Ok(IoctlReply::store(addr, out.as_bytes().to_vec()))
            }
            Request::SetItems(word) => self.set_items(word),
            Request::SetRange(range) => self.set_range(range),
            Request::GetInfo => Ok(IoctlReply::out(self.info().as_bytes())),
            Request::Ev4Mux(iccsr) => self.ev4_mux(iccsr),
            Request::Ev5Contexts(word) => self.ev5_contexts(word),
            Request::Ev5Mux(word) => self.ev5_mux(word),
            Request::Ev5Freq(word) => self.ev5_freq(word),
            Request::Ev6Mux(word) => self.ev6_mux(word),
            Request::Counters(_, op) => self.counter_op(op),
        }
    }

    /// `PCNTCLEARCNT`: the driver counts and `pr_cycle` (PFM_COUNTERS), the
    /// IPL histograms (PFM_IPL).
    fn clear_counts(&mut self) -> Result<IoctlReply, DeviceError> {
        let items = self.file.settings.items;
        if !items.intersects(Items::COUNTERS | Items::IPL) {
            return Err(DeviceError::invalid(
                "PCNTCLEARCNT needs PFM_COUNTERS or PFM_IPL selected",
            ));
        }
        let khz = self.khz();
        let file = &mut *self.file;
        if items.contains(Items::COUNTERS) {
            // Fold first so events before the clear are not counted after it.
            file.pending_events(khz, true, &self.device.readers)?;
            let now = now_cycles(khz);
            for &cpu in &file.opener.cpus {
                file.tallies[cpu as usize].clear(now);
            }
        }
        if items.contains(Items::IPL) {
            file.drain_samples();
            file.sampled.histograms.lock().clear_ipl();
        }
        Ok(IoctlReply::none())
    }

    /// `PCNTSETITEMS`: the items, and on EV67 the profile-me statistic in
    /// bits 8..15.
    fn set_items(&mut self, word: u64) -> Result<IoctlReply, DeviceError> {
        let items = Items::from_word(word);
        if items.is_empty() {
            return Err(DeviceError::invalid(format!(
                "PCNTSETITEMS({word:#x}) selects no item"
            )));
        }
        let statistic = Items::profile_me(word);
        if statistic != 0 && !pfm_model::Model::of(self.device.config.implementation).profile_me {
            return Err(DeviceError::invalid(format!(
                "profile-me statistic {statistic} needs a model with ProfileMe (--model ev67)"
            )));
        }
        if let Some(statistic) = profile_me::plan(statistic)? {
            tracing::debug!(statistic = statistic.name, "profile-me statistic selected");
        }
        self.reconfigure(|f| {
            f.settings.items = items;
            f.settings.statistic = statistic;
            let mut histograms = f.sampled.histograms.lock();
            histograms.ipl_on = items.contains(Items::IPL);
            histograms.profile_on = items.contains(Items::PROFILING);
        })
    }

    fn info(&self) -> PfmInfo {
        let device = self.device;
        let file = &*self.file;
        let implementation = device.config.implementation;
        let widths = device.model.widths;
        let mut info = PfmInfo {
            pi_version: abi::PFM_INFO_VERSION,
            pi_family: implementation.family() as u64,
            pi_impl: implementation as u64,
            pi_ncpus: device.config.configured_cpus as u64,
            pi_ncounters: widths.len() as u64,
            pi_open_mode: file.opener.mode.info_code(),
            pi_items: file.settings.items.bits()
                | file.settings.statistic << abi::PFM_PROFME_MODE_SHIFT,
            pi_cpu_khz: device.config.cpu_khz,
            ..PfmInfo::default()
        };
        let flag = |on: bool, bit: u64| if on { bit } else { 0 };
        info.pi_flags = flag(file.opener.shared, abi::PFM_INFO_SHARED)
            | flag(
                file.settings.scope == Scope::LogSelect,
                abi::PFM_INFO_LOGSELECT,
            )
            | flag(file.settings.enabled, abi::PFM_INFO_ENABLED)
            | flag(file.modes() == ModeFilter::USER, abi::PFM_INFO_USER_ONLY)
            // What the channel the request came through says of itself.
            | self.caller.channel_flags();
        for (i, width) in widths.iter().enumerate() {
            info.pi_width[i] = u64::from(*width);
            if let Some(selected) = &file.settings.counters[i] {
                info.pi_fidelity[i] = selected.resolved.fidelity.abi_code();
                info.pi_period[i] = selected.period;
                info.pi_sample_period[i] = file.sampled.sample_period[i];
            }
        }
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        info.pi_lost_samples = file.sampled.histograms.lost.load(relaxed);
        info.pi_throttled = file.sampled.histograms.throttled.load(relaxed);
        info.pi_online = device.online_cpus().len() as u64;
        info.pi_reopened = file.reopened;
        info
    }
}
