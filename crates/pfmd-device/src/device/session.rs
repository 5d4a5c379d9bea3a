//! One request on one open file, with the open locked: the shared steps of
//! every handler (reconfiguring host events, applying new registers, reading
//! the counts) live here; the handlers are in `requests`, `counters`,
//! `selection` and `profiling`.

use super::open_file::{CounterState, OpenFile, Registers, Scope, Selected};
use super::tally::{MAX_COUNTERS, Tally};
use super::{Device, DeviceError, IoctlReply, now_cycles};
use crate::backend::ThreadIdentity;
use crate::policy::Caller;
use pfm_model::{CounterSetting, Resolution, resolve};

pub(super) struct Session<'a> {
    pub device: &'a Device,
    pub file: &'a mut OpenFile,
    pub caller: &'a Caller,
}

/// One CPU's counts as of one read: CPU, counters, `pr_cycle`.
pub(super) type CpuCounts = (u32, [Tally; MAX_COUNTERS], u64);

impl Session<'_> {
    pub fn khz(&self) -> u64 {
        self.device.config.cpu_khz
    }

    /// `EACCES` where enabling would count system-wide for a caller not
    /// allowed to (docs/device.md §8): PCNTRENABLE and every family's
    /// ENABLE/RESTART/ENABWRITE.
    pub fn check_may_enable(&self) -> Result<(), DeviceError> {
        if self.file.settings.scope == Scope::LogAll {
            check_system_wide(self.device, self.caller)?;
        }
        Ok(())
    }

    /// `ENOSPC` when giving `tid` the PME bit would pass the open's budget
    /// of threads (those that have exited no longer count). Returns who
    /// `tid` is, for [`Settings::pme`](super::open_file::Settings).
    pub fn check_pme_room(&mut self, tid: i32) -> Result<ThreadIdentity, DeviceError> {
        let limit = self.device.budgets.limits().pme_threads_per_open;
        let backend = self.device.backend.as_ref();
        let identity = backend.thread_identity(tid).ok_or_else(|| {
            DeviceError::invalid(format!("thread {tid} has exited: no PME bit to set"))
        })?;
        let full = |pme: &std::collections::BTreeMap<i32, ThreadIdentity>| {
            !pme.contains_key(&tid) && pme.len() >= limit
        };
        if full(&self.file.settings.pme) {
            self.file.forget_exited_pme(backend);
        }
        if full(&self.file.settings.pme) {
            return Err(DeviceError::NoSpace(format!(
                "the open already gave the PME bit to {limit} threads (--max-pme-threads)"
            )));
        }
        Ok(identity)
    }

    /// `PCNTLOGSELECT` by `tid`, the calling thread, on an open that counts
    /// PME threads already: events on `tid` alone join the live ones
    /// ([`OpenFile::add_pme_thread`]). The live events count nothing new and
    /// the caller's own thread is always its to watch, so nothing is judged
    /// (a select costs the same with 1 or 256 PME threads); but a caller
    /// allowed less kernel-mode counting than the open has narrows its
    /// modes, which takes a rebuild. False where the caller is to rebuild.
    pub fn add_pme_thread(&mut self, tid: i32, identity: ThreadIdentity, kernel: bool) -> bool {
        if !kernel && self.file.settings.kernel_allowed {
            return false;
        }
        let device = self.device;
        let online = device.online_cpus();
        (self.file).add_pme_thread(
            device.backend.as_ref(),
            &device.budgets,
            &online,
            tid,
            identity,
        )
    }

    /// Resolves a counter's event against the host; `EOPNOTSUPP` naming the
    /// event when the host cannot count it. Only counters that count are
    /// resolved: a disabled counter's event was validated by the model only.
    fn resolve_setting(&self, setting: &CounterSetting) -> Result<Selected, DeviceError> {
        let device = self.device;
        match resolve(
            setting.event,
            device.backend.as_ref(),
            &device.config.event_map,
        ) {
            Resolution::Resolved(resolved) => Ok(Selected {
                resolved,
                period: setting.period,
            }),
            Resolution::Unavailable { event, reason } => {
                tracing::debug!(
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

    /// Applies a settings change: stop counting, change, start again if
    /// enabled. A change the budgets or the host refuse leaves the open as
    /// it was: its settings, its raw counters (a preload, a narrowing
    /// undone; what was counted meanwhile kept), counting again as before.
    pub fn reconfigure(
        &mut self,
        change: impl FnOnce(&mut OpenFile),
    ) -> Result<IoctlReply, DeviceError> {
        let khz = self.khz();
        let file = &mut *self.file;
        let built = file.counting();
        let plan = file.host_plan();
        let was_enabled = file.settings.enabled;
        let periods = file.periods();
        if built {
            // Every event counted so far is in the tallies when `change` runs.
            file.fold(khz, &self.device.readers)?;
        }
        let before = file.settings.clone();
        let tallies = file.tallies.clone();
        let collecting = file.sampled.histograms.lock().collecting();
        change(file);
        file.narrow_residuals(periods);
        let new_plan = file.host_plan();
        let same_plan = built && new_plan == plan;
        // New host events that count more, or counting switched on: what
        // the caller could not start with perf_event_open(2) itself is
        // refused here, whoever enabled the open (a descriptor passed on
        // keeps what it counts, or less, never more).
        let starts = file.settings.enabled && !(built && was_enabled && new_plan.within(&plan));
        if starts && let Err(refused) = check_may_start(self.device, self.caller, file) {
            file.settings = before;
            file.tallies = tallies;
            file.sampled.histograms.lock().restore(collecting);
            return Err(refused);
        }
        if same_plan {
            // The same host events: keep them, and the threads and processes
            // they already follow (the PME bit), and only switch them, when
            // that changes: a repeated PCNTSETMUX or PCNTRDISABLE costs no
            // system call per CPU.
            let running = file.settings.enabled;
            if running == was_enabled {
                return Ok(IoctlReply::none());
            }
            let Err(refused) = file.set_running(running) else {
                return Ok(IoctlReply::none());
            };
            // Nothing was folded since `tallies`: they are the open's again.
            file.settings = before;
            file.tallies = tallies;
            file.sampled.histograms.lock().restore(collecting);
            if let Err(again) = file.set_running(was_enabled) {
                tracing::warn!("the open's host events could not be switched back: {again}");
            }
            return Err(refused);
        }
        let changed = file.tallies.clone();
        let new_periods = file.periods();
        let online = self.device.online_cpus();
        let backend = self.device.backend.as_ref();
        let budgets = &self.device.budgets;
        let stopped = if built {
            file.put_away_counting(khz, &self.device.readers, plan)
        } else {
            Ok(())
        };
        let Err(refused) =
            stopped.and_then(|()| file.start_counting(backend, budgets, khz, &online))
        else {
            return Ok(IoctlReply::none());
        };
        file.settings = before;
        file.roll_back_tallies(tallies, &changed, periods, new_periods, now_cycles(khz));
        file.sampled.histograms.lock().restore(collecting);
        if built && let Err(again) = file.start_counting(backend, budgets, khz, &online) {
            tracing::warn!("the open's previous host events could not be had again: {again}");
            // The previous settings stay; counting resumes at the next
            // PCNTRENABLE.
            file.settings.enabled = false;
        }
        Err(refused)
    }

    /// Applies new registers to the open: resolves every counter they make
    /// count (`EOPNOTSUPP` leaves everything as it was), remembers them for
    /// the user's next open, then reconfigures; `change` runs with the
    /// tallies folded, before counting restarts.
    pub fn apply_registers(
        &mut self,
        registers: Registers,
        change: impl FnOnce(&mut OpenFile),
    ) -> Result<IoctlReply, DeviceError> {
        let mut counters: [Option<Selected>; MAX_COUNTERS] = Default::default();
        for (slot, setting) in counters.iter_mut().zip(registers.effective()) {
            if let Some(setting) = setting {
                *slot = Some(self.resolve_setting(&setting)?);
            }
        }
        let carried = CounterState {
            registers: registers.clone(),
            counters: counters.clone(),
        };
        let reply = self.reconfigure(|f| {
            f.settings.registers = registers;
            f.settings.counters = counters;
            change(f);
        })?;
        // Only a selection the open took is the user's next open's.
        self.device.store.carry(self.file.opener.uid, carried);
        Ok(reply)
    }

    /// The counts of each of the open's CPUs as of now, with `pr_cycle`.
    pub fn snapshot(&mut self) -> Result<Vec<CpuCounts>, DeviceError> {
        let khz = self.khz();
        let file = &mut *self.file;
        // Exclusions are read apart from the groups they come off: what
        // both count moves between the two reads, so a projection could
        // fall below the last one. Folded (never below 0 per read), the
        // counts only grow; such opens have no samplers to drain.
        let pending = if file.has_exclusions() {
            file.fold(khz, &self.device.readers)?;
            Default::default()
        } else {
            file.pending_events(khz, false, &self.device.readers)?
        };
        let now = now_cycles(khz);
        let mut out = Vec::with_capacity(file.opener.cpus.len());
        for &cpu in &file.opener.cpus {
            let seen = file.projected(&file.tallies[cpu as usize], pending.get(&cpu));
            let tally = &mut file.tallies[cpu as usize];
            tally.stamp(&seen, now);
            out.push((cpu, seen, tally.pr_cycle));
        }
        Ok(out)
    }
}

/// `EACCES` for a caller not allowed system-wide counting (LOGALL).
fn check_system_wide(device: &Device, caller: &Caller) -> Result<(), DeviceError> {
    if device
        .config
        .policy
        .may_count_system_wide(caller.credentials()?)
    {
        return Ok(());
    }
    Err(DeviceError::AccessDenied(
        "system-wide counting (LOGALL) is not allowed for this caller; select PCNTLOGSELECT first"
            .into(),
    ))
}

/// `EACCES` where starting the open's host events would count what the
/// caller may not count with perf_event_open(2) itself (docs/device.md §8):
/// every task, or a thread it may not watch. A PME thread whose identity
/// (owner, ids, capabilities) changed since its PCNTLOGSELECT and that the
/// caller may no longer watch is forgotten instead, as the kernel removes
/// its own events from a thread at a setuid exec; one it may watch is
/// taken as it is now.
pub(super) fn check_may_start(
    device: &Device,
    caller: &Caller,
    file: &mut OpenFile,
) -> Result<(), DeviceError> {
    if file.settings.scope == Scope::LogAll {
        return check_system_wide(device, caller);
    }
    let (policy, backend) = (&device.config.policy, device.backend.as_ref());
    let creds = caller.credentials()?;
    let mut refused = None;
    file.settings.pme.retain(|&tid, known| {
        let Some(now) = backend
            .thread_identity(tid)
            .filter(|now| now.birth == known.birth)
        else {
            return false;
        };
        if policy.may_watch_thread(creds, tid, &now) {
            *known = now;
        } else if now != *known {
            tracing::debug!(tid, "PME thread changed credentials; it no longer counts");
            return false;
        } else {
            refused.get_or_insert(tid);
        }
        true
    });
    match refused {
        None => Ok(()),
        Some(tid) => Err(DeviceError::AccessDenied(format!(
            "the open follows thread {tid}, which this caller may not watch (perf_event_open(2) would refuse it)"
        ))),
    }
}
