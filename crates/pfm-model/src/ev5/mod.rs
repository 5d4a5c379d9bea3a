//! The EV5 model (21164, 21164A/EV56, 21164PC/PCA56): three counters
//! selected by the `PCNT5MUX` word, periods by `PCNT5FREQ`, counting contexts
//! by `PCNT5CTXTS` (docs/device.md §5.2). This module validates and decodes those
//! words; the device applies them (`device/ev5_ioctl.rs`).

pub(crate) mod costs;
mod events;
pub(crate) mod tools;

pub use events::{
    EV5_EVENTS, MUX0_EVENTS, MUX1_EVENTS, MUX1_PCA56_EVENTS, MUX1_SCACHE_EVENTS, MUX2_EVENTS,
    MUX2_PCA56_EVENTS, MUX2_SCACHE_EVENTS, PCA56_EVENTS,
};

use crate::ModelError;
use crate::{AlphaEvent, CounterSetting, Implementation};

/// Counter widths in bits (`PF5_C0_WIDTH` …): `PCNT5READCNTRS` returns
/// `(interrupts << width) + raw counter`.
pub const WIDTHS: [u32; 3] = [16, 16, 14];

/// Periods until the first `PCNT5FREQ`: the lower frequencies, which need no
/// privilege (`PF5_C0_INT_EVERY_65536 | PF5_C1_INT_EVERY_65536 |
/// PF5_C2_INT_EVERY_16384`, as the seed advises).
pub const DEFAULT_PERIODS: [u64; 3] = [65536, 65536, 16384];

pub const PF5_SEL_COUNTER_0: u64 = 1;
pub const PF5_SEL_COUNTER_1: u64 = 2;
pub const PF5_SEL_COUNTER_2: u64 = 4;
/// The select bits of the `PCNT5DISABLE/ENABLE/CLEAR/RESTART/SETCNTRS` words.
pub const SELECT_MASK: u64 = 7;

/// `PCNT5MUX` fields (docs/device.md §5.2). Bits outside them are ignored, as the
/// original driver masked them.
const MUX0_MASK: u64 = 1 << 31;
const MUX1_BASE_MASK: u64 = 0xF0;
const MUX1_CBOX: u64 = 0xF0;
const MUX1_CBOX_MASK: u64 = 7 << 51;
const MUX2_BASE_MASK: u64 = 0xF;
const MUX2_CBOX: u64 = 0xF;
const MUX2_CBOX_MASK: u64 = 7 << 54;

/// `PCNT5CTXTS` process filters (low two bits) and mode bits.
pub const PF5_CTXT_ALL_PROC: u64 = 0;
pub const PF5_CTXT_SEL_PROC: u64 = 1;
pub const PF5_CTXT_PME_THIS: u64 = 2;
pub const PF5_CTXT_THIS_PROC: u64 = 3;
pub const PF5_CTXT_NO_KERNEL: u64 = 0x100;
pub const PF5_CTXT_NO_PAL: u64 = 0x200;
pub const PF5_CTXT_NO_USER: u64 = 0x4000_0000;
pub const PF5_CTXT_USER: u64 = 0x300;
pub const PF5_CTXT_KERNEL: u64 = 0x4000_0200;
pub const PF5_CTXT_EXEC_AND_SUPER: u64 = 0x4000_0300;

/// Which Cbox tables an implementation has.
fn cbox_tables(
    implementation: Implementation,
) -> Result<(&'static [AlphaEvent], &'static [AlphaEvent]), ModelError> {
    match implementation {
        Implementation::Ev5 | Implementation::Ev56 => Ok((MUX1_SCACHE_EVENTS, MUX2_SCACHE_EVENTS)),
        Implementation::Pca56 => Ok((MUX1_PCA56_EVENTS, MUX2_PCA56_EVENTS)),
        other => Err(ModelError::invalid(format!(
            "{other} is not an EV5-family implementation"
        ))),
    }
}

/// The events of the three counters a `PCNT5MUX` word selects.
#[derive(Debug, Clone, Copy)]
pub struct Ev5Mux {
    pub events: [&'static AlphaEvent; 3],
}

fn find(
    tables: &[&'static [AlphaEvent]],
    code: u64,
    counter: u8,
    implementation: Implementation,
) -> Result<&'static AlphaEvent, ModelError> {
    tables
        .iter()
        .flat_map(|t| t.iter())
        .find(|e| e.code == code)
        .ok_or_else(|| {
            ModelError::invalid(format!(
                "PCNT5MUX counter {counter} code {code:#x} is not an event of the {implementation} ({})",
                implementation.chip()
            ))
        })
}

/// Decodes a `PCNT5MUX` word for `implementation`. Counter 1's bits 51..53
/// and counter 2's bits 54..56 only count when the base field selects the
/// Cbox (0xF0 / 0xF); an undefined code is `EINVAL`.
pub fn decode_mux(word: u64, implementation: Implementation) -> Result<Ev5Mux, ModelError> {
    let (cbox1, cbox2) = cbox_tables(implementation)?;
    let mux0 = word & MUX0_MASK;
    let mut mux1 = word & MUX1_BASE_MASK;
    if mux1 == MUX1_CBOX {
        mux1 |= word & MUX1_CBOX_MASK;
    }
    let mut mux2 = word & MUX2_BASE_MASK;
    if mux2 == MUX2_CBOX {
        mux2 |= word & MUX2_CBOX_MASK;
    }
    Ok(Ev5Mux {
        events: [
            find(&[MUX0_EVENTS], mux0, 0, implementation)?,
            find(&[MUX1_EVENTS, cbox1], mux1, 1, implementation)?,
            find(&[MUX2_EVENTS, cbox2], mux2, 2, implementation)?,
        ],
    })
}

impl Ev5Mux {
    /// The counter settings with `periods` (from `PCNT5FREQ`).
    pub fn settings(&self, periods: [u64; 3]) -> [CounterSetting; 3] {
        [0, 1, 2].map(|i| CounterSetting {
            event: self.events[i],
            period: periods[i],
            enabled: true,
        })
    }
}

/// Where each counter's two-bit `PCNT5FREQ` field starts.
const FREQ_FIELD_SHIFTS: [u32; 3] = [8, 6, 4];

/// The `PCNT5FREQ` field of `counter` (`PF5_Cn_INT_EVERY_*`): every 256
/// events (3), else its low frequency (2); other counters' fields 0.
pub fn freq_field(counter: usize, every_256: bool) -> u64 {
    let value = if every_256 { 3 } else { 2 };
    value << FREQ_FIELD_SHIFTS[counter]
}

/// A `PCNT5FREQ` word: the period of each counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ev5Freq {
    pub periods: [u64; 3],
}

impl Ev5Freq {
    /// True when a counter asks for a 256 period, which needs privilege.
    pub fn wants_256(&self) -> bool {
        self.periods.contains(&256)
    }
}

/// Decodes `PCNT5FREQ` as the Tru64 driver did: each counter has a
/// two-bit field (bits 8..9, 6..7, 4..5) whose low bit asks for an
/// interrupt every 256 events; otherwise the counter gets its low frequency
/// (65536, 65536, 16384). The driver forced each field's high bit and
/// passed nothing else to the chip, so every word sets all three periods, a
/// field of 0 means the low frequency, and other bits are ignored.
pub fn decode_freq(word: u64) -> Ev5Freq {
    let mut periods = DEFAULT_PERIODS;
    for (period, shift) in periods.iter_mut().zip(FREQ_FIELD_SHIFTS) {
        if (word >> shift) & 1 != 0 {
            *period = 256;
        }
    }
    Ev5Freq { periods }
}

/// Whose threads `PCNT5CTXTS` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessFilter {
    /// `PF5_CTXT_ALL_PROC`: every process (as `PCNTLOGALL`).
    AllProcesses,
    /// `PF5_CTXT_SEL_PROC`: only threads with the PME bit (as `PCNTLOGSELECT`
    /// without setting the bit).
    PmeSelected,
    /// `PF5_CTXT_PME_THIS`: set the calling thread's PME bit; whose threads
    /// count is left as it was.
    SetPmeThis,
    /// `PF5_CTXT_THIS_PROC`: set the PME bit of the calling thread and count
    /// only PME threads (exactly `PCNTLOGSELECT`).
    ThisProcess,
}

/// The processor modes `PCNT5CTXTS` counts in. The Alpha's kernel, executive
/// and supervisor modes are all the host's kernel mode; PALmode is the
/// closest the host has to it, the hypervisor bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    pub user: bool,
    pub kernel: bool,
    pub pal: bool,
}

impl Modes {
    pub const ALL: Modes = Modes {
        user: true,
        kernel: true,
        pal: true,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contexts {
    pub process: ProcessFilter,
    pub modes: Modes,
}

/// Decodes `PCNT5CTXTS`. `NO_USER`, `NO_KERNEL` and `NO_PAL` exclude user,
/// kernel and PAL mode, except that all three together
/// (`PF5_CTXT_EXEC_AND_SUPER`) mean user mode: Digital UNIX user code runs
/// in the chip's executive mode, so that was "user only" on real hardware
/// (docs/device.md, Appendix A). Other bits are ignored: the Tru64 driver
/// passed only these to the chip.
pub fn decode_contexts(word: u64) -> Contexts {
    let process = match word & 3 {
        PF5_CTXT_ALL_PROC => ProcessFilter::AllProcesses,
        PF5_CTXT_SEL_PROC => ProcessFilter::PmeSelected,
        PF5_CTXT_PME_THIS => ProcessFilter::SetPmeThis,
        _ => ProcessFilter::ThisProcess,
    };
    let modes = if word & PF5_CTXT_EXEC_AND_SUPER == PF5_CTXT_EXEC_AND_SUPER {
        Modes {
            user: true,
            kernel: false,
            pal: false,
        }
    } else {
        Modes {
            user: word & PF5_CTXT_NO_USER == 0,
            kernel: word & PF5_CTXT_NO_KERNEL == 0,
            pal: word & PF5_CTXT_NO_PAL == 0,
        }
    };
    Contexts { process, modes }
}

/// The counters a select word names (`PF5_SEL_COUNTER_n`), as indices.
pub fn selected(word: u64) -> [bool; 3] {
    [0, 1, 2].map(|i| word & (1 << i) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MUX1_C_SCACHE_READ: u64 = 0x8_0000_0000_00F0;
    const MUX1_C_BCACHE_VICTIM: u64 = 0x30_0000_0000_00F0;
    const MUX2_C_BCACHE_MISS: u64 = 0x140_0000_0000_000F;

    #[test]
    fn decodes_the_three_fields() {
        let m = decode_mux(0x8000_0000 | 0x80 | 0xC, Implementation::Ev5).unwrap();
        let names = m.events.map(|e| e.name);
        assert_eq!(
            names,
            [
                "PF5_MUX0_ISSUES",
                "PF5_MUX1_FLOW_CHANGE",
                "PF5_MUX2_C_CYCLES"
            ]
        );
        let m = decode_mux(0, Implementation::Ev56).unwrap();
        assert_eq!(
            m.events.map(|e| e.name),
            [
                "PF5_MUX0_CYCLES",
                "PF5_MUX1_NON_ISSUE_CYCLES",
                "PF5_MUX2_C_LONG_STALLS"
            ]
        );
    }

    #[test]
    fn cbox_events_depend_on_the_implementation() {
        let word = MUX1_C_SCACHE_READ | MUX2_C_BCACHE_MISS;
        let ev5 = decode_mux(word, Implementation::Ev5).unwrap();
        assert_eq!(ev5.events[1].name, "PF5_MUX1_C_SCACHE_READ");
        assert_eq!(ev5.events[2].name, "PF5_MUX2_C_BCACHE_MISS");
        let pca = decode_mux(word, Implementation::Pca56).unwrap();
        assert_eq!(pca.events[1].name, "PF5_MUX1_C_BCACHE_DREAD_HIT");
        assert_eq!(pca.events[2].name, "PF5_MUX2_C_SYS_READ_FLUSH_HIT");
        for model in [Implementation::Ev5, Implementation::Pca56] {
            assert_eq!(
                decode_mux(MUX1_C_BCACHE_VICTIM, model).unwrap().events[1].name,
                "PF5_MUX1_C_BCACHE_VICTIM",
                "shared by both Cbox tables"
            );
        }
    }

    #[test]
    fn cbox_bits_only_count_with_the_cbox_base_and_other_bits_are_ignored() {
        // Bits 51..56 with a non-Cbox base select nothing extra.
        let m = decode_mux(0x3F << 51 | 0x80 | 0x3, Implementation::Ev5).unwrap();
        assert_eq!(m.events[1].name, "PF5_MUX1_FLOW_CHANGE");
        assert_eq!(m.events[2].name, "PF5_MUX2_C_BRANCH_MISPREDICTS");
        // Bits outside 0..7, 31, 51..56 are ignored.
        let noise = (1 << 8) | (1 << 30) | (1 << 40) | (1 << 63);
        let m = decode_mux(noise | 0x8000_0000, Implementation::Pca56).unwrap();
        assert_eq!(m.events[0].name, "PF5_MUX0_ISSUES");
    }

    #[test]
    fn undefined_codes_are_einval() {
        let einval = |w: u64| decode_mux(w, Implementation::Ev5).unwrap_err().is_invalid();
        assert!(einval(0x1), "counter 2 code 1 is undefined");
        assert!(einval(0xF0 | 4 << 51), "counter 1 Cbox code 4 is undefined");
        assert!(
            decode_mux(0, Implementation::Ev6).is_err(),
            "not an EV5 implementation"
        );
    }

    #[test]
    fn every_code_in_the_tables_decodes_back_to_itself() {
        for (model, tables) in [
            (Implementation::Ev5, &EV5_EVENTS),
            (Implementation::Pca56, &PCA56_EVENTS),
        ] {
            let mut names = std::collections::HashSet::new();
            for e in tables.iter().flat_map(|t| t.iter()) {
                assert!(names.insert(e.name), "{} twice", e.name);
                assert!(e.candidates.is_empty() != e.unavailable_because.is_empty());
                let got = decode_mux(e.code, model).unwrap().events[e.counter as usize];
                assert_eq!(got.name, e.name);
            }
            assert_eq!(names.len(), 2 + 16 + 6 + 14 + 8);
        }
    }

    #[test]
    fn freq_fields() {
        let f = decode_freq(0x200 | 0x80 | 0x20);
        assert_eq!(f.periods, [65536, 65536, 16384]);
        assert!(!f.wants_256());
        let f = decode_freq(0x300 | 0x30);
        assert_eq!(
            f.periods,
            [256, 65536, 256],
            "a field of 0 is the low frequency"
        );
        assert!(f.wants_256());
        // The driver forced each field's high bit and masked the rest.
        assert_eq!(decode_freq(0x100).periods, [256, 65536, 16384]);
        assert_eq!(decode_freq(0).periods, [65536, 65536, 16384]);
        assert_eq!(
            decode_freq(0x1000 | 0x40 | 0x1).periods,
            [65536, 256, 16384]
        );
        assert_eq!(
            [
                freq_field(0, true),
                freq_field(1, false),
                freq_field(2, true)
            ],
            [0x300, 0x80, 0x30],
            "PF5_C0_INT_EVERY_256, PF5_C1_INT_EVERY_65536, PF5_C2_INT_EVERY_256"
        );
        assert_eq!(
            decode_freq(freq_field(1, true)).periods,
            [65536, 256, 16384]
        );
    }

    #[test]
    fn contexts() {
        let c = decode_contexts(PF5_CTXT_USER | PF5_CTXT_THIS_PROC);
        assert_eq!(c.process, ProcessFilter::ThisProcess);
        assert_eq!(
            c.modes,
            Modes {
                user: true,
                kernel: false,
                pal: false
            }
        );
        assert_eq!(
            decode_contexts(PF5_CTXT_EXEC_AND_SUPER).modes,
            decode_contexts(PF5_CTXT_USER).modes,
            "EXEC_AND_SUPER is user mode"
        );
        let k = decode_contexts(PF5_CTXT_KERNEL | PF5_CTXT_SEL_PROC);
        assert_eq!(k.process, ProcessFilter::PmeSelected);
        assert_eq!(
            k.modes,
            Modes {
                user: false,
                kernel: true,
                pal: false
            }
        );
        assert_eq!(decode_contexts(0).modes, Modes::ALL);
        assert_eq!(
            decode_contexts(PF5_CTXT_PME_THIS).process,
            ProcessFilter::SetPmeThis
        );
        assert_eq!(
            decode_contexts(0x4000_0100).modes,
            Modes {
                user: false,
                kernel: false,
                pal: true
            },
            "PF5_CTXT_PAL"
        );
        // Bits the driver did not pass to the chip are ignored.
        assert_eq!(decode_contexts(1 << 12 | 2), decode_contexts(2));
    }
}
