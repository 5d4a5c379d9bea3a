//! The EV4 model (21064, 21064A, 21066, 21068): two counters selected by the
//! ICCSR image `PCNTSETMUX` takes (docs/device.md §5.1).

pub(crate) mod costs;
mod events;
pub(crate) mod tools;

/// The cycle-counter candidates every family shares (EV5 and EV6 reuse them).
pub(crate) use events::CYCLES;
pub use events::{EVENTS, MUX0_EVENTS, MUX1_EVENTS};

use crate::ModelError;
use crate::{AlphaEvent, CounterSetting};
use pfm_abi::Iccsr;

/// Counter widths in bits: counter 0 interrupts at most every 2^16 events,
/// counter 1 every 2^12.
pub const WIDTHS: [u32; 2] = [16, 12];

pub const PF_C0_INT_EVERY_65536: u64 = 0;
pub const PF_C0_INT_EVERY_4096: u64 = 1;
pub const PF_C1_INT_EVERY_4096: u64 = 0;
pub const PF_C1_INT_EVERY_256: u64 = 1;

/// A validated `PCNTSETMUX` word: each counter's event, period and whether the
/// `iccsr_disable` bits leave it on.
#[derive(Debug, Clone, Copy)]
pub struct Ev4Selection {
    pub counters: [CounterSetting; 2],
}

fn lookup(
    table: &'static [AlphaEvent],
    code: u64,
    counter: u8,
) -> Result<&'static AlphaEvent, ModelError> {
    table.iter().find(|e| e.code == code).ok_or_else(|| {
        ModelError::invalid(format!(
            "iccsr_mux{counter} = {code:#x} is not an EV4 event"
        ))
    })
}

/// Validates an ICCSR image (docs/device.md §5.1): `iccsr_disable == 3`, nonzero
/// ign fields and unknown mux codes are `EINVAL`.
pub fn decode(iccsr: Iccsr) -> Result<Ev4Selection, ModelError> {
    if iccsr.disable() == 3 {
        return Err(ModelError::invalid(
            "iccsr_disable == 3 would disable both counters",
        ));
    }
    if iccsr.ign0() | iccsr.ign1() | iccsr.ign2() | iccsr.ign3() != 0 {
        return Err(ModelError::invalid(format!(
            "iccsr {:#x} has bits set in the ign fields",
            iccsr.0
        )));
    }
    let mux0 = lookup(MUX0_EVENTS, iccsr.mux0(), 0)?;
    let mux1 = lookup(MUX1_EVENTS, iccsr.mux1(), 1)?;
    let period0 = if iccsr.pc0() == PF_C0_INT_EVERY_4096 {
        4096
    } else {
        65536
    };
    let period1 = if iccsr.pc1() == PF_C1_INT_EVERY_256 {
        256
    } else {
        4096
    };
    Ok(Ev4Selection {
        counters: [
            CounterSetting {
                event: mux0,
                period: period0,
                enabled: iccsr.disable() & 1 == 0,
            },
            CounterSetting {
                event: mux1,
                period: period1,
                enabled: iccsr.disable() & 2 == 0,
            },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_events_periods_and_disable_bits() {
        let s = decode(Iccsr::new(0xa, 0x3, 1, 1, 2)).unwrap();
        assert_eq!(s.counters[0].event.name, "PF_CYCLES");
        assert_eq!(s.counters[0].period, 4096);
        assert!(s.counters[0].enabled);
        assert_eq!(s.counters[1].event.name, "PF_BRANCHMISS");
        assert_eq!(s.counters[1].period, 256);
        assert!(!s.counters[1].enabled, "disable = 2 turns counter 1 off");
        let s = decode(Iccsr::new(0x0, 0x0, 0, 0, 1)).unwrap();
        assert_eq!((s.counters[0].period, s.counters[1].period), (65536, 4096));
        assert!(!s.counters[0].enabled && s.counters[1].enabled);
    }

    #[test]
    fn rejects_what_the_chip_rejects() {
        let einval = |w: Iccsr| decode(w).unwrap_err().is_invalid();
        assert!(einval(Iccsr::new(0xa, 0, 0, 0, 3)), "disable == 3");
        for bit in [1, 2, 4, 5, 6, 7, 12, 31, 37, 63] {
            assert!(
                einval(Iccsr(Iccsr::new(0xa, 0, 0, 0, 0).0 | 1 << bit)),
                "ign bit {bit}"
            );
        }
        for bad_mux0 in [0x1, 0x3, 0x5, 0x7, 0x9, 0xd, 0xf] {
            assert!(
                einval(Iccsr::new(bad_mux0, 0, 0, 0, 0)),
                "mux0 {bad_mux0:#x}"
            );
        }
    }

    #[test]
    fn every_code_in_the_table_decodes() {
        for e in MUX0_EVENTS {
            assert_eq!(
                decode(Iccsr::new(e.code, 0, 0, 0, 0)).unwrap().counters[0]
                    .event
                    .name,
                e.name
            );
        }
        for e in MUX1_EVENTS {
            assert_eq!(
                decode(Iccsr::new(0, e.code, 0, 0, 0)).unwrap().counters[1]
                    .event
                    .name,
                e.name
            );
        }
    }
}
