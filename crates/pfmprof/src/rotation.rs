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
use std::collections::BTreeSet;
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

/// One range of the rotation and how it fares there.
struct Slot {
    range: Range,
    /// In the rotation now (its process maps it, the daemon took it).
    active: bool,
    /// Refused by the daemon: out of the rotation for good.
    refused: bool,
    /// Windows it has had, and turns it was passed over as idle.
    turns: u32,
    skipped: u32,
    /// The sum of its buckets.
    samples: u64,
}

impl Slot {
    /// Under 1 % of its windows' interrupts, after a few windows.
    fn idle(&self) -> bool {
        self.turns >= 3 && (self.samples as f64) < 0.01 * self.range.sampled as f64
    }
}

pub struct Rotation<'d> {
    device: &'d Device,
    counter: usize,
    stride: u64,
    slots: Vec<Slot>,
    current: Option<usize>,
    /// The current range's histogram as last read (it counts up from the
    /// range being set).
    last_snapshot: Vec<u32>,
    last_count: u64,
    /// Images whose refusal was said.
    said: BTreeSet<String>,
}

impl<'d> Rotation<'d> {
    pub fn new(device: &'d Device, counter: usize, stride: u64) -> Rotation<'d> {
        Rotation {
            device,
            counter,
            stride,
            slots: Vec::new(),
            current: None,
            last_snapshot: Vec::new(),
            last_count: 0,
            said: BTreeSet::new(),
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
            stride,
            ..Range::default()
        });
    }

    fn push(&mut self, range: Range) {
        self.slots.push(Slot {
            range,
            active: true,
            refused: false,
            turns: 0,
            skipped: 0,
            samples: 0,
        });
    }

    /// The text mappings of process `pid` are the user ranges from now
    /// on: new ones join the rotation, those of other processes or no longer
    /// mapped leave it (a range that comes back is taken up again).
    pub fn follow(&mut self, pid: u32, text: &[TextMapping]) {
        let maps = |r: &Range, m: &TextMapping| {
            r.space == Space::User
                && r.pid == pid
                && r.start == m.start
                && r.end == m.end
                && r.image == m.path
        };
        for slot in &mut self.slots {
            if slot.range.space == Space::User {
                slot.active = !slot.refused && text.iter().any(|m| maps(&slot.range, m));
            }
        }
        for m in text {
            let image = m.path.as_str();
            let known = self.slots.iter().any(|slot| maps(&slot.range, m));
            if !known && !self.said.contains(image) {
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
                    ..Range::default()
                });
            }
        }
    }

    /// The ranges profiled, those the daemon refused left out.
    pub fn into_ranges(self) -> Vec<Range> {
        self.slots
            .into_iter()
            .filter(|slot| !slot.refused)
            .map(|slot| slot.range)
            .collect()
    }

    pub fn active_count(&self) -> usize {
        self.slots.iter().filter(|slot| slot.active).count()
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
        for slot in &mut self.slots {
            (slot.range.sampled, slot.range.alive) = (0, 0);
        }
    }

    /// Charges the interrupts since the last reading to every range in the
    /// rotation (`alive`), and to the current one (`sampled`) if `sampling`.
    fn charge(&mut self, sampling: bool) -> Result<(), ProfError> {
        let now = self.interrupts()?;
        let delta = now.saturating_sub(self.last_count);
        self.last_count = now;
        for slot in self.slots.iter_mut().filter(|slot| slot.active) {
            slot.range.alive += delta;
        }
        if sampling && let Some(c) = self.current {
            self.slots[c].range.sampled += delta;
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
        let slot = &mut self.slots[c];
        let range = &mut slot.range;
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
            let new = u64::from(now.saturating_sub(before));
            *sum += new;
            slot.samples += new;
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
        let slot = &self.slots[c];
        if slot.range.sampled == 0 {
            return FIRST_WINDOW;
        }
        let share = slot.samples as f64 / slot.range.sampled as f64;
        MAX_WINDOW.mul_f64(share.clamp(0.0, 1.0)).max(MIN_WINDOW)
    }

    /// Starts the next window on the next range in the rotation (the same
    /// range again if it is the only one: its histogram goes on counting).
    pub fn open_window(&mut self) -> Result<(), ProfError> {
        let n = self.slots.len();
        let from = self.current.map_or(0, |c| c + 1);
        let order: Vec<usize> = (0..n).map(|step| (from + step) % n).collect();
        // An idle range is looked at one turn in IDLE_TURNS: every look
        // costs a read and a set that no range is profiled through. The
        // ranges passed over on the way to the chosen one count a skip.
        let chosen = order.iter().position(|&i| {
            let slot = &self.slots[i];
            slot.active
                && (Some(i) == self.current || !slot.idle() || slot.skipped + 1 >= IDLE_TURNS)
        });
        if let Some(at) = chosen {
            for &i in &order[..at] {
                if self.slots[i].active {
                    self.slots[i].skipped += 1;
                }
            }
        }
        let first = chosen.map(|at| order[at]);
        for i in first.into_iter().chain(order) {
            if !self.slots[i].active {
                continue;
            }
            if Some(i) == self.current {
                // The same range goes on: its histogram counted through
                // the gap.
                return self.charge(true);
            }
            let r = &self.slots[i].range;
            let kernel = r.space == Space::Kernel;
            match self
                .device
                .set_range(kernel, r.start, r.end, Some(r.stride))
            {
                Ok(()) => {
                    self.current = Some(i);
                    let slot = &mut self.slots[i];
                    slot.turns += 1;
                    slot.skipped = 0;
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
                    ) => self.refuse(i, errno),
                    _ => return Err(e.into()),
                },
            }
        }
        self.current = None;
        self.charge(false)
    }

    /// The daemon refused range `i`: out of the rotation for good, said
    /// once per image (the kernel range without privilege quietly).
    fn refuse(&mut self, i: usize, errno: Errno) {
        let slot = &mut self.slots[i];
        (slot.active, slot.refused) = (false, true);
        let r = &slot.range;
        let kernel = r.space == Space::Kernel;
        if kernel && matches!(errno, Errno::EACCES | Errno::EPERM) {
            tracing::info!("the kernel range needs privilege: not profiled");
        } else if self.said.insert(r.image.clone()) {
            eprintln!(
                "pfmprof: not profiling {} ({:#x}-{:#x}, {} buckets): \
                 {errno}; its samples count as outside the ranges (a larger \
                 -stride needs fewer buckets; pfmd --max-profile-bytes and \
                 --profile-memory-per-user set the daemon's limits)",
                r.image,
                r.start,
                r.end,
                r.buckets_per_slot()
            );
        }
    }
}
