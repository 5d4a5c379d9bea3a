//! The EV5 ioctls on the device (contract §5.2): `PCNT5CTXTS`, `PCNT5MUX`,
//! `PCNT5FREQ`, the per-counter `DISABLE/ENABLE/CLEAR/RESTART`, raw counter
//! access (`SETCNTRS/GETCNTRS`) and the driver counts (`GETCNT`,
//! `READCNTRS`).
//!
//! The counter model: per CPU and counter the device keeps whole interrupts
//! and the raw counter, the events since the last interrupt (`Tally`). With
//! the full-width periods (65536, 65536, 16384) the raw counter is exactly
//! the chip's 16/16/14-bit register, a preload `V` makes the next interrupt
//! come after `2^width - V` events, and `READCNTRS`, which is
//! `(interrupts << width) + raw`, is the event count. With a 256 period
//! the chip interrupts when the low 8 bits wrap: the raw counter is then the value modulo 256, a preload
//! keeps `V mod 256`, and `READCNTRS` is still the contract's formula
//! (monotonic, but no longer the event count: that is `interrupts × 256 +
//! raw`).

use super::caller::Caller;
use super::core::{Device, IoctlReply, RawStart};
use super::open_file::{CounterState, OpenFile, Scope};
use super::tally::{CpuTally, MAX_COUNTERS};
use crate::backend::ModeFilter;
use crate::ev5::{self, ProcessFilter};
use crate::ioctl::abi::{PfCntrsEv5, PmctrsEv5};
use crate::ioctl::{DeviceError, Ev5Request};
use crate::model::HostEvent;
use zerocopy::IntoBytes;

impl Device {
    pub(super) fn ev5_request(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        saved: &mut CounterState,
        caller: &Caller,
        request: Ev5Request,
    ) -> Result<IoctlReply, DeviceError> {
        let none = |_: &mut OpenFile, _: &mut [CpuTally]| {};
        match request {
            Ev5Request::Ctxts(word) => self.ev5_contexts(file, tallies, caller, word),
            Ev5Request::Mux(word) => {
                let mux = ev5::decode_mux(word, self.config().implementation)?;
                let mut registers = file.registers.clone();
                let settings = mux.settings([0, 1, 2].map(|i| registers.periods[i]));
                for (slot, setting) in registers.settings.iter_mut().zip(settings) {
                    *slot = Some(setting);
                }
                self.apply_registers(file, tallies, saved, registers, none)
            }
            Ev5Request::Freq(word) => {
                let freq = ev5::decode_freq(word)?;
                if freq.wants_256() {
                    let creds = caller.credentials()?;
                    let trusted = creds.perf_privileged()
                        || self
                            .config()
                            .policy
                            .allow_gid
                            .is_some_and(|g| creds.in_group(g));
                    if !trusted {
                        return Err(DeviceError::NotPermitted(
                            "a 256-event period needs privilege (root, CAP_PERFMON or --allow-group): it can load the system heavily".into(),
                        ));
                    }
                }
                let mut registers = file.registers.clone();
                for (i, period) in freq.periods.iter().enumerate() {
                    if let Some(period) = *period {
                        registers.periods[i] = period;
                        if let Some(s) = &mut registers.settings[i] {
                            s.period = period;
                        }
                    }
                }
                let changed = freq.periods;
                self.apply_registers(file, tallies, saved, registers, move |f, t| {
                    // A raw counter above a shorter new period interrupts at once.
                    for &cpu in &f.cpus {
                        if let Some(tally) = t.get_mut(cpu as usize) {
                            for (i, period) in changed.iter().enumerate() {
                                if let Some(period) = *period {
                                    tally.counters[i] = tally.counters[i].with(0, period);
                                }
                            }
                        }
                    }
                })
            }
            Ev5Request::Disable(word) => {
                self.disable_counters(file, tallies, saved, &ev5::selected(word))
            }
            Ev5Request::Enable(word) => self.enable_counters(
                file,
                tallies,
                saved,
                caller,
                &ev5::selected(word),
                RawStart::Keep,
            ),
            Ev5Request::Restart(word) => self.enable_counters(
                file,
                tallies,
                saved,
                caller,
                &ev5::selected(word),
                RawStart::Zero,
            ),
            Ev5Request::Clear(word) => {
                self.write_counters(file, tallies, saved, &ev5::selected(word), None, &[0; 3])
            }
            Ev5Request::SetCntrs(u) => {
                let cpus = Self::pmctrs_cpus(file, u.cpu())?;
                let values = [u.cntr0(), u.cntr1(), u.cntr2()];
                self.write_counters(
                    file,
                    tallies,
                    saved,
                    &ev5::selected(u.select()),
                    Some(cpus),
                    &values,
                )
            }
            Ev5Request::GetCntrs(u) => {
                let cpu = Self::pmctrs_one_cpu(file, u.cpu())?;
                let raw = self.raw_counters(file, tallies, cpu)?;
                let out = PmctrsEv5::new(u.select(), u.cpu(), raw[0], raw[1], raw[2]);
                Ok(IoctlReply::out(out.as_bytes()))
            }
            Ev5Request::GetCnt { addr } => self.counts_reply(
                file,
                tallies,
                addr,
                &ev5::WIDTHS,
                false,
                "PCNT5GETCNT",
                element,
            ),
            Ev5Request::ReadCntrs { addr } => self.counts_reply(
                file,
                tallies,
                addr,
                &ev5::WIDTHS,
                true,
                "PCNT5READCNTRS",
                element,
            ),
        }
    }

    /// `PCNT5CTXTS`: whose threads and which modes count (contract §5.2).
    /// The process filter is the same state `PCNTLOGALL` / `PCNTLOGSELECT`
    /// set, with the same permission checks (contract §8).
    fn ev5_contexts(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        caller: &Caller,
        word: u64,
    ) -> Result<IoctlReply, DeviceError> {
        let contexts = ev5::decode_contexts(word)?;
        let policy = &self.config().policy;
        let creds = caller.credentials()?;
        let tid = caller.tid();
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
            ProcessFilter::SetPmeThis => (file.scope, true),
            ProcessFilter::ThisProcess => (Scope::LogSelect, true),
        };
        let selective = scope == Scope::LogSelect || set_pme;
        if selective && !policy.may_count_own_user(creds) {
            return Err(DeviceError::AccessDenied(format!(
                "counting your own threads needs perf_event_paranoid <= 2 (it is {})",
                policy.paranoid()
            )));
        }
        let kernel_allowed =
            file.kernel_allowed && (!selective || policy.may_count_own_kernel(creds));
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
            tracing::info!(
                tid,
                "PCNT5CTXTS without kernel-mode privilege: counting user mode only"
            );
        }
        let time_based = file.counters.iter().flatten().any(|s| {
            s.resolved
                .terms
                .iter()
                .any(|t| matches!(t.event, HostEvent::CpuClock | HostEvent::TaskClock))
        });
        if time_based && !(counted.user && counted.kernel) {
            tracing::warn!(
                tid,
                "a counter is approximated from cpu-clock/task-clock, which count time in every mode: the contexts do not split it"
            );
        }
        self.reconfigure(file, tallies, |f| {
            f.scope = scope;
            if set_pme {
                f.pme.insert(tid);
            }
            f.kernel_allowed = kernel_allowed;
            f.contexts = Some(modes);
        })
    }
}

#[cfg(test)]
#[path = "ev5_tests.rs"]
mod tests;

/// One CPU's `struct pfcntrs_ev5`.
fn element(v: &[u64; MAX_COUNTERS], pr_cycle: u64) -> PfCntrsEv5 {
    PfCntrsEv5 {
        pr_cycle,
        pf_cntr0: v[0],
        pf_cntr1: v[1],
        pf_cntr2: v[2],
    }
}
