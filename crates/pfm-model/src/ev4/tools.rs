//! What the tools show of the EV4 family by default: aliases, the events
//! counted without `-e`, the cycle events and the derived statistics.

use crate::derived::{Count, Derivation, MFLOPS, rate, ratio};
use crate::registry::Alias;

pub static ALIASES: &[Alias] = &[
    ("cycles", "PF_CYCLES"),
    ("issues", "PF_ISSUES"),
    ("nonissues", "PF_NONISSUES"),
    ("pipedry", "PF_PIPEDRY"),
    ("pipefrozen", "PF_PIPEFROZEN"),
    ("loads", "PF_LOADI"),
    ("stores", "PF_STOREI"),
    ("branches", "PF_BRANCHI"),
    ("brmiss", "PF_BRANCHMISS"),
    ("dmiss", "PF_DCACHE"),
    ("imiss", "PF_ICACHE"),
    ("dual", "PF_DUAL"),
    ("fpinst", "PF_FPINST"),
    ("intops", "PF_INTOPS"),
    ("palmode", "PF_PALMODE"),
];

/// PAPI presets (crate::papi). None for `PAPI_TOT_INS`: `PF_ISSUES` counts
/// half the issues.
pub static PAPI_PRESETS: &[Alias] = &[
    ("PAPI_TOT_CYC", "PF_CYCLES"),
    ("PAPI_INT_INS", "PF_INTOPS"),
    ("PAPI_FP_INS", "PF_FPINST"),
    ("PAPI_LD_INS", "PF_LOADI"),
    ("PAPI_SR_INS", "PF_STOREI"),
    ("PAPI_BR_INS", "PF_BRANCHI"),
    ("PAPI_BR_MSP", "PF_BRANCHMISS"),
    ("PAPI_L1_DCM", "PF_DCACHE"),
    ("PAPI_L1_ICM", "PF_ICACHE"),
];

pub static DEFAULT_EVENTS: &[&str] = &["PF_CYCLES", "PF_BRANCHMISS"];

pub static CYCLE_EVENTS: &[&str] = &["PF_CYCLES"];

/// Each `PF_ISSUES` count is two issues.
const ISSUES: Count = Count::Event("PF_ISSUES", 2.0);

pub static STATISTICS: &[Derivation] = &[
    ratio("Issues per cycle", ISSUES, Count::Cycles, 1.0),
    rate(
        "Branch mispredictions / branches",
        "PF_BRANCHMISS",
        "PF_BRANCHI",
    ),
    rate("D-cache misses / loads", "PF_DCACHE", "PF_LOADI"),
    ratio(
        "I-cache misses per 1000 issues",
        Count::of("PF_ICACHE"),
        ISSUES,
        1000.0,
    ),
    ratio(
        "Dual-issue cycles / cycles",
        Count::of("PF_DUAL"),
        Count::Cycles,
        1.0,
    ),
    ratio(
        "Pipeline-dry cycles / cycles",
        Count::of("PF_PIPEDRY"),
        Count::Cycles,
        1.0,
    ),
    ratio(
        "Pipeline-frozen cycles / cycles",
        Count::of("PF_PIPEFROZEN"),
        Count::Cycles,
        1.0,
    ),
    ratio(
        "PALmode cycles / cycles",
        Count::of("PF_PALMODE"),
        Count::Cycles,
        1.0,
    ),
    Derivation::PerMicrosecond {
        name: MFLOPS,
        event: "PF_FPINST",
    },
];
