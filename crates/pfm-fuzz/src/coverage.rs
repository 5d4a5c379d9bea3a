//! Edge coverage from LLVM's SanitizerCoverage, on stable Rust: built with
//! `-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=3
//! -C llvm-args=-sanitizer-coverage-inline-8bit-counters` (what
//! `scripts/fuzz` sets), every edge of the instrumented code bumps a byte
//! counter, and each module hands its counter array to
//! [`__sanitizer_cov_8bit_counters_init`] before `main`. Without those flags
//! nothing registers and [`Coverage::available`] is false: the fuzzer then
//! runs unguided.
//!
//! After each input the counters are folded into AFL's hit-count buckets
//! (1, 2, 3, 4–7, 8–15, 16–31, 32–127, 128+) and compared with every bucket
//! seen so far: an input that reaches a new one is kept.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Counter arrays one binary may register (one per codegen unit).
const MAX_REGIONS: usize = 4096;

static REGION_START: [AtomicPtr<u8>; MAX_REGIONS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_REGIONS];
static REGION_LEN: [AtomicUsize; MAX_REGIONS] = [const { AtomicUsize::new(0) }; MAX_REGIONS];
static REGIONS: AtomicUsize = AtomicUsize::new(0);

/// Called by each instrumented module's constructor, before `main`, with
/// its counters `[start, stop)`. Allocates nothing (it runs before the
/// runtime is set up).
#[unsafe(no_mangle)]
pub extern "C" fn __sanitizer_cov_8bit_counters_init(start: *mut u8, stop: *mut u8) {
    let len = (stop as usize).saturating_sub(start as usize);
    if start.is_null() || len == 0 {
        return;
    }
    let index = REGIONS.fetch_add(1, Ordering::SeqCst);
    if index < MAX_REGIONS {
        REGION_START[index].store(start, Ordering::SeqCst);
        REGION_LEN[index].store(len, Ordering::SeqCst);
    }
}

/// The counter arrays registered so far.
fn regions() -> impl Iterator<Item = &'static mut [u8]> {
    let count = REGIONS.load(Ordering::SeqCst).min(MAX_REGIONS);
    (0..count).filter_map(|i| {
        let start = REGION_START[i].load(Ordering::SeqCst);
        let len = REGION_LEN[i].load(Ordering::SeqCst);
        // SAFETY: LLVM gave us `[start, start + len)`, a static array of the
        // instrumented binary that lives as long as the process; only the
        // instrumented code (this thread, between inputs: never while we
        // look) writes it, with plain byte increments.
        (!start.is_null()).then(|| unsafe { std::slice::from_raw_parts_mut(start, len) })
    })
}

/// Every hit-count bucket seen so far, one byte of bucket bits per edge.
pub struct Coverage {
    seen: Vec<u8>,
}

impl Default for Coverage {
    fn default() -> Self {
        Self::new()
    }
}

impl Coverage {
    pub fn new() -> Coverage {
        let edges = regions().map(|r| r.len()).sum();
        reset();
        Coverage {
            seen: vec![0; edges],
        }
    }

    /// Whether the binary was built with coverage counters.
    pub fn available(&self) -> bool {
        !self.seen.is_empty()
    }

    /// Edges instrumented, and edges some input reached.
    pub fn edges(&self) -> (usize, usize) {
        (
            self.seen.len(),
            self.seen.iter().filter(|&&b| b != 0).count(),
        )
    }

    /// Folds the counters of the input just run into what was seen, clears
    /// them for the next, and says whether that input reached a new bucket.
    pub fn take_new(&mut self) -> bool {
        self.take(fold)
    }

    /// As [`Coverage::take_new`], but only a new edge counts, not a new
    /// hit count of one already reached: what a small corpus keeps.
    pub fn take_new_edges(&mut self) -> bool {
        self.take(fold_edges)
    }

    fn take(&mut self, fold: fn(&mut [u8], &mut [u8]) -> bool) -> bool {
        let mut new = false;
        let mut base = 0;
        for region in regions() {
            let seen = &mut self.seen[base..base + region.len()];
            base += region.len();
            // Most counters stay 0: look at them eight at a time (this loop
            // is instrumented too, so it must stay short).
            let (head, words, tail) = {
                // SAFETY: any bit pattern is a valid u64; the middle slice is
                // the aligned part of the same bytes, used only here.
                unsafe { region.align_to_mut::<u64>() }
            };
            let head_len = head.len();
            new |= fold(head, &mut seen[..head_len]);
            let mut at = head_len;
            for word in words.iter_mut() {
                if *word != 0 {
                    let mut hits = word.to_ne_bytes();
                    new |= fold(&mut hits, &mut seen[at..at + 8]);
                    *word = 0;
                }
                at += 8;
            }
            new |= fold(tail, &mut seen[at..]);
        }
        new
    }
}

/// Folds `counters` into `seen` and clears them; true if a bucket is new.
fn fold(counters: &mut [u8], seen: &mut [u8]) -> bool {
    let mut new = false;
    for (c, s) in counters.iter_mut().zip(seen.iter_mut()) {
        let bucket = BUCKETS[usize::from(*c)];
        new |= bucket & !*s != 0;
        *s |= bucket;
        *c = 0;
    }
    new
}

/// As [`fold`], true only if an edge is reached for the first time.
fn fold_edges(counters: &mut [u8], seen: &mut [u8]) -> bool {
    let mut new = false;
    for (c, s) in counters.iter_mut().zip(seen.iter_mut()) {
        new |= *c != 0 && *s == 0;
        *s |= BUCKETS[usize::from(*c)];
        *c = 0;
    }
    new
}

/// [`bucket`] of every count, looked up rather than matched.
static BUCKETS: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut hits = 0;
    while hits < 256 {
        table[hits] = bucket(hits as u8);
        hits += 1;
    }
    table
};

/// Clears every counter.
pub fn reset() {
    for region in regions() {
        region.fill(0);
    }
}

/// AFL's hit-count classes as one bit each.
const fn bucket(hits: u8) -> u8 {
    match hits {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 4,
        4..=7 => 8,
        8..=15 => 16,
        16..=31 => 32,
        32..=127 => 64,
        128.. => 128,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_counts_fall_in_afl_buckets() {
        let classes: Vec<u8> = [0u8, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 127, 128, 255]
            .iter()
            .map(|&h| bucket(h))
            .collect();
        assert_eq!(
            classes,
            [0, 1, 2, 4, 8, 8, 16, 16, 32, 32, 64, 64, 128, 128]
        );
    }
}
