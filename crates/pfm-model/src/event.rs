use super::HostEvent;
use std::fmt;

/// How faithfully the host reproduces an Alpha event (docs/device.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fidelity {
    /// Same meaning as on the chip.
    Exact,
    /// A documented formula over host events.
    Approximate,
    /// The host cannot count it: selecting it is `EOPNOTSUPP`.
    Unavailable,
}

impl Fidelity {
    /// The value `struct pfm_info` carries (`PFM_FIDELITY_*`).
    pub fn abi_code(self) -> u64 {
        match self {
            Self::Exact => 1,
            Self::Approximate => 2,
            Self::Unavailable => 3,
        }
    }
}

impl fmt::Display for Fidelity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Exact => "exact",
            Self::Approximate => "approximate",
            Self::Unavailable => "unavailable",
        })
    }
}

/// The factor a host event's count is multiplied by in a formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scale {
    Ratio {
        num: i64,
        den: i64,
    },
    /// Nanoseconds to cycles at the nominal clock (`--cpu-mhz`).
    NsToCycles,
}

impl Scale {
    pub const ONE: Scale = Scale::Ratio { num: 1, den: 1 };
    pub const HALF: Scale = Scale::Ratio { num: 1, den: 2 };
    pub const MINUS_HALF: Scale = Scale::Ratio { num: -1, den: 2 };
}

/// One host event with its factor; a candidate's value is the sum of its terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Term {
    pub event: HostEvent,
    pub scale: Scale,
}

impl Term {
    pub const fn new(event: HostEvent, scale: Scale) -> Self {
        Term { event, scale }
    }
    pub const fn one(event: HostEvent) -> Self {
        Term {
            event,
            scale: Scale::ONE,
        }
    }
}

/// One way to count an Alpha event on the host.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub terms: &'static [Term],
    pub fidelity: Fidelity,
    /// The formula in words, as `--list-events` and the log show it.
    pub formula: &'static str,
}

/// One Alpha event: its code in the model's mux field and its host candidates,
/// tried in order (docs/device.md §7).
#[derive(Debug)]
pub struct AlphaEvent {
    pub name: &'static str,
    pub code: u64,
    /// Which counter's mux selects it (0, 1 or 2).
    pub counter: u8,
    pub description: &'static str,
    pub candidates: &'static [Candidate],
    /// Why no host event fits, for events with no candidate at all.
    pub unavailable_because: &'static str,
}

/// Table-writing helpers: an exact or approximate candidate, a countable
/// event, an event with no host candidate.
pub const fn exact(terms: &'static [Term], formula: &'static str) -> Candidate {
    Candidate {
        terms,
        fidelity: Fidelity::Exact,
        formula,
    }
}

pub const fn approx(terms: &'static [Term], formula: &'static str) -> Candidate {
    Candidate {
        terms,
        fidelity: Fidelity::Approximate,
        formula,
    }
}

pub const fn event(
    name: &'static str,
    code: u64,
    counter: u8,
    description: &'static str,
    candidates: &'static [Candidate],
) -> AlphaEvent {
    AlphaEvent {
        name,
        code,
        counter,
        description,
        candidates,
        unavailable_because: "",
    }
}

pub const fn unavailable(
    name: &'static str,
    code: u64,
    counter: u8,
    description: &'static str,
    why: &'static str,
) -> AlphaEvent {
    AlphaEvent {
        name,
        code,
        counter,
        description,
        candidates: &[],
        unavailable_because: why,
    }
}

/// Sum of `terms` over the counts `value_of` gives, in the event's own unit.
/// `khz` is the nominal clock for `Scale::NsToCycles`. Clamped at 0: a
/// difference formula over counts read together can dip below zero by rounding.
pub fn evaluate(terms: &[Term], khz: u64, mut value_of: impl FnMut(&HostEvent) -> u64) -> u64 {
    let mut total: i128 = 0;
    for term in terms {
        let v = value_of(&term.event) as i128;
        total += match term.scale {
            Scale::Ratio { num, den } => v * num as i128 / den.max(1) as i128,
            Scale::NsToCycles => v * khz as i128 / 1_000_000,
        };
    }
    total.clamp(0, u64::MAX as i128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluate_difference_and_clock_scaling() {
        let terms = [
            Term::one(HostEvent::Cycles),
            Term::new(HostEvent::Instructions, Scale::MINUS_HALF),
        ];
        let v = evaluate(&terms, 0, |e| match e {
            HostEvent::Cycles => 1000,
            HostEvent::Instructions => 600,
            _ => 0,
        });
        assert_eq!(v, 700);
        let clock = [Term::new(HostEvent::CpuClock, Scale::NsToCycles)];
        // 1 ms at 2.5 GHz is 2.5 million cycles.
        assert_eq!(evaluate(&clock, 2_500_000, |_| 1_000_000), 2_500_000);
        // A difference that rounds below zero is clamped, never wrapped.
        assert_eq!(
            evaluate(&terms, 0, |e| if *e == HostEvent::Cycles { 0 } else { 10 }),
            0
        );
    }
}
