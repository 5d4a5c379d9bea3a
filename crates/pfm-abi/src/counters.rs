//! The per-counter operations the EV5 and EV6 families share (`PCNT5*`,
//! `PCNT6*`): the same requests with different counter counts and a
//! different packing of the `pmctrs` union. Decoding them into one shape
//! lets the daemon serve both families on one path.

use crate::Family;
use crate::structs::{PmctrsEv5, PmctrsEv6};

bitflags::bitflags! {
    /// Counter-select bits (`PF5_SEL_COUNTER_n`, `PF6_SEL_COUNTER_n`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct CounterMask: u64 {
        const COUNTER_0 = 1;
        const COUNTER_1 = 2;
        const COUNTER_2 = 4;
    }
}

impl CounterMask {
    /// The counters `family` has.
    pub fn all_of(family: Family) -> CounterMask {
        match family {
            Family::Ev5 => CounterMask::all(),
            Family::Ev4 | Family::Ev6 => CounterMask::COUNTER_0 | CounterMask::COUNTER_1,
        }
    }

    /// The select bits of `word` that name counters of `family`; the rest of
    /// the word is ignored, as the chip ignored it.
    pub fn from_word(family: Family, word: u64) -> CounterMask {
        CounterMask::from_bits_truncate(word) & CounterMask::all_of(family)
    }

    pub fn contains_counter(self, counter: usize) -> bool {
        counter < 3 && self.bits() & (1 << counter) != 0
    }
}

/// A `pmctrs_ev5` / `pmctrs_ev6` union, unpacked: which counters, which CPU
/// (`PMCTRS_ALL_CPUS` is every CPU of the open), and the raw values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawCounters {
    pub select: CounterMask,
    pub cpu: u64,
    pub values: [u64; 3],
}

impl RawCounters {
    pub fn unpack(family: Family, word: u64) -> RawCounters {
        match family {
            Family::Ev5 => {
                let u = PmctrsEv5(word);
                RawCounters {
                    select: CounterMask::from_word(family, u.select()),
                    cpu: u.cpu(),
                    values: [u.cntr0(), u.cntr1(), u.cntr2()],
                }
            }
            Family::Ev4 | Family::Ev6 => {
                let u = PmctrsEv6(word);
                RawCounters {
                    select: CounterMask::from_word(family, u.select()),
                    cpu: u.cpu(),
                    values: [u.cntr0(), u.cntr1(), 0],
                }
            }
        }
    }

    /// Packs the union again (the `*GETCNTRS` reply), values truncated to
    /// the counter widths as the bit-fields truncate them.
    pub fn pack(&self, family: Family) -> u64 {
        let [c0, c1, c2] = self.values;
        match family {
            Family::Ev5 => PmctrsEv5::new(self.select.bits(), self.cpu, c0, c1, c2).0,
            Family::Ev4 | Family::Ev6 => PmctrsEv6::new(self.select.bits(), self.cpu, c0, c1).0,
        }
    }
}

/// One per-counter operation of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterOp {
    /// `PCNT?DISABLE`: turn the selected counters off.
    Disable(CounterMask),
    /// `PCNT?ENABLE`: turn them on and start counting.
    Enable(CounterMask),
    /// `PCNT?RESTART`: zero them, turn them on and start counting.
    Restart(CounterMask),
    /// `PCNT?CLEAR`: zero them.
    Clear(CounterMask),
    /// `PCNT?SETCNTRS`: write the raw counters.
    SetCounters(RawCounters),
    /// `PCNT6ENABWRITE`: write, then enable and start counting.
    EnableWrite(RawCounters),
    /// `PCNT?GETCNTRS`: read one CPU's raw counters into the same union.
    GetCounters(RawCounters),
    /// `PCNTGETCNT`, `PCNT?GETCNT`: the interrupt counts, stored at `addr`.
    GetCounts { addr: u64 },
    /// `PCNT?READCNTRS`: `(interrupts << width) + raw`, stored at `addr`.
    ReadCounts { addr: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmctrs_unpack_and_pack_round_trip_per_family() {
        let ev5 = PmctrsEv5::new(5, 0xff, 0xabcd, 0x1234, 0x3fff).0;
        let raw = RawCounters::unpack(Family::Ev5, ev5);
        assert_eq!(raw.select, CounterMask::COUNTER_0 | CounterMask::COUNTER_2);
        assert_eq!((raw.cpu, raw.values), (0xff, [0xabcd, 0x1234, 0x3fff]));
        assert_eq!(raw.pack(Family::Ev5), ev5);
        let ev6 = PmctrsEv6::new(3, 7, 0xfffff, 0x12345).0;
        let raw = RawCounters::unpack(Family::Ev6, ev6);
        assert_eq!((raw.cpu, raw.values), (7, [0xfffff, 0x12345, 0]));
        assert_eq!(raw.pack(Family::Ev6), ev6);
    }

    #[test]
    fn masks_keep_only_the_family_counters() {
        assert_eq!(CounterMask::from_word(Family::Ev6, 7).bits(), 3);
        assert_eq!(CounterMask::from_word(Family::Ev5, 0xff).bits(), 7);
        assert!(CounterMask::COUNTER_1.contains_counter(1));
        assert!(!CounterMask::COUNTER_1.contains_counter(0));
    }
}
