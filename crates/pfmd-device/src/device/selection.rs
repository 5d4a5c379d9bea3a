//! The ioctls that select events, periods and contexts: EV4 `PCNTSETMUX`,
//! EV5 `PCNT5MUX`/`PCNT5FREQ`/`PCNT5CTXTS`, EV6 `PCNT6MUX`. The model crate
//! decodes and validates each word; here it becomes the open's registers.

use super::open_file::{OpenFile, Scope};
use super::session::Session;
use super::{DeviceError, IoctlReply};
use crate::backend::ModeFilter;
use pfm_abi::Iccsr;
use pfm_model::ev5::ProcessFilter;
use pfm_model::{CounterSetting, HostEvent, ev4, ev5, ev6};

impl Session<'_> {
    /// `PCNTSETMUX`: events, periods and the `iccsr_disable` bits, which
    /// clear the counters' enables.
    pub fn ev4_mux(&mut self, iccsr: Iccsr) -> Result<IoctlReply, DeviceError> {
        let selection = ev4::decode(iccsr)?;
        let mut registers = self.file.settings.registers.clone();
        for (i, setting) in selection.counters.iter().enumerate() {
            registers.settings[i] = Some(CounterSetting {
                enabled: true,
                ..*setting
            });
            registers.on[i] = setting.enabled;
            registers.periods[i] = setting.period;
        }
        self.apply_registers(registers, |_| {})
    }

    /// `PCNT5MUX`: the three counters' events at their current periods.
    pub fn ev5_mux(&mut self, word: u64) -> Result<IoctlReply, DeviceError> {
        let mux = ev5::decode_mux(word, self.device.config.implementation)?;
        let mut registers = self.file.settings.registers.clone();
        let settings = mux.settings([0, 1, 2].map(|i| registers.periods[i]));
        for (slot, setting) in registers.settings.iter_mut().zip(settings) {
            *slot = Some(setting);
        }
        self.apply_registers(registers, |_| {})
    }

    /// `PCNT5FREQ`: the counters' periods; the 256 periods need privilege.
    pub fn ev5_freq(&mut self, word: u64) -> Result<IoctlReply, DeviceError> {
        let freq = ev5::decode_freq(word);
        if freq.wants_256()
            && !self
                .device
                .config
                .policy
                .may_use_short_periods(self.caller.credentials()?)
        {
            return Err(DeviceError::NotPermitted(
                "a 256-event period needs privilege (root, CAP_PERFMON or --allow-group): it can load the system heavily".into(),
            ));
        }
        let mut registers = self.file.settings.registers.clone();
        for (i, period) in freq.periods.into_iter().enumerate() {
            registers.periods[i] = period;
            if let Some(s) = &mut registers.settings[i] {
                s.period = period;
            }
        }
        // A shorter period keeps the raw counters modulo it and raises no
        // interrupt from old events (`OpenFile::narrow_residuals`).
        self.apply_registers(registers, |_| {})
    }

    /// `PCNT5CTXTS`: whose threads and which modes count (docs/device.md
    /// §5.2). The process filter is the same state `PCNTLOGALL` /
    /// `PCNTLOGSELECT` set, with the same permission checks (§8).
    pub fn ev5_contexts(&mut self, word: u64) -> Result<IoctlReply, DeviceError> {
        let contexts = ev5::decode_contexts(word);
        let policy = &self.device.config.policy;
        let creds = self.caller.credentials()?;
        let tid = self.caller.tid();
        let (scope, set_pme) = match contexts.process {
            ProcessFilter::AllProcesses => {
                if !policy.may_count_system_wide(creds) {
                    return Err(DeviceError::AccessDenied(format!(
                        "PF5_CTXT_ALL_PROC counts system-wide: needs perf_event_paranoid <= 0 (it is {}), CAP_PERFMON or --allow-group",
                        policy.paranoid()
                    )));
                }
                (Scope::LogAll, false)
            }
            ProcessFilter::PmeSelected => (Scope::LogSelect, false),
            ProcessFilter::SetPmeThis => (self.file.settings.scope, true),
            ProcessFilter::ThisProcess => (Scope::LogSelect, true),
        };
        let identity = set_pme.then(|| self.check_pme_room(tid)).transpose()?;
        let selective = scope == Scope::LogSelect || set_pme;
        if selective && !policy.may_count_own_user(creds) {
            return Err(DeviceError::AccessDenied(format!(
                "counting your own threads needs perf_event_paranoid <= 2 (it is {})",
                policy.paranoid()
            )));
        }
        let kernel_allowed =
            self.file.settings.kernel_allowed && (!selective || policy.may_count_own_kernel(creds));
        let modes = ModeFilter {
            user: contexts.modes.user,
            kernel: contexts.modes.kernel,
            hypervisor: contexts.modes.pal,
        };
        let counted = OpenFile::modes_for(scope, kernel_allowed, Some(modes));
        if !(counted.user || counted.kernel || counted.hypervisor) {
            return Err(DeviceError::AccessDenied(
                "these contexts count only kernel or PAL mode of your own threads, which needs perf_event_paranoid <= 1".into(),
            ));
        }
        if counted != modes {
            tracing::debug!(
                tid,
                "PCNT5CTXTS without kernel-mode privilege: counting user mode only"
            );
        }
        let time_based = self.file.settings.counters.iter().flatten().any(|s| {
            s.resolved
                .terms
                .iter()
                .any(|t| matches!(t.event, HostEvent::CpuClock | HostEvent::TaskClock))
        });
        if time_based && !(counted.user && counted.kernel) {
            crate::logging::once(
                "ctxts-time-based",
                "a counter is approximated from cpu-clock/task-clock, which count time in every mode: PCNT5CTXTS cannot split it by mode on this host",
            );
        }
        self.reconfigure(|f| {
            f.settings.scope = scope;
            if let Some(identity) = identity {
                f.settings.pme.insert(tid, identity);
            }
            f.settings.kernel_allowed = kernel_allowed;
            f.settings.contexts = Some(modes);
        })
    }

    /// `PCNT6MUX`: one EV6 event (the other counter keeps its selection
    /// off), or an EV67 pair or profile-me mode.
    pub fn ev6_mux(&mut self, word: u64) -> Result<IoctlReply, DeviceError> {
        let selection = ev6::decode_mux(word, self.device.config.implementation)?;
        let mut registers = self.file.settings.registers.clone();
        for (slot, setting) in registers.settings.iter_mut().zip(selection.counters) {
            *slot = Some(setting);
        }
        registers.settings[2] = None;
        registers.profile_me = selection.profile_me;
        if selection.profile_me {
            tracing::debug!("EV67 profile-me mode: counter 0 counts cycles, counter 1 stays off");
        }
        self.apply_registers(registers, |_| {})
    }
}
