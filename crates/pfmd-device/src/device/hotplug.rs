//! CPUs coming and going under the device (docs/device.md §2, "CPUs online
//! and offline"). The host tells [`Device::cpus_changed`] the online set
//! whenever it changes; opens follow it:
//!
//! - an EACH or ALL open claims every CPU: one that comes online joins it,
//!   its counts starting from 0 at the join;
//! - a CPU that goes offline keeps its counts in every open that holds it;
//!   nothing is counted there until it comes back, when its host events are
//!   opened again;
//! - a ONE open whose CPU is offline answers `ENXIO` to the requests that
//!   would count or read ([`needs_its_cpu`]) until the CPU is back.

use super::open_file::OpenFile;
use super::{Device, DeviceError, FileId, lock, now_cycles};
use pfm_abi::{CounterOp, OpenMode, Request};

impl Device {
    /// The online CPUs are now `online`: joins the CPUs that came online to
    /// the opens that claim every CPU, and opens the host events of every
    /// open again on the CPUs that came back.
    pub fn cpus_changed(&self, mut online: Vec<u32>) {
        online.sort_unstable();
        online.dedup();
        let before = {
            let mut current = self.online.write().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(&mut *current, online.clone())
        };
        let came: Vec<u32> = online
            .iter()
            .copied()
            .filter(|c| !before.contains(c))
            .collect();
        let went: Vec<u32> = before
            .iter()
            .copied()
            .filter(|c| !online.contains(c))
            .collect();
        if came.is_empty() && went.is_empty() {
            return;
        }
        tracing::info!(online = ?online, ?came, ?went, "online CPUs changed");
        if came.is_empty() {
            return;
        }
        let files: Vec<(FileId, super::FileSlot)> = self
            .files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(id, slot)| (*id, slot.clone()))
            .collect();
        for (id, slot) in files {
            let mut file = lock(&slot.file);
            self.join_cpus(id, &mut file, &came);
            if file.opener.cpus.iter().any(|c| came.contains(c))
                && let Err(e) = self.restart_host_events(&mut file, &online)
            {
                tracing::error!(
                    file = id,
                    "opening host events on the CPUs that came online: {e}; the open stops counting until it is enabled again"
                );
            }
        }
    }

    /// Adds the CPUs in `came` to `file` when it claims every CPU.
    fn join_cpus(&self, id: FileId, file: &mut OpenFile, came: &[u32]) {
        if file.opener.mode == OpenMode::One {
            return;
        }
        for &cpu in came {
            if file.opener.cpus.contains(&cpu) {
                continue;
            }
            let now = now_cycles(self.config.cpu_khz);
            match self.store.join(id, file.opener.uid, cpu, now) {
                Some(tally) if (cpu as usize) < file.tallies.len() => {
                    file.tallies[cpu as usize] = tally;
                    file.opener.cpus.push(cpu);
                    file.opener.cpus.sort_unstable();
                    tracing::debug!(file = id, cpu, "CPU joined the open");
                }
                _ => tracing::error!(
                    file = id,
                    cpu,
                    slots = file.tallies.len(),
                    "a CPU came online that the open cannot count (beyond the CPUs configured at start, or held by another open); restart pfmd to count it"
                ),
            }
        }
    }

    /// Folds what `file` counted, closes its host events and opens them
    /// again on the CPUs online now.
    fn restart_host_events(&self, file: &mut OpenFile, online: &[u32]) -> Result<(), DeviceError> {
        let khz = self.config.cpu_khz;
        // Events kept for earlier settings lack the new CPUs.
        file.drop_kept();
        if file.counting() {
            file.stop_counting(khz, &self.readers)?;
        }
        let started = file.start_counting(self.backend.as_ref(), &self.budgets, khz, online);
        if started.is_err() {
            file.settings.enabled = false;
        }
        started
    }

    /// `ENXIO` when `request` on a ONE open needs its CPU and the CPU is
    /// offline.
    pub(super) fn check_cpu_online(
        &self,
        file: &OpenFile,
        request: &Request,
    ) -> Result<(), DeviceError> {
        if file.opener.mode != OpenMode::One || !needs_its_cpu(request) {
            return Ok(());
        }
        let online = self.online.read().unwrap_or_else(|e| e.into_inner());
        match file.opener.cpus.iter().find(|c| !online.contains(c)) {
            Some(cpu) => Err(DeviceError::CpuOffline(format!(
                "CPU {cpu}, which this PCNTOPENONE open counts, is offline; its counts are kept until it comes back"
            ))),
            None => Ok(()),
        }
    }
}

/// Requests that count or read counts: what a ONE open cannot answer
/// truthfully while its CPU is offline.
fn needs_its_cpu(request: &Request) -> bool {
    match request {
        Request::Enable | Request::GetIplHis { .. } => true,
        Request::Counters(_, op) => matches!(
            op,
            CounterOp::Enable(_)
                | CounterOp::Restart(_)
                | CounterOp::EnableWrite(_)
                | CounterOp::GetCounters(_)
                | CounterOp::GetCounts { .. }
                | CounterOp::ReadCounts { .. }
        ),
        _ => false,
    }
}
