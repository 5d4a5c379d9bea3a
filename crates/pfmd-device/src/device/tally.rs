//! The driver's counts: interrupts per counter per CPU. They live in the
//! device, not in an open file, so they survive close and reopen (docs/device.md §2).

/// One counter on one CPU: whole interrupts, and the events since the last one
/// (the raw hardware counter of the chip).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub interrupts: u64,
    pub residual: u64,
}

impl Tally {
    /// What the tally would be after `events` more, without changing it.
    pub fn with(self, events: u64, period: u64) -> Tally {
        let period = period.max(1);
        let total = self.residual as u128 + events as u128;
        Tally {
            interrupts: self
                .interrupts
                .saturating_add((total / period as u128) as u64),
            residual: (total % period as u128) as u64,
        }
    }

    /// The events this tally holds beyond `earlier`, both at `period`.
    pub fn events_since(self, earlier: Tally, period: u64) -> u64 {
        let total = |t: Tally| t.interrupts as u128 * period.max(1) as u128 + t.residual as u128;
        total(self).saturating_sub(total(earlier)) as u64
    }
}

pub const MAX_COUNTERS: usize = 3;

/// All counters of one CPU, and `pr_cycle`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTally {
    pub counters: [Tally; MAX_COUNTERS],
    /// Host cycle stamp of the read that first saw this CPU's latest interrupt
    /// (or of the last clear): our stand-in for the PCC read at interrupt time.
    pub pr_cycle: u64,
    /// Interrupt total when `pr_cycle` was stamped.
    pub stamped_interrupts: u64,
}

impl CpuTally {
    pub fn clear(&mut self, now_cycles: u64) {
        *self = CpuTally {
            pr_cycle: now_cycles,
            ..CpuTally::default()
        };
    }

    /// Moves `pr_cycle` to now when the interrupt total has grown since it was
    /// last stamped.
    pub fn stamp(&mut self, seen: &[Tally; MAX_COUNTERS], now_cycles: u64) {
        let total: u64 = seen.iter().map(|t| t.interrupts).sum();
        if total != self.stamped_interrupts {
            self.stamped_interrupts = total;
            self.pr_cycle = now_cycles;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupts_are_floor_of_events_over_period_with_remainder_kept() {
        let mut t = Tally::default().with(4095, 4096);
        assert_eq!(
            t,
            Tally {
                interrupts: 0,
                residual: 4095
            }
        );
        t = t.with(1, 4096);
        assert_eq!(
            t,
            Tally {
                interrupts: 1,
                residual: 0
            }
        );
        t = t.with(3 * 4096 + 7, 4096);
        assert_eq!(
            t,
            Tally {
                interrupts: 4,
                residual: 7
            }
        );
        assert_eq!(t.with(4089, 4096).interrupts, 5);
        assert_eq!(t.interrupts, 4, "with() leaves the tally alone");
    }

    #[test]
    fn pr_cycle_moves_only_when_interrupts_grow() {
        let mut cpu = CpuTally::default();
        cpu.clear(100);
        let mut seen = [Tally::default(); MAX_COUNTERS];
        cpu.stamp(&seen, 200);
        assert_eq!(cpu.pr_cycle, 100);
        seen[0].interrupts = 2;
        cpu.stamp(&seen, 300);
        assert_eq!(cpu.pr_cycle, 300);
        cpu.stamp(&seen, 400);
        assert_eq!(cpu.pr_cycle, 300);
    }
}
