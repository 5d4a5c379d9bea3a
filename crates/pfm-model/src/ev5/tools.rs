//! What the tools show of the EV5 family by default: aliases, the events
//! counted without `-e`, the cycle events and the derived statistics. The
//! family's common names first, then those of each Cbox (second-level
//! cache) table: the EV5/EV56 on-chip Scache, the PCA56 board Bcache.

use crate::derived::{Count, Derivation, MEMORY_TIME, MFLOPS, rate, ratio};
use crate::registry::Alias;

/// Only meanings the event really has: on the in-order EV5 `instructions`
/// is issues.
pub static ALIASES: &[Alias] = &[
    ("cycles", "PF5_MUX0_CYCLES"),
    ("cycles2", "PF5_MUX2_C_CYCLES"),
    ("issues", "PF5_MUX0_ISSUES"),
    ("instructions", "PF5_MUX0_ISSUES"),
    ("branches", "PF5_MUX1_FLOW_CHANGE"),
    ("brmiss", "PF5_MUX2_C_BRANCH_MISPREDICTS"),
    ("loads", "PF5_MUX1_C_LOAD_INSTRUCTIONS"),
    ("stores", "PF5_MUX1_C_STORE_INSTRUCTIONS"),
    ("dmiss", "PF5_MUX2_C_DCACHE_MISSES"),
    ("imiss", "PF5_MUX2_C_ICACHE_MISSES"),
    ("dtbmiss", "PF5_MUX2_C_DTB_MISS"),
    ("itbmiss", "PF5_MUX2_C_ITB_MISS"),
    ("fpinst", "PF5_MUX1_C_FP_INSTRUCTIONS"),
    ("replays", "PF5_MUX1_REPLAY_TRAP"),
];

pub static SCACHE_ALIASES: &[Alias] = &[
    ("scmiss", "PF5_MUX2_C_SCACHE_MISS"),
    ("bcmiss", "PF5_MUX2_C_BCACHE_MISS"),
];

pub static PCA56_ALIASES: &[Alias] = &[
    ("bcread", "PF5_MUX2_C_BCACHE_DREAD"),
    ("bcfill", "PF5_MUX2_C_BCACHE_READ_FILL"),
];

/// PAPI presets (crate::papi) of the whole family. The in-order EV5 counts
/// issued instructions, which is also what it completes.
pub static PAPI_PRESETS: &[Alias] = &[
    ("PAPI_TOT_CYC", "PF5_MUX0_CYCLES"),
    ("PAPI_TOT_INS", "PF5_MUX0_ISSUES"),
    ("PAPI_TOT_IIS", "PF5_MUX0_ISSUES"),
    ("PAPI_INT_INS", "PF5_MUX1_INTEGER_OPERATE"),
    ("PAPI_FP_INS", "PF5_MUX1_C_FP_INSTRUCTIONS"),
    ("PAPI_LD_INS", "PF5_MUX1_C_LOAD_INSTRUCTIONS"),
    ("PAPI_SR_INS", "PF5_MUX1_C_STORE_INSTRUCTIONS"),
    ("PAPI_BR_INS", "PF5_MUX1_FLOW_CHANGE"),
    ("PAPI_BR_MSP", "PF5_MUX2_C_BRANCH_MISPREDICTS"),
    ("PAPI_FUL_ICY", "PF5_MUX1_QUAD_ISSUE_CYCLES"),
    ("PAPI_L1_DCA", "PF5_MUX1_C_DCACHE_ACCESS"),
    ("PAPI_L1_DCM", "PF5_MUX2_C_DCACHE_MISSES"),
    ("PAPI_L1_ICA", "PF5_MUX1_C_ICACHE_ACCESS"),
    ("PAPI_L1_ICM", "PF5_MUX2_C_ICACHE_MISSES"),
    ("PAPI_TLB_DM", "PF5_MUX2_C_DTB_MISS"),
    ("PAPI_TLB_IM", "PF5_MUX2_C_ITB_MISS"),
];

/// The EV5 and EV56 have an on-chip second-level cache (the Scache) and an
/// optional third level on the board (the Bcache).
pub static SCACHE_PAPI_PRESETS: &[Alias] = &[
    ("PAPI_L2_TCA", "PF5_MUX1_C_SCACHE_ACCESS"),
    ("PAPI_L2_TCM", "PF5_MUX2_C_SCACHE_MISS"),
    ("PAPI_L3_TCA", "PF5_MUX1_C_BCACHE_REF"),
    ("PAPI_L3_TCM", "PF5_MUX2_C_BCACHE_MISS"),
];

pub static DEFAULT_EVENTS: &[&str] = &[
    "PF5_MUX0_ISSUES",
    "PF5_MUX1_FLOW_CHANGE",
    "PF5_MUX2_C_CYCLES",
];

pub static CYCLE_EVENTS: &[&str] = &["PF5_MUX0_CYCLES", "PF5_MUX2_C_CYCLES"];

const ISSUES: Count = Count::of("PF5_MUX0_ISSUES");

/// The statistics before the cache hierarchy's.
pub static STATISTICS: &[Derivation] = &[
    ratio("Issued instructions per cycle", ISSUES, Count::Cycles, 1.0),
    rate(
        "Branch mispredictions / flow changes",
        "PF5_MUX2_C_BRANCH_MISPREDICTS",
        "PF5_MUX1_FLOW_CHANGE",
    ),
    rate(
        "D-cache misses / loads",
        "PF5_MUX2_C_DCACHE_MISSES",
        "PF5_MUX1_C_LOAD_INSTRUCTIONS",
    ),
    rate(
        "D-cache misses / accesses",
        "PF5_MUX2_C_DCACHE_MISSES",
        "PF5_MUX1_C_DCACHE_ACCESS",
    ),
    rate(
        "I-cache misses / accesses",
        "PF5_MUX2_C_ICACHE_MISSES",
        "PF5_MUX1_C_ICACHE_ACCESS",
    ),
    ratio(
        "I-cache misses per 1000 instructions",
        Count::of("PF5_MUX2_C_ICACHE_MISSES"),
        ISSUES,
        1000.0,
    ),
];

pub static SCACHE_STATISTICS: &[Derivation] = &[
    rate(
        "S-cache misses / accesses",
        "PF5_MUX2_C_SCACHE_MISS",
        "PF5_MUX1_C_SCACHE_ACCESS",
    ),
    rate(
        "S-cache read misses / reads",
        "PF5_MUX2_C_SCACHE_READ_MISS",
        "PF5_MUX1_C_SCACHE_READ",
    ),
    rate(
        "S-cache write misses / writes",
        "PF5_MUX2_C_SCACHE_WRITE_MISS",
        "PF5_MUX1_C_SCACHE_WRITE",
    ),
    rate(
        "B-cache misses / references",
        "PF5_MUX2_C_BCACHE_MISS",
        "PF5_MUX1_C_BCACHE_REF",
    ),
];

pub static PCA56_STATISTICS: &[Derivation] = &[
    rate(
        "B-cache read fills / D-stream reads",
        "PF5_MUX2_C_BCACHE_READ_FILL",
        "PF5_MUX2_C_BCACHE_DREAD",
    ),
    rate(
        "B-cache D-stream read hits / reads",
        "PF5_MUX1_C_BCACHE_DREAD_HIT",
        "PF5_MUX1_C_BCACHE_READ",
    ),
];

/// The statistics after the cache hierarchy's.
pub static LATER_STATISTICS: &[Derivation] = &[
    ratio(
        "DTB misses per 1000 instructions",
        Count::of("PF5_MUX2_C_DTB_MISS"),
        ISSUES,
        1000.0,
    ),
    ratio(
        "ITB misses per 1000 instructions",
        Count::of("PF5_MUX2_C_ITB_MISS"),
        ISSUES,
        1000.0,
    ),
    ratio(
        "Replay traps per 1000 instructions",
        Count::of("PF5_MUX1_REPLAY_TRAP"),
        ISSUES,
        1000.0,
    ),
    ratio(
        "Non-issue cycles / cycles",
        Count::of("PF5_MUX1_NON_ISSUE_CYCLES"),
        Count::Cycles,
        1.0,
    ),
    ratio(
        "Pipeline-dry cycles / cycles",
        Count::of("PF5_MUX1_PIPELINE_DRY"),
        Count::Cycles,
        1.0,
    ),
    ratio(
        "Long stalls per 1000 cycles",
        Count::of("PF5_MUX2_C_LONG_STALLS"),
        Count::Cycles,
        1000.0,
    ),
    Derivation::PerMicrosecond {
        name: MFLOPS,
        event: "PF5_MUX1_C_FP_INSTRUCTIONS",
    },
];

pub static SCACHE_MEMORY_TIME: &[Derivation] = &[Derivation::MemoryTime {
    name: MEMORY_TIME,
    events: &[
        "PF5_MUX1_C_LOAD_INSTRUCTIONS",
        "PF5_MUX1_C_STORE_INSTRUCTIONS",
        "PF5_MUX2_C_DCACHE_MISSES",
        "PF5_MUX2_C_SCACHE_MISS",
        "PF5_MUX2_C_BCACHE_MISS",
        "PF5_MUX2_C_DTB_MISS",
    ],
}];

pub static PCA56_MEMORY_TIME: &[Derivation] = &[Derivation::MemoryTime {
    name: MEMORY_TIME,
    events: &[
        "PF5_MUX1_C_LOAD_INSTRUCTIONS",
        "PF5_MUX1_C_STORE_INSTRUCTIONS",
        "PF5_MUX2_C_DCACHE_MISSES",
        "PF5_MUX2_C_BCACHE_READ_FILL",
        "PF5_MUX2_C_DTB_MISS",
    ],
}];
