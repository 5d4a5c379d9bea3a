//! The sampled data of one open: IPL histograms and PC-profile buckets
//! (contract §6). Samples arrive from the backend's sampler thread through a
//! [`TickSink`] per sampling event; each carries the weight
//! `effective period / period` so totals stay in interrupt units.

use crate::backend::{Sample, SampleSink};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub const IPL_ENTRIES: usize = 9;
const IPL_USER: usize = 8;
const IPL_IDLE: usize = 7;
const IPL_ZERO: usize = 0;

/// User or kernel PC profiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileMode {
    User,
    Kernel,
}

/// One profiled range and its buckets, per CPU slot.
#[derive(Debug, Clone)]
pub struct Profile {
    pub mode: ProfileMode,
    pub start: u64,
    pub end: u64,
    /// Bytes per bucket; 0 means one bucket for the whole range.
    pub bucket_bytes: u64,
    pub buckets: Vec<Vec<u32>>,
    /// Kernel ranges whose samples are charged to their caller (PCNTCALLER).
    pub caller_mode: bool,
    pub caller_ranges: Vec<(u64, u64)>,
}

impl Profile {
    /// Buckets for [start, end) at `stride` instructions of 4 bytes per bucket.
    pub fn bucket_count(start: u64, end: u64, stride: u64) -> u64 {
        if stride == 0 {
            1
        } else {
            (end - start).div_ceil(stride.saturating_mul(4))
        }
    }

    fn bucket_of(&self, ip: u64) -> Option<usize> {
        if ip < self.start || ip >= self.end {
            return None;
        }
        // bucket_bytes 0 is one bucket for the whole range.
        Some(
            (ip - self.start)
                .checked_div(self.bucket_bytes)
                .unwrap_or(0) as usize,
        )
    }
}

/// What the sinks fill: per CPU slot (one slot unless the open is EACH).
#[derive(Debug)]
pub struct Histograms {
    /// Map from CPU number to slot: `None` aggregates into slot 0.
    per_cpu: bool,
    pub ipl_on: bool,
    pub ipl: Vec<[u64; IPL_ENTRIES]>,
    pub profile: Option<Profile>,
}

impl Histograms {
    pub fn new(per_cpu: bool, slots: usize) -> Self {
        Histograms {
            per_cpu,
            ipl_on: false,
            ipl: vec![[0; IPL_ENTRIES]; if per_cpu { slots } else { 1 }],
            profile: None,
        }
    }

    pub fn slots(&self) -> usize {
        self.ipl.len()
    }

    fn slot(&self, cpu: u32) -> usize {
        if self.per_cpu {
            (cpu as usize).min(self.ipl.len() - 1)
        } else {
            0
        }
    }

    /// Adds one tick of `weight` interrupts (contract §6 mappings).
    pub fn record(&mut self, sample: &Sample, weight: u64) {
        let slot = self.slot(sample.cpu);
        if self.ipl_on {
            let ipl = &mut self.ipl[slot];
            if sample.user {
                ipl[IPL_USER] += weight;
            } else {
                // Idle is a subset of IPL0, as the original driver counted it.
                ipl[IPL_ZERO] += weight;
                if sample.pid == 0 {
                    ipl[IPL_IDLE] += weight;
                }
            }
        }
        if let Some(profile) = &mut self.profile {
            let kernel_sample = !sample.user;
            if kernel_sample != (profile.mode == ProfileMode::Kernel) {
                return;
            }
            let mut ip = sample.ip;
            if profile.caller_mode
                && profile
                    .caller_ranges
                    .iter()
                    .any(|&(s, e)| (s..e).contains(&ip))
                && let Some(caller) = sample.caller
            {
                ip = caller;
            }
            if let Some(bucket) = profile.bucket_of(ip) {
                let cell = &mut profile.buckets[slot][bucket];
                *cell = cell.saturating_add(u32::try_from(weight).unwrap_or(u32::MAX));
            }
        }
    }

    pub fn clear_ipl(&mut self) {
        self.ipl.iter_mut().for_each(|h| *h = [0; IPL_ENTRIES]);
    }

    /// The profile buckets as `read(2)` returns them: CPU slots one after
    /// another, native-endian `unsigned int`s.
    pub fn profile_bytes(&self) -> Vec<u8> {
        self.profile
            .as_ref()
            .map(|p| {
                p.buckets
                    .iter()
                    .flatten()
                    .flat_map(|b| b.to_ne_bytes())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Histograms shared with the sampler thread, and loss accounting.
#[derive(Debug)]
pub struct SharedHistograms {
    pub data: Mutex<Histograms>,
    pub lost: AtomicU64,
    pub throttled: AtomicU64,
}

impl SharedHistograms {
    pub fn new(histograms: Histograms) -> Self {
        SharedHistograms {
            data: Mutex::new(histograms),
            lost: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Histograms> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One sampling event's sink: every sample is one tick of `weight` interrupts.
pub struct TickSink {
    pub shared: std::sync::Arc<SharedHistograms>,
    pub weight: u64,
}

impl SampleSink for TickSink {
    fn sample(&self, sample: &Sample) {
        self.shared.lock().record(sample, self.weight);
    }
    fn lost(&self, records: u64) {
        let total = self.shared.lost.fetch_add(records, Ordering::Relaxed) + records;
        tracing::warn!(records, total, "perf lost samples (PERF_RECORD_LOST)");
    }
    fn throttled(&self) {
        let n = self.shared.throttled.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                times = n,
                "perf throttled a sampling event (PERF_RECORD_THROTTLE)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ip: u64, user: bool, pid: u32, cpu: u32) -> Sample {
        Sample {
            ip,
            pid,
            tid: pid,
            cpu,
            user,
            caller: Some(0x9000),
        }
    }

    #[test]
    fn ipl_mapping_follows_the_contract() {
        let mut h = Histograms::new(true, 2);
        h.ipl_on = true;
        h.record(&sample(0x1000, true, 42, 0), 3);
        h.record(&sample(0xffff_1000, false, 0, 1), 2);
        h.record(&sample(0xffff_1000, false, 42, 1), 1);
        assert_eq!(h.ipl[0][8], 3);
        assert_eq!(
            (h.ipl[1][0], h.ipl[1][7]),
            (3, 2),
            "idle is a subset of IPL0"
        );
        h.clear_ipl();
        assert!(h.ipl.iter().flatten().all(|&v| v == 0));
    }

    #[test]
    fn buckets_cover_stride_instructions_and_drop_other_modes() {
        let mut h = Histograms::new(false, 2);
        h.profile = Some(Profile {
            mode: ProfileMode::User,
            start: 0x1000,
            end: 0x1100,
            bucket_bytes: 16,
            buckets: vec![vec![0; 16]],
            caller_mode: false,
            caller_ranges: vec![],
        });
        h.record(&sample(0x1000, true, 1, 0), 1);
        h.record(&sample(0x100f, true, 1, 1), 1);
        h.record(&sample(0x10f0, true, 1, 0), 5);
        h.record(&sample(0x1100, true, 1, 0), 1); // past the end
        h.record(&sample(0x1000, false, 1, 0), 1); // kernel mode
        let p = h.profile.as_ref().unwrap();
        assert_eq!((p.buckets[0][0], p.buckets[0][15]), (2, 5));
        assert_eq!(p.buckets[0].iter().sum::<u32>(), 7);
        assert_eq!(h.profile_bytes().len(), 64);
        assert_eq!(Profile::bucket_count(0x1000, 0x1100, 4), 16);
        assert_eq!(Profile::bucket_count(0x1000, 0x1101, 4), 17);
        assert_eq!(Profile::bucket_count(0x1000, 0x1100, 0), 1);
    }

    #[test]
    fn caller_ranges_charge_the_caller() {
        let mut h = Histograms::new(false, 1);
        h.profile = Some(Profile {
            mode: ProfileMode::Kernel,
            start: 0x8000,
            end: 0xa000,
            bucket_bytes: 0x1000,
            buckets: vec![vec![0; 2]],
            caller_mode: true,
            caller_ranges: vec![(0x8000, 0x8100)],
        });
        h.record(&sample(0x8010, false, 1, 0), 1); // charged to 0x9000
        h.record(&sample(0x8200, false, 1, 0), 1); // not a caller range
        let p = h.profile.as_ref().unwrap();
        assert_eq!(p.buckets[0], vec![1, 1]);
    }
}
