//! The sampled data of one open: IPL histograms and PC-profile buckets
//! (docs/device.md §6). Samples arrive from the backend's sampler thread through a
//! [`TickSink`] per sampling event; each carries the weight
//! `effective period / period` so totals stay in interrupt units.

use crate::backend::{Sample, SampleSink};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pfm_abi::{PFIPL_ENTRIES, PFIPL_IDLE, PFIPL_KERNEL, PFIPL_USER};

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
    pub buckets: Buckets,
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

/// See [`Histograms::collecting`].
#[derive(Debug, Clone, Copy)]
pub struct Collecting {
    ipl: bool,
    profile: bool,
    caller_mode: Option<bool>,
}

/// What the sinks fill: per CPU slot (one slot unless the open is EACH).
#[derive(Debug)]
pub struct Histograms {
    /// Map from CPU number to slot: `None` aggregates into slot 0.
    per_cpu: bool,
    pub ipl_on: bool,
    /// `PFM_PROFILING` is selected: samples go to the profile's buckets.
    /// Deselected, the range and buckets stay and nothing is added.
    pub profile_on: bool,
    pub ipl: Vec<[u64; PFIPL_ENTRIES]>,
    /// Per slot, the interrupts the counting groups counted while the IPL
    /// histogram was kept (LOGALL opens that count): what its total must
    /// reach (see [`Histograms::reconcile`]).
    counted: Vec<u64>,
    /// Per slot, the interrupts of samples the kernel lost: counted, never
    /// in the histogram (reported by `pi_lost_samples`), so no reconcile
    /// books them as idle time.
    lost: Vec<u64>,
    /// Per slot, idle ticks a reconcile booked that no sample had reported
    /// yet: a later sample whose count ends an idle gap covering them
    /// books only the rest ([`Histograms::record_gap`]).
    reconciled_idle: Vec<u64>,
    pub profile: Option<Profile>,
}

impl Histograms {
    pub fn new(per_cpu: bool, slots: usize) -> Self {
        let slots = if per_cpu { slots } else { 1 };
        Histograms {
            per_cpu,
            ipl_on: false,
            profile_on: false,
            ipl: vec![[0; PFIPL_ENTRIES]; slots],
            counted: vec![0; slots],
            lost: vec![0; slots],
            reconciled_idle: vec![0; slots],
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

    /// What `PCNTSETITEMS` and `PCNTCALLER` set here, for a refused change
    /// to put back ([`Histograms::restore`]).
    pub fn collecting(&self) -> Collecting {
        Collecting {
            ipl: self.ipl_on,
            profile: self.profile_on,
            caller_mode: self.profile.as_ref().map(|p| p.caller_mode),
        }
    }

    pub fn restore(&mut self, collecting: Collecting) {
        self.ipl_on = collecting.ipl;
        self.profile_on = collecting.profile;
        if let (Some(profile), Some(caller_mode)) = (&mut self.profile, collecting.caller_mode) {
            profile.caller_mode = caller_mode;
        }
    }

    /// Adds one tick of `weight` interrupts (docs/device.md §6 mappings).
    pub fn record(&mut self, sample: &Sample, weight: u64) {
        let slot = self.slot(sample.cpu);
        if self.ipl_on {
            let ipl = &mut self.ipl[slot];
            if sample.user {
                ipl[PFIPL_USER] += weight;
            } else {
                // Idle is a subset of IPL0, as the original driver counted it.
                ipl[PFIPL_KERNEL] += weight;
                if sample.pid == 0 {
                    ipl[PFIPL_IDLE] += weight;
                }
            }
        }
        if let Some(profile) = self.profile.as_mut().filter(|_| self.profile_on) {
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
            if let Some(bucket) = profile.bucket_of(ip)
                && !profile
                    .buckets
                    .add(slot, bucket, u32::try_from(weight).unwrap_or(u32::MAX))
            {
                crate::logging::once(
                    "profile-chunk-copy",
                    "profile samples dropped: no memory for a copy of their buckets (64 KiB)",
                );
            }
        }
    }

    /// The idle gap a CPU-wide sample ended on `cpu` (its count covers a
    /// stretch no sample reported), as IPL0 and idle ticks for the IPL
    /// histogram only (no PC is known for them), less what a reconcile
    /// already booked as idle there: the same stretch is never booked twice. (A read during
    /// the gap books it from the counting groups; the sample that ends the
    /// gap, when its count covers it, books it again otherwise: 7,000 idle
    /// ticks over the counted interrupts in one second of an idle CPU.)
    pub fn record_gap(&mut self, cpu: u32, ticks: u64) {
        if self.ipl_on {
            let slot = self.slot(cpu);
            let booked = self.reconciled_idle[slot].min(ticks);
            self.reconciled_idle[slot] -= booked;
            self.ipl[slot][PFIPL_KERNEL] += ticks - booked;
            self.ipl[slot][PFIPL_IDLE] += ticks - booked;
        }
    }

    pub fn clear_ipl(&mut self) {
        self.ipl.iter_mut().for_each(|h| *h = [0; PFIPL_ENTRIES]);
        self.counted.iter_mut().for_each(|c| *c = 0);
        self.lost.iter_mut().for_each(|c| *c = 0);
        self.reconciled_idle.iter_mut().for_each(|c| *c = 0);
    }

    /// `interrupts` on `cpu` whose samples the kernel lost.
    pub fn record_lost(&mut self, cpu: u32, interrupts: u64) {
        if self.ipl_on {
            let slot = self.slot(cpu);
            self.lost[slot] += interrupts;
        }
    }

    /// `interrupts` more counted on `cpu` by the open's counting groups,
    /// while its CPU-wide samplers ran.
    pub fn counted(&mut self, cpu: u32, interrupts: u64) {
        if self.ipl_on {
            let slot = self.slot(cpu);
            self.counted[slot] += interrupts;
        }
    }

    /// Brings each slot's IPL total up to what was counted, less
    /// `allowance(slot)` (the interrupts its samplers may have counted and
    /// not yet sampled: one sample's worth per sampler) and less the
    /// interrupts of lost samples, charging the rest to IPL 0 and idle.
    /// What no sample will ever report is a stretch the kernel throttled a
    /// CPU-wide sampler through: on an idle CPU whose tick stopped, until it
    /// wakes, and the cpu-clock sampler restarts its count when the throttle
    /// lifts, so no later sample carries the gap.
    /// The counting groups are never throttled and counted it. Charging
    /// only past the allowance keeps a later sample from charging any of
    /// it twice.
    pub fn reconcile(&mut self, allowance: impl Fn(usize) -> u64) {
        if !self.ipl_on {
            return;
        }
        let slots = self
            .ipl
            .iter_mut()
            .zip(&self.counted)
            .zip(&self.lost)
            .zip(&mut self.reconciled_idle);
        for (slot, (((ipl, counted), lost), reconciled)) in slots.enumerate() {
            let total: u64 = ipl.iter().sum::<u64>() - ipl[PFIPL_IDLE];
            let missing = counted.saturating_sub(total + lost + allowance(slot));
            ipl[PFIPL_KERNEL] += missing;
            ipl[PFIPL_IDLE] += missing;
            *reconciled += missing;
        }
    }

    /// The profile buckets as `read(2)` returns them, as of now: a
    /// copy-on-write snapshot, so taking it copies no bucket.
    pub fn profile_snapshot(&self) -> BucketSnapshot {
        self.profile
            .as_ref()
            .map(|p| p.buckets.snapshot())
            .unwrap_or_default()
    }
}

/// Buckets per chunk: 64 KiB. A chunk is the unit of copy-on-write.
const CHUNK: usize = 16 * 1024;

/// The profile buckets of every CPU slot, one slot after another as `read(2)`
/// lays them out, in chunks that read snapshots share copy-on-write: a
/// snapshot costs a pointer per chunk, a read of N bytes copies N bytes, and
/// the sampler copies a chunk only the first time it writes to one a
/// snapshot still holds.
#[derive(Debug, Clone, Default)]
pub struct Buckets {
    chunks: Vec<Arc<Vec<u32>>>,
    per_slot: usize,
    len: usize,
}

impl Buckets {
    /// `slots` zeroed slots of `per_slot` buckets; `None` when the memory
    /// cannot be had. Every full chunk starts as one shared chunk of zeros,
    /// which [`Buckets::add`] copies the first time it writes there (as it
    /// copies a chunk a snapshot holds): setting a range touches no bucket
    /// memory, however large (a 64 MiB range took a serving thread 36 ms of
    /// page faults), and memory grows with the chunks samples reach.
    pub fn zeroed(slots: usize, per_slot: usize) -> Option<Buckets> {
        let len = slots.checked_mul(per_slot)?;
        let zeros = |n: usize| {
            let mut chunk = Vec::new();
            chunk.try_reserve_exact(n).ok()?;
            chunk.resize(n, 0);
            Some(Arc::new(chunk))
        };
        let mut chunks = Vec::new();
        chunks.try_reserve_exact(len.div_ceil(CHUNK)).ok()?;
        if len >= CHUNK {
            let full = zeros(CHUNK)?;
            chunks.extend(std::iter::repeat_n(full, len / CHUNK));
        }
        if len % CHUNK != 0 {
            chunks.push(zeros(len % CHUNK)?);
        }
        Some(Buckets {
            chunks,
            per_slot,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Adds `weight` to a bucket. False when the chunk holding it is shared
    /// (zeros, or a read's snapshot) and no memory can be had for its copy:
    /// then nothing is added, and the daemon serves on.
    pub fn add(&mut self, slot: usize, bucket: usize, weight: u32) -> bool {
        let i = slot * self.per_slot + bucket;
        if i >= self.len {
            return true;
        }
        let chunk = &mut self.chunks[i / CHUNK];
        if Arc::get_mut(chunk).is_none() {
            let mut copy = Vec::new();
            if copy.try_reserve_exact(chunk.len()).is_err() {
                return false;
            }
            copy.extend_from_slice(chunk);
            *chunk = Arc::new(copy);
        }
        let chunk = Arc::make_mut(chunk);
        chunk[i % CHUNK] = chunk[i % CHUNK].saturating_add(weight);
        true
    }

    #[cfg(test)]
    pub fn get(&self, slot: usize, bucket: usize) -> u32 {
        let i = slot * self.per_slot + bucket;
        self.chunks[i / CHUNK][i % CHUNK]
    }

    pub fn snapshot(&self) -> BucketSnapshot {
        BucketSnapshot {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }
}

/// The buckets as one `read(2)` call sees them.
#[derive(Debug, Clone, Default)]
pub struct BucketSnapshot {
    chunks: Vec<Arc<Vec<u32>>>,
    len: usize,
}

impl BucketSnapshot {
    pub fn byte_len(&self) -> usize {
        self.len * 4
    }

    /// Bytes `[offset, offset + size)` of the native-endian buckets, cut to
    /// what there is.
    pub fn bytes(&self, offset: usize, size: usize) -> Vec<u8> {
        let start = offset.min(self.byte_len());
        let end = start.saturating_add(size).min(self.byte_len());
        let mut out = Vec::with_capacity(end - start);
        let mut at = start;
        while at < end {
            let bucket = at / 4;
            let bytes = self.chunks[bucket / CHUNK][bucket % CHUNK].to_ne_bytes();
            let from = at % 4;
            let take = (4 - from).min(end - at);
            out.extend_from_slice(&bytes[from..from + take]);
            at += take;
        }
        out
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

/// A sample standing for more than this many nominal samples' worth of
/// events ends a gap (see `TickSink::sample`).
const GAP_FACTOR: u64 = 4;

/// One counter's sink: each sample is a tick of some interrupts.
pub struct TickSink {
    shared: std::sync::Arc<SharedHistograms>,
    /// Interrupts one sample stands for at the nominal period.
    weight: u64,
    /// Host events per sample at the nominal period.
    host_period: u64,
    /// The samplers count every task on their CPU (LOGALL): a gap in their
    /// samples is idle time. Per-thread samplers count one thread's run time.
    cpu_wide: bool,
    /// What the sink has booked, under one lock taken once per sample.
    booked: Mutex<Booked>,
    /// The event counts user mode only: see [`TickSink::user_only`].
    user_only: bool,
}

#[derive(Default)]
struct Booked {
    /// Per sampled event (CPU, and thread for per-thread samplers): host
    /// events already turned into ticks.
    credited: HashMap<(u32, u32), u64>,
    /// CPUs whose ring lost samples since their last sample: the count that
    /// sample carries includes the lost ones, which are no idle gap.
    after_loss: std::collections::HashSet<u32>,
}

impl TickSink {
    pub fn new(
        shared: std::sync::Arc<SharedHistograms>,
        weight: u64,
        host_period: u64,
        cpu_wide: bool,
    ) -> Self {
        TickSink {
            shared,
            weight,
            host_period: host_period.max(1),
            cpu_wide,
            booked: Mutex::default(),
            user_only: false,
        }
    }

    /// For an event that counts user mode only. Its samples with a kernel
    /// IP are skid: the overflow interrupt came after the user instruction
    /// that overflowed the counter (late, on some PMUs, by a whole timer
    /// tick). Their ticks are user time; their IP, being no user IP, lands
    /// in no user profile.
    pub fn user_only(mut self, user_only: bool) -> Self {
        self.user_only = user_only;
        self
    }

    /// Interrupts `sample` stands for: from the event's own count when the
    /// sample carries it, so a timer that fires late or a throttled stretch
    /// loses no ticks; else the nominal weight.
    fn ticks(&self, credited: &mut HashMap<(u32, u32), u64>, sample: &Sample) -> u64 {
        let Some(count) = sample.count else {
            return self.weight;
        };
        // A per-thread sampler's count is the sampled thread's own (perf
        // gives each inherited thread its own event on each CPU).
        let thread = if self.cpu_wide { u32::MAX } else { sample.tid };
        let done = credited.entry((sample.cpu, thread)).or_insert(0);
        let delta = count.saturating_sub(*done) as u128;
        let ticks = delta * self.weight as u128 / self.host_period as u128;
        *done += (ticks * self.host_period as u128 / self.weight as u128) as u64;
        ticks as u64
    }
}

impl SampleSink for TickSink {
    fn sample(&self, sample: &Sample) {
        let skid = Sample {
            user: true,
            ..*sample
        };
        let sample = if self.user_only && !sample.user {
            &skid
        } else {
            sample
        };
        let (ticks, after_loss) = {
            let mut booked = self.booked.lock().unwrap_or_else(|e| e.into_inner());
            let ticks = self.ticks(&mut booked.credited, sample);
            (ticks, booked.after_loss.remove(&sample.cpu))
        };
        let mut histograms = self.shared.lock();
        if after_loss {
            // The rest of its count was in the lost samples, already booked
            // as lost: this sample is one sample's worth.
            histograms.record(sample, ticks.min(self.weight));
            return;
        }
        // The kernel throttles a CPU-wide sampler on an idle CPU whose tick
        // is stopped, until the CPU wakes: the first sample after that ends
        // a gap of idle time. The gap goes to IPL0/idle, not to the task the
        // sample happened to catch.
        if self.cpu_wide && ticks > GAP_FACTOR * self.weight {
            histograms.record_gap(sample.cpu, ticks - self.weight);
            histograms.record(sample, self.weight);
        } else {
            histograms.record(sample, ticks);
        }
    }
    fn lost(&self, cpu: u32, records: u64) {
        // Counted in PCNTGETINFO, left out of the histograms (neither the
        // next sample nor the IPL reconcile may book them, as idle or
        // otherwise); logged once a daemon's life, as any open can make it
        // happen at will.
        let total = self.shared.lost.fetch_add(records, Ordering::Relaxed) + records;
        self.booked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .after_loss
            .insert(cpu);
        self.shared
            .lock()
            .record_lost(cpu, records.saturating_mul(self.weight));
        tracing::debug!(records, total, "perf lost samples (PERF_RECORD_LOST)");
        crate::logging::once(
            "perf-lost",
            "perf lost samples (PERF_RECORD_LOST): the histograms leave them out; PCNTGETINFO counts them per open",
        );
    }
    fn throttled(&self) {
        let n = self.shared.throttled.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(
            times = n,
            "perf throttled a sampling event (PERF_RECORD_THROTTLE)"
        );
        crate::logging::once(
            "perf-throttled",
            "perf throttled a sampling event (PERF_RECORD_THROTTLE); PCNTGETINFO counts it per open",
        );
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
            count: None,
            caller: Some(0x9000),
        }
    }

    #[test]
    fn ipl_mapping_follows_the_reference() {
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
    fn zeroed_buckets_share_one_chunk_until_written() {
        let mut b = Buckets::zeroed(1, 3 * CHUNK + 10).unwrap();
        assert_eq!(b.len(), 3 * CHUNK + 10);
        assert!(
            Arc::ptr_eq(&b.chunks[0], &b.chunks[2]),
            "no memory per chunk"
        );
        b.add(0, CHUNK + 5, 7);
        b.add(0, 3 * CHUNK + 9, 1);
        assert_eq!(
            (b.get(0, 5), b.get(0, CHUNK + 5), b.get(0, 2 * CHUNK + 5)),
            (0, 7, 0),
            "a write copies its chunk alone"
        );
        assert_eq!(b.get(0, 3 * CHUNK + 9), 1);
        assert!(Arc::ptr_eq(&b.chunks[0], &b.chunks[2]));
        assert!(!Arc::ptr_eq(&b.chunks[0], &b.chunks[1]));
    }

    #[test]
    fn buckets_cover_stride_instructions_and_drop_other_modes() {
        let mut h = Histograms::new(false, 2);
        h.profile_on = true;
        h.profile = Some(Profile {
            mode: ProfileMode::User,
            start: 0x1000,
            end: 0x1100,
            bucket_bytes: 16,
            buckets: Buckets::zeroed(1, 16).unwrap(),
            caller_mode: false,
            caller_ranges: vec![],
        });
        h.record(&sample(0x1000, true, 1, 0), 1);
        h.record(&sample(0x100f, true, 1, 1), 1);
        h.record(&sample(0x10f0, true, 1, 0), 5);
        h.record(&sample(0x1100, true, 1, 0), 1); // past the end
        h.record(&sample(0x1000, false, 1, 0), 1); // kernel mode
        let p = h.profile.as_ref().unwrap();
        assert_eq!((p.buckets.get(0, 0), p.buckets.get(0, 15)), (2, 5));
        assert_eq!((0..16).map(|b| p.buckets.get(0, b)).sum::<u32>(), 7);
        assert_eq!(h.profile_snapshot().byte_len(), 64);
        assert_eq!(Profile::bucket_count(0x1000, 0x1100, 4), 16);
        assert_eq!(Profile::bucket_count(0x1000, 0x1101, 4), 17);
        assert_eq!(Profile::bucket_count(0x1000, 0x1100, 0), 1);
    }

    #[test]
    fn caller_ranges_charge_the_caller() {
        let mut h = Histograms::new(false, 1);
        h.profile_on = true;
        h.profile = Some(Profile {
            mode: ProfileMode::Kernel,
            start: 0x8000,
            end: 0xa000,
            bucket_bytes: 0x1000,
            buckets: Buckets::zeroed(1, 2).unwrap(),
            caller_mode: true,
            caller_ranges: vec![(0x8000, 0x8100)],
        });
        h.record(&sample(0x8010, false, 1, 0), 1); // charged to 0x9000
        h.record(&sample(0x8200, false, 1, 0), 1); // not a caller range
        let p = h.profile.as_ref().unwrap();
        assert_eq!((p.buckets.get(0, 0), p.buckets.get(0, 1)), (1, 1));
    }

    #[test]
    fn snapshots_are_copy_on_write_and_reads_copy_only_what_they_return() {
        let mut b = Buckets::zeroed(2, CHUNK + 3).unwrap();
        b.add(0, 1, 7);
        b.add(1, CHUNK, 9);
        let snap = b.snapshot();
        b.add(0, 1, 100);
        assert_eq!(
            snap.bytes(4, 4),
            7u32.to_ne_bytes(),
            "the snapshot keeps its value"
        );
        assert_eq!(b.get(0, 1), 107);
        let last = (2 * (CHUNK + 3) - 3) * 4;
        assert_eq!(snap.bytes(last, 4), 9u32.to_ne_bytes());
        assert_eq!(
            snap.bytes(5, 2),
            [7u32.to_ne_bytes()[1], 7u32.to_ne_bytes()[2]]
        );
        assert_eq!(snap.bytes(snap.byte_len() - 1, 100).len(), 1);
        assert!(snap.bytes(snap.byte_len() + 5, 100).is_empty());
        assert!(Buckets::zeroed(usize::MAX, 2).is_none());
    }

    #[test]
    fn cpu_wide_ticks_follow_the_counted_events_and_gaps_are_idle() {
        let shared = std::sync::Arc::new(SharedHistograms::new(Histograms::new(false, 2)));
        shared.lock().ipl_on = true;
        // 10 interrupts per sample, 1000 host events per sample.
        let sink = TickSink::new(shared.clone(), 10, 1000, true);
        let at = |count: u64, user: bool| Sample {
            count: Some(count),
            ..sample(0x1000, user, 42, 0)
        };
        // Late timers: 1100 events between samples are 11 interrupts each.
        for k in 1..=10 {
            sink.sample(&at(1100 * k, true));
        }
        assert_eq!(
            shared.lock().ipl[0][8],
            110,
            "ticks follow the count, not the nominal period"
        );
        // A throttled idle stretch: the next sample ends a gap of 100 samples.
        sink.sample(&at(1100 * 10 + 100_000, true));
        let h = shared.lock();
        assert_eq!(
            h.ipl[0][8], 120,
            "the sample itself stands for one nominal sample"
        );
        assert_eq!(
            (h.ipl[0][0], h.ipl[0][7]),
            (990, 990),
            "the gap is idle time"
        );
        let total: u64 = h.ipl[0][0] + h.ipl[0][8];
        assert_eq!(
            total,
            (11_000 + 100_000) / 100,
            "every counted event is in the histogram"
        );
    }

    /// A read during an idle gap books it from the counting groups; the
    /// sample that ends the gap later, its count covering it, books only
    /// what the reconcile had not.
    #[test]
    fn a_gap_a_reconcile_booked_is_not_booked_again() {
        let shared = std::sync::Arc::new(SharedHistograms::new(Histograms::new(false, 2)));
        shared.lock().ipl_on = true;
        // 10 interrupts per sample, 1000 host events per sample.
        let sink = TickSink::new(shared.clone(), 10, 1000, true);
        let at = |count: u64| Sample {
            count: Some(count),
            ..sample(0x1000, true, 42, 0)
        };
        sink.sample(&at(1000));
        // 100 samples' worth counted during the gap, 10 of them allowed for.
        {
            let mut h = shared.lock();
            h.counted(0, 10 + 1000);
            h.reconcile(|_| 10);
            assert_eq!((h.ipl[0][0], h.ipl[0][7]), (990, 990));
        }
        // The gap ends: the sample's count covers 101 samples.
        sink.sample(&at(1000 + 101_000));
        let h = shared.lock();
        assert_eq!(h.ipl[0][8], 20, "the two samples");
        assert_eq!(
            (h.ipl[0][0], h.ipl[0][7]),
            (1000, 1000),
            "the gap once: 990 booked by the reconcile, 10 more by the sample"
        );
    }

    #[test]
    fn per_thread_ticks_follow_each_threads_own_count() {
        let shared = std::sync::Arc::new(SharedHistograms::new(Histograms::new(false, 2)));
        shared.lock().ipl_on = true;
        let sink = TickSink::new(shared.clone(), 10, 1000, false);
        let on = |tid: u32, cpu: u32, count: u64| Sample {
            count: Some(count),
            tid,
            ..sample(0x1000, true, 42, cpu)
        };
        // Two threads, each with its own count per CPU.
        sink.sample(&on(1, 0, 1000));
        sink.sample(&on(2, 0, 1500));
        sink.sample(&on(1, 1, 700));
        sink.sample(&on(1, 0, 3000));
        assert_eq!(shared.lock().ipl[0][8], 10 + 15 + 7 + 20);
        // A long stretch of one thread is its own run time, never idle.
        sink.sample(&on(2, 0, 101_500));
        let h = shared.lock();
        assert_eq!((h.ipl[0][8], h.ipl[0][7]), (52 + 1000, 0));
    }

    #[test]
    fn kernel_samples_of_a_user_only_event_are_user_ticks_outside_the_profile() {
        let mut h = Histograms::new(false, 1);
        h.ipl_on = true;
        h.profile_on = true;
        h.profile = Some(Profile {
            mode: ProfileMode::User,
            start: 0x1000,
            end: 0x2000,
            bucket_bytes: 0x1000,
            buckets: Buckets::zeroed(1, 1).unwrap(),
            caller_mode: false,
            caller_ranges: vec![],
        });
        let shared = std::sync::Arc::new(SharedHistograms::new(h));
        let sink = TickSink::new(shared.clone(), 1, 1000, false).user_only(true);
        sink.sample(&sample(0x1800, true, 42, 0));
        sink.sample(&sample(0xffff_1000, false, 42, 0));
        let h = shared.lock();
        assert_eq!((h.ipl[0][8], h.ipl[0][0]), (2, 0), "both user ticks");
        assert_eq!(
            h.profile.as_ref().unwrap().buckets.get(0, 0),
            1,
            "one in the profile"
        );
    }

    #[test]
    fn samples_without_a_count_use_the_nominal_weight() {
        let shared = std::sync::Arc::new(SharedHistograms::new(Histograms::new(false, 1)));
        shared.lock().ipl_on = true;
        TickSink::new(shared.clone(), 10, 1000, true).sample(&sample(0x1000, true, 42, 0));
        TickSink::new(shared.clone(), 10, 1000, false).sample(&sample(0x1000, true, 42, 0));
        assert_eq!(shared.lock().ipl[0][8], 20);
    }
}
