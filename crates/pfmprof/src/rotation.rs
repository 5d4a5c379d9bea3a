//! Several ranges on one open. The device profiles one range per open and
//! only one open may hold it (docs/device.md §2, §6), so pfmprof profiles
//! its ranges in turn, a window each: at the end of a window it reads the
//! histogram into the range's buckets, charges the interrupts of the window
//! to that range (`sampled`) and to every range in the rotation (`alive`),
//! and sets the next range. The report scales each range's buckets by
//! `alive / sampled` ([`crate::report::Range::scale`]). The read and the
//! setting of the next range are a gap charged to no range's `sampled` (its
//! samples are lost, not misattributed). A range's window lasts in
//! proportion to its share so far ([`Rotation::window`]).
//!
//! A range the daemon refuses (its budgets: `ENOMEM`, `ENOSPC`, `EBUSY`,
//! `EAGAIN`) is dropped and said on stderr, the kernel without privilege
//! (`EACCES`, `EPERM`) quietly; the others keep turning.

use super::ProfError;
use super::maps::TextMapping;
use super::report::{Range, Space};
use super::symbolize;
use nix::errno::Errno;
use pfm_client::Device;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The longest window, for a range with all the samples.
pub const MAX_WINDOW: Duration = Duration::from_millis(50);
/// The shortest, for a range with none (it is still looked at each turn).
pub const MIN_WINDOW: Duration = Duration::from_millis(2);
/// An idle range is looked at one turn in this many.
pub const IDLE_TURNS: u32 = 4;
/// The most buckets of the kernel range of a user profile.
pub const KERNEL_BUCKETS: u64 = 1 << 16;
/// A range's first window.
pub const FIRST_WINDOW: Duration = Duration::from_millis(10);

pub struct Rotation<'d> {
    device: &'d Device,
    counter: usize,
    stride: u64,
    ranges: Vec<Range>,
    active: Vec<bool>,
    /// Refused by the daemon: out of the rotation for good.
    refused: Vec<bool>,
    /// Windows each range has had, and turns it was passed over as idle.
    turns: Vec<u32>,
    skipped: Vec<u32>,
    current: Option<usize>,
    /// The current range's histogram as last read (it counts up from the
    /// range being set).
    last_snapshot: Vec<u32>,
    last_count: u64,
    /// Refusals already said, by image.
    said: BTreeMap<String, ()>,
}

impl<'d> Rotation<'d> {
    pub fn new(device: &'d Device, counter: usize, stride: u64) -> Rotation<'d> {
        Rotation {
            device,
            counter,
            stride,
            ranges: Vec::new(),
            active: Vec::new(),
            refused: Vec::new(),
            turns: Vec::new(),
            skipped: Vec::new(),
            current: None,
            last_snapshot: Vec::new(),
            last_count: 0,
            said: BTreeMap::new(),
        }
    }

    /// Adds the kernel text as a range of the rotation: at the user's
    /// stride for `-k` (`alone`), else at a stride coarse enough that its
    /// histogram has at most [`KERNEL_BUCKETS`] buckets (reading tens of
    /// megabytes at every turn would leave little time for the other ranges).
    pub fn add_kernel(&mut self, (start, end): (u64, u64), alone: bool) {
        let mut stride = self.stride;
        if !alone && stride != 0 {
            while (end - start).div_ceil(stride * 4) > KERNEL_BUCKETS {
                stride *= 2;
            }
        }
        self.push(Range {
            space: Space::Kernel,
            start,
            end,
            image: "/proc/kallsyms".into(),
            offset: 0,
            stride,
            build_id: None,
            pid: 0,
            sampled: 0,
            alive: 0,
            buckets: Vec::new(),
            symbols: Vec::new(),
            locations: Default::default(),
        });
    }

    fn push(&mut self, range: Range) {
        self.ranges.push(range);
        self.active.push(true);
        self.refused.push(false);
        self.turns.push(0);
        self.skipped.push(0);
    }

    /// The text mappings of process `pid` are the user ranges from now
    /// on: new ones join the rotation, those of other processes or no longer
    /// mapped leave it (a range that comes back is taken up again).
    pub fn follow(&mut self, pid: u32, text: &[TextMapping]) {
        for (i, r) in self.ranges.iter().enumerate() {
            if r.space == Space::User {
                self.active[i] = !self.refused[i]
                    && r.pid == pid
                    && text
                        .iter()
                        .any(|m| m.start == r.start && m.end == r.end && m.path == r.image);
            }
        }
        for m in text {
            let image = m.path.as_str();
            let known = self.ranges.iter().any(|r| {
                r.space == Space::User
                    && r.pid == pid
                    && r.start == m.start
                    && r.end == m.end
                    && r.image == image
            });
            if !known && !self.said.contains_key(image) {
                tracing::info!(pid, image, start = m.start, end = m.end, "range joins");
                self.push(Range {
                    space: Space::User,
                    start: m.start,
                    end: m.end,
                    image: image.to_string(),
                    offset: m.offset,
                    stride: self.stride,
                    build_id: symbolize::build_id(Path::new(image)),
                    pid,
                    sampled: 0,
                    alive: 0,
                    buckets: Vec::new(),
                    symbols: Vec::new(),
                    locations: Default::default(),
                });
            }
        }
    }

    /// The ranges profiled, those the daemon refused left out.
    pub fn into_ranges(self) -> Vec<Range> {
        self.ranges
            .into_iter()
            .zip(self.refused)
            .filter(|(_, refused)| !refused)
            .map(|(r, _)| r)
            .collect()
    }

    pub fn active_count(&self) -> usize {
        self.active.iter().filter(|a| **a).count()
    }

    fn interrupts(&self) -> Result<u64, ProfError> {
        Ok(self
            .device
            .interrupt_counts()?
            .iter()
            .map(|c| c.counters[self.counter])
            .sum())
    }

    /// Counts from here on: call after PCNTCLEARCNT (the device keeps
    /// counts across opens, so whatever was charged before is stale).
    pub fn counts_from_zero(&mut self) {
        self.last_count = 0;
        for r in &mut self.ranges {
            (r.sampled, r.alive) = (0, 0);
        }
    }

    /// Charges the interrupts since the last reading to every range in the
    /// rotation (`alive`), and to the current one (`sampled`) if `sampling`.
    fn charge(&mut self, sampling: bool) -> Result<(), ProfError> {
        let now = self.interrupts()?;
        let delta = now.saturating_sub(self.last_count);
        self.last_count = now;
        for (r, active) in self.ranges.iter_mut().zip(&self.active) {
            if *active {
                r.alive += delta;
            }
        }
        if sampling && let Some(c) = self.current {
            self.ranges[c].sampled += delta;
        }
        Ok(())
    }

    /// Ends the window: its interrupts to the current range and to every
    /// range in the rotation, then the range's new samples into its buckets.
    /// The histogram is read after the count: the read and the setting of
    /// the next range are a gap no range is charged for (but every range's
    /// `alive` is), so samples lost in it do not bias a range's scale.
    pub fn close_window(&mut self) -> Result<(), ProfError> {
        self.charge(true)?;
        let Some(c) = self.current else {
            return Ok(());
        };
        let snapshot = self.device.read_profile()?;
        let range = &mut self.ranges[c];
        if range.buckets.is_empty() {
            range.buckets = vec![0; snapshot.len()];
        }
        if range.buckets.len() != snapshot.len() {
            return Err(ProfError::Incompatible(format!(
                "PCNTGETRSIZE gave {} buckets for {:#x}-{:#x}, earlier {}",
                snapshot.len(),
                range.start,
                range.end,
                range.buckets.len()
            )));
        }
        if self.last_snapshot.len() != snapshot.len() {
            self.last_snapshot = vec![0; snapshot.len()];
        }
        for ((sum, &now), &before) in range
            .buckets
            .iter_mut()
            .zip(&snapshot)
            .zip(&self.last_snapshot)
        {
            *sum += u64::from(now.saturating_sub(before));
        }
        self.last_snapshot = snapshot;
        Ok(())
    }

    /// How long the current range's window lasts: in proportion to its
    /// share of the run so far (a busy range is watched longer, an idle one
    /// only looked at), between [`MIN_WINDOW`] and [`MAX_WINDOW`].
    pub fn window(&self) -> Duration {
        let Some(c) = self.current else {
            return MAX_WINDOW;
        };
        let r = &self.ranges[c];
        if r.sampled == 0 {
            return FIRST_WINDOW;
        }
        let share = r.buckets.iter().sum::<u64>() as f64 / r.sampled as f64;
        MAX_WINDOW.mul_f64(share.clamp(0.0, 1.0)).max(MIN_WINDOW)
    }

    /// Starts the next window on the next range in the rotation (the same
    /// range again if it is the only one: its histogram goes on counting).
    pub fn open_window(&mut self) -> Result<(), ProfError> {
        let n = self.ranges.len();
        let from = self.current.map_or(0, |c| c + 1);
        let order: Vec<usize> = (0..n).map(|step| (from + step) % n).collect();
        // An idle range (under 1% of its windows, after a few) is looked at
        // one turn in IDLE_TURNS: every look costs a read and a set that
        // no range is profiled through.
        let idle = |r: &Range, turns: u32, skipped: u32| {
            turns >= 3
                && skipped + 1 < IDLE_TURNS
                && (r.buckets.iter().sum::<u64>() as f64) < 0.01 * r.sampled as f64
        };
        let busy = order.iter().copied().find(|&i| {
            self.active[i]
                && (Some(i) == self.current
                    || !idle(&self.ranges[i], self.turns[i], self.skipped[i]))
        });
        for &i in &order {
            if self.active[i] && Some(i) != busy && busy.is_some() && order_before(&order, i, busy)
            {
                self.skipped[i] += 1;
            }
        }
        let order: Vec<usize> = busy.into_iter().chain(order).collect();
        for i in order {
            if !self.active[i] {
                continue;
            }
            if Some(i) == self.current {
                // The same range goes on: its histogram counted through
                // the gap.
                return self.charge(true);
            }
            let r = &self.ranges[i];
            let kernel = r.space == Space::Kernel;
            match self
                .device
                .set_range(kernel, r.start, r.end, Some(r.stride))
            {
                Ok(()) => {
                    self.current = Some(i);
                    self.turns[i] += 1;
                    self.skipped[i] = 0;
                    self.last_snapshot.clear();
                    // The gap since the window closed: no range's.
                    return self.charge(false);
                }
                Err(e) => match e.errno() {
                    Some(
                        errno @ (Errno::ENOMEM
                        | Errno::ENOSPC
                        | Errno::EBUSY
                        | Errno::EAGAIN
                        | Errno::EACCES
                        | Errno::EPERM),
                    ) => {
                        self.active[i] = false;
                        self.refused[i] = true;
                        let image = r.image.clone();
                        let quiet = kernel && matches!(errno, Errno::EACCES | Errno::EPERM);
                        if quiet {
                            tracing::info!("the kernel range needs privilege: not profiled");
                        } else if self.said.insert(image.clone(), ()).is_none() {
                            eprintln!(
                                "pfmprof: not profiling {image} ({:#x}-{:#x}, {} buckets): \
                                 {errno}; its samples count as outside the ranges (a larger \
                                 -stride needs fewer buckets; pfmd --max-profile-bytes and \
                                 --profile-memory-per-user set the daemon's limits)",
                                r.start,
                                r.end,
                                r.buckets_per_slot()
                            );
                        }
                    }
                    _ => return Err(e.into()),
                },
            }
        }
        self.current = None;
        self.charge(false)
    }
}

/// Whether `i` comes before `chosen` in `order`.
fn order_before(order: &[usize], i: usize, chosen: Option<usize>) -> bool {
    let Some(chosen) = chosen else { return false };
    let at = |x| order.iter().position(|&o| o == x);
    at(i) < at(chosen)
}
