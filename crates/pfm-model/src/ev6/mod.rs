//! The EV6 (21264) and EV67 (21264A) models: two 20-bit counters selected by
//! the `PCNT6MUX` word, one period of 2^20 events (docs/device.md §5.3), EV67's
//! aggregate pairs and profile-me mode (§5.4). This module validates and
//! decodes; the device applies (`device/ev6_ioctl.rs`).

pub(crate) mod costs;
mod events;
pub mod profile_me;
pub(crate) mod tools;

pub use events::{
    EV6_EVENTS, EV6_MUX0_EVENTS, EV6_MUX1_EVENTS, EV67_EVENTS, EV67_MUX0_EVENTS, EV67_MUX1_EVENTS,
};

use crate::ModelError;
use crate::{AlphaEvent, CounterSetting, Implementation};

/// Counter widths in bits (`PF6_C0_WIDTH`, `PF6_C1_WIDTH`).
pub const WIDTHS: [u32; 2] = [20, 20];
/// The one period: `PF6_Cn_INT_EVERY_1048576`.
pub const PERIOD: u64 = 1 << 20;
pub const PERIODS: [u64; 2] = [PERIOD, PERIOD];

pub const PF6_SEL_COUNTER_0: u64 = 1;
pub const PF6_SEL_COUNTER_1: u64 = 2;
pub const SELECT_MASK: u64 = 3;

/// `PF67_PROFILE_ME_MODE`.
pub const PF67_PROFILE_ME_MODE: u64 = 0x10;

/// One `PCNT6MUX` word an EV67 accepts: the aggregate pairs of the seed
/// ("any one statistic may be selected, or one of the following pairs") and
/// profile-me mode.
#[derive(Debug)]
pub struct Ev67Pair {
    pub name: &'static str,
    pub code: u64,
    /// The `code` of the counter-0 and counter-1 events in
    /// `EV67_MUX0_EVENTS` / `EV67_MUX1_EVENTS`.
    pub events: [u64; 2],
    /// False where the counter counts nothing usable in this pair; such a
    /// counter stays off and is never resolved against the host.
    pub counts: [bool; 2],
    pub profile_me: bool,
}

pub static EV67_PAIRS: &[Ev67Pair] = &[
    Ev67Pair {
        name: "PF67_RET_INST_AND_CYCLES",
        code: 0x00,
        events: [0x00, 0x00],
        counts: [true, true],
        profile_me: false,
    },
    Ev67Pair {
        name: "PF67_CYCLES_AND_UNDEFINED",
        code: 0x04,
        events: [0x04, 0x04],
        counts: [true, false],
        profile_me: false,
    },
    Ev67Pair {
        name: "PF67_RET_INST_AND_BCACHE_MISS",
        code: 0x08,
        events: [0x00, 0x08],
        counts: [true, true],
        profile_me: false,
    },
    Ev67Pair {
        name: "PF67_CYCLES_AND_REPLAY_TRAPS",
        code: 0x0C,
        events: [0x04, 0x0C],
        counts: [true, true],
        profile_me: false,
    },
    Ev67Pair {
        name: "PF67_PROFILE_ME_MODE|PF67_CYCLES_AND_RET_DELAY",
        code: PF67_PROFILE_ME_MODE | 0x04,
        events: [0x04, 0x14],
        counts: [true, false],
        profile_me: true,
    },
    Ev67Pair {
        name: "PF67_PROFILE_ME_MODE",
        code: PF67_PROFILE_ME_MODE,
        events: [0x04, 0x14],
        counts: [true, false],
        profile_me: true,
    },
];

impl Ev67Pair {
    pub fn event(&self, counter: usize) -> &'static AlphaEvent {
        let table = if counter == 0 {
            EV67_MUX0_EVENTS
        } else {
            EV67_MUX1_EVENTS
        };
        table
            .iter()
            .find(|e| e.code == self.events[counter])
            .expect("every pair names events of the EV67 tables")
    }
}

/// A validated `PCNT6MUX` word.
#[derive(Debug, Clone, Copy)]
pub struct Ev6Selection {
    pub counters: [CounterSetting; 2],
    /// EV67 profile-me mode (`PF67_PROFILE_ME_MODE`).
    pub profile_me: bool,
}

fn lookup(
    table: &'static [AlphaEvent],
    code: u64,
    counter: u8,
) -> Result<&'static AlphaEvent, ModelError> {
    table.iter().find(|e| e.code == code).ok_or_else(|| {
        ModelError::invalid(format!(
            "PCNT6MUX counter {counter} code {code:#x} is not an EV6 event"
        ))
    })
}

/// Decodes a `PCNT6MUX` word. EV6: one `PF6_MUX0_*` (0x00 or 0x10) OR one
/// `PF6_MUX1_*` (0..7); any other bit is `EINVAL`. EV67: one of
/// [`EV67_PAIRS`], any other value `EINVAL` (docs/device.md §5.4).
pub fn decode_mux(word: u64, implementation: Implementation) -> Result<Ev6Selection, ModelError> {
    let setting = |event, enabled| CounterSetting {
        event,
        period: PERIOD,
        enabled,
    };
    match implementation {
        Implementation::Ev6 => {
            if word & !0x1F != 0 || word & 0xF > 7 {
                return Err(ModelError::invalid(format!(
                    "PCNT6MUX {word:#x} is not one PF6_MUX0_* OR one PF6_MUX1_*"
                )));
            }
            Ok(Ev6Selection {
                counters: [
                    setting(lookup(EV6_MUX0_EVENTS, word & 0x10, 0)?, true),
                    setting(lookup(EV6_MUX1_EVENTS, word & 0xF, 1)?, true),
                ],
                profile_me: false,
            })
        }
        Implementation::Ev67 => {
            let pair = EV67_PAIRS.iter().find(|p| p.code == word).ok_or_else(|| {
                ModelError::invalid(format!(
                    "PCNT6MUX {word:#x}: the EV67 counts only the pairs {}",
                    EV67_PAIRS
                        .iter()
                        .map(|p| format!("{} ({:#x})", p.name, p.code))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            Ok(Ev6Selection {
                counters: [
                    setting(pair.event(0), pair.counts[0]),
                    setting(pair.event(1), pair.counts[1]),
                ],
                profile_me: pair.profile_me,
            })
        }
        other => Err(ModelError::invalid(format!(
            "{other} is not an EV6-family implementation"
        ))),
    }
}

/// The counters a select word names (`PF6_SEL_COUNTER_n`).
pub fn selected(word: u64) -> [bool; 2] {
    [word & PF6_SEL_COUNTER_0 != 0, word & PF6_SEL_COUNTER_1 != 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ev6_decodes_one_event_per_counter() {
        let s = decode_mux(0x10 | 0x1, Implementation::Ev6).unwrap();
        assert_eq!(s.counters[0].event.name, "PF6_MUX0_RET_INSTRUCTIONS");
        assert_eq!(s.counters[1].event.name, "PF6_MUX1_RET_COND_BRANCHES");
        assert_eq!(s.counters.map(|c| c.period), [1 << 20, 1 << 20]);
        assert!(s.counters.iter().all(|c| c.enabled));
        for e in EV6_MUX0_EVENTS.iter().chain(EV6_MUX1_EVENTS) {
            let got =
                decode_mux(e.code, Implementation::Ev6).unwrap().counters[e.counter as usize].event;
            assert_eq!(got.name, e.name);
        }
    }

    #[test]
    fn ev6_branch_mispredicts_counts_cycles_as_the_chip_did() {
        let s = decode_mux(0x2, Implementation::Ev6).unwrap();
        let e = s.counters[1].event;
        assert_eq!(e.name, "PF6_MUX1_RET_BRANCH_MISPREDICTS");
        let formulas = |c: &[crate::Candidate]| c.iter().map(|c| c.formula).collect::<Vec<_>>();
        assert_eq!(formulas(e.candidates), formulas(crate::ev4::CYCLES));
    }

    #[test]
    fn ev6_rejects_undefined_codes() {
        for bad in [0x8, 0xF, 0x20, 0x14 | 1 << 40] {
            assert!(
                decode_mux(bad, Implementation::Ev6)
                    .unwrap_err()
                    .is_invalid(),
                "{bad:#x}"
            );
        }
    }

    #[test]
    fn ev67_accepts_only_its_pairs() {
        let s = decode_mux(0x08, Implementation::Ev67).unwrap();
        assert_eq!(
            s.counters.map(|c| c.event.name),
            ["PF67_C0_RET_INST", "PF67_C1_BCACHE_MISS"]
        );
        let s = decode_mux(0x04, Implementation::Ev67).unwrap();
        assert_eq!(s.counters[0].event.name, "PF67_C0_CYCLES");
        assert!(!s.counters[1].enabled, "counter 1 undefined: off");
        let s = decode_mux(0x14, Implementation::Ev67).unwrap();
        assert!(s.profile_me && s.counters[0].enabled && !s.counters[1].enabled);
        assert!(decode_mux(0x10, Implementation::Ev67).unwrap().profile_me);
        for bad in [0x01, 0x02, 0x05, 0x11, 0x18, 0x1C, 0x20] {
            assert!(
                decode_mux(bad, Implementation::Ev67)
                    .unwrap_err()
                    .is_invalid(),
                "{bad:#x}"
            );
        }
    }

    #[test]
    fn every_ev67_event_is_in_a_pair_and_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for (counter, table) in EV67_EVENTS.iter().enumerate() {
            for e in table.iter() {
                assert!(names.insert(e.name));
                assert!(
                    EV67_PAIRS.iter().any(|p| std::ptr::eq(p.event(counter), e)),
                    "{} is in no pair",
                    e.name
                );
            }
        }
    }
}
