//! What the device keeps between opens: which open holds each CPU, the
//! driver counts of the CPUs no open holds, and the last selection (the
//! chip's mux keeps its value across opens). All of it is per user: an open
//! by another uid starts with clear counts and no selection, so no user
//! reads what another's session counted (docs/device.md §2, §8).
//!
//! Locked only for bookkeeping, never around perf work or copies.

use super::lock;
use super::open_file::{CounterState, Registers};
use super::tally::{CpuTally, MAX_COUNTERS};
use super::{DeviceError, FileId};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

struct Cpu {
    holder: Option<FileId>,
    /// The counts while no open holds the CPU.
    tally: CpuTally,
    /// Whose counts they are.
    owner: Option<u32>,
}

struct Carried {
    owner: u32,
    state: CounterState,
}

struct Inner {
    cpus: Vec<Cpu>,
    carried: Option<Carried>,
}

pub(super) struct Store {
    inner: Mutex<Inner>,
    /// Signalled on every release.
    released: Condvar,
    first_periods: [u64; MAX_COUNTERS],
}

/// What an open takes with it.
pub(super) struct Checkout {
    /// Indexed by CPU number; the open's CPUs hold its user's counts.
    pub tallies: Vec<CpuTally>,
    pub state: CounterState,
}

impl Store {
    pub fn new(slots: usize, first_periods: [u64; MAX_COUNTERS]) -> Store {
        Store {
            inner: Mutex::new(Inner {
                cpus: (0..slots)
                    .map(|_| Cpu {
                        holder: None,
                        tally: CpuTally::default(),
                        owner: None,
                    })
                    .collect(),
                carried: None,
            }),
            released: Condvar::new(),
            first_periods,
        }
    }

    pub fn slots(&self) -> usize {
        lock(&self.inner).cpus.len()
    }

    /// Marks `cpus` held by `id` and hands over their counts and the last
    /// selection, or `EBUSY` naming a CPU another open holds. Counts (on
    /// every CPU no open holds, not only `cpus`) and selection another user
    /// left are not handed over: they are cleared (`now_cycles` stamps the
    /// cleared `pr_cycle`), and gone for good.
    pub fn check_out(
        &self,
        id: FileId,
        uid: u32,
        cpus: &[u32],
        now_cycles: u64,
    ) -> Result<Checkout, DeviceError> {
        let mut inner = lock(&self.inner);
        if let Some(cpu) = cpus.iter().find(|&&c| {
            inner
                .cpus
                .get(c as usize)
                .is_none_or(|s| s.holder.is_some())
        }) {
            return Err(DeviceError::Busy(format!(
                "cpu {cpu} is held by another open"
            )));
        }
        // Another user's open ends what the previous user left: its counts
        // on every CPU no open holds, and its carried selection. Whoever
        // opens after it, the previous user included, starts clean (counts
        // of a selection that is gone would mean nothing). Counts of a CPU
        // another open holds are that open's until it closes.
        if inner.carried.as_ref().is_some_and(|c| c.owner != uid) {
            inner.carried = None;
        }
        for slot in inner.cpus.iter_mut() {
            if slot.holder.is_none() && slot.owner.is_some_and(|owner| owner != uid) {
                slot.tally.clear(now_cycles);
                slot.owner = None;
            }
        }
        let mut tallies = vec![CpuTally::default(); inner.cpus.len()];
        for &cpu in cpus {
            let slot = &mut inner.cpus[cpu as usize];
            slot.holder = Some(id);
            if slot.owner != Some(uid) {
                slot.tally.clear(now_cycles);
                slot.owner = Some(uid);
            }
            tallies[cpu as usize] = slot.tally;
        }
        let state = match &inner.carried {
            Some(carried) => carried.state.reopened(),
            None => CounterState {
                registers: Registers::new(self.first_periods),
                counters: Default::default(),
            },
        };
        Ok(Checkout { tallies, state })
    }

    /// Marks `cpu` (one that came online) held by `id` as well, its counts
    /// cleared: the open's counts of it start when it joins, whatever an
    /// earlier open left there (the open may have cleared its own since).
    /// `None` when another open holds it or it has no slot.
    pub fn join(&self, id: FileId, uid: u32, cpu: u32, now_cycles: u64) -> Option<CpuTally> {
        let mut inner = lock(&self.inner);
        let slot = inner.cpus.get_mut(cpu as usize)?;
        if slot.holder.is_some() {
            return None;
        }
        slot.holder = Some(id);
        slot.tally.clear(now_cycles);
        slot.owner = Some(uid);
        Some(slot.tally)
    }

    /// Takes back the counts of `cpus` from the open `id` and frees them.
    pub fn check_in(&self, id: FileId, uid: u32, cpus: &[u32], tallies: &[CpuTally]) {
        let mut inner = lock(&self.inner);
        for &cpu in cpus {
            if let Some(slot) = inner.cpus.get_mut(cpu as usize)
                && slot.holder == Some(id)
            {
                slot.holder = None;
                slot.tally = tallies[cpu as usize];
                slot.owner = Some(uid);
            }
        }
        drop(inner);
        self.released.notify_all();
    }

    /// Remembers `uid`'s selection for its next open.
    pub fn carry(&self, uid: u32, state: CounterState) {
        lock(&self.inner).carried = Some(Carried { owner: uid, state });
    }

    /// The opens holding any of `cpus`.
    pub fn holders_of(&self, cpus: &[u32]) -> Vec<FileId> {
        let inner = lock(&self.inner);
        let mut ids: Vec<FileId> = cpus
            .iter()
            .filter_map(|&c| inner.cpus.get(c as usize)?.holder)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    pub fn wait_for_release(&self, timeout: Duration) {
        let inner = lock(&self.inner);
        let _ = self.released.wait_timeout(inner, timeout);
    }
}
