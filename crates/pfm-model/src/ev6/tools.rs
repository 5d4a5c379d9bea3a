//! What the tools show of the EV6 and EV67 by default: aliases, the events
//! counted without `-e`, the cycle events and the derived statistics.

use crate::derived::{Count, Derivation, MEMORY_TIME, ratio};
use crate::registry::Alias;

/// `retinst` only where the chip counts retired instructions.
pub static EV6_ALIASES: &[Alias] = &[
    ("cycles", "PF6_MUX0_CYCLES"),
    ("cycles1", "PF6_MUX1_CYCLES"),
    ("retinst", "PF6_MUX0_RET_INSTRUCTIONS"),
    ("instructions", "PF6_MUX0_RET_INSTRUCTIONS"),
    ("condbr", "PF6_MUX1_RET_COND_BRANCHES"),
    ("branches", "PF6_MUX1_RET_COND_BRANCHES"),
    ("dtbmiss", "PF6_MUX1_RET_DTB_SINGLE_MISSES"),
    ("dtbmiss2", "PF6_MUX1_RET_DTB_DOUBLE_MISSES"),
    ("itbmiss", "PF6_MUX1_RET_ITB_MISSES"),
    ("unaligned", "PF6_MUX1_RET_UNALIGNED_TRAPS"),
    ("replays", "PF6_MUX1_REPLAY_TRAP"),
];

pub static EV67_ALIASES: &[Alias] = &[
    ("cycles", "PF67_C0_CYCLES"),
    ("cycles1", "PF67_C1_CYCLES"),
    ("retinst", "PF67_C0_RET_INST"),
    ("instructions", "PF67_C0_RET_INST"),
    ("bcmiss", "PF67_C1_BCACHE_MISS"),
    ("replays", "PF67_C1_REPLAY_TRAPS"),
];

/// PAPI presets (crate::papi). None for `PAPI_BR_MSP`: the chip's
/// mispredict selection counts cycles; none for `PAPI_TLB_DM`: single DTB
/// misses count twice each and double misses not at all.
pub static EV6_PAPI_PRESETS: &[Alias] = &[
    ("PAPI_TOT_CYC", "PF6_MUX0_CYCLES"),
    ("PAPI_TOT_INS", "PF6_MUX0_RET_INSTRUCTIONS"),
    ("PAPI_BR_CN", "PF6_MUX1_RET_COND_BRANCHES"),
    ("PAPI_TLB_IM", "PF6_MUX1_RET_ITB_MISSES"),
];

/// The 21264's Bcache is its second-level cache.
pub static EV67_PAPI_PRESETS: &[Alias] = &[
    ("PAPI_TOT_CYC", "PF67_C0_CYCLES"),
    ("PAPI_TOT_INS", "PF67_C0_RET_INST"),
    ("PAPI_L2_TCM", "PF67_C1_BCACHE_MISS"),
];

pub static EV6_DEFAULT_EVENTS: &[&str] = &["PF6_MUX0_RET_INSTRUCTIONS", "PF6_MUX1_CYCLES"];
pub static EV67_DEFAULT_EVENTS: &[&str] = &["PF67_C0_RET_INST", "PF67_C1_CYCLES"];

/// Not `PF6_MUX1_RET_BRANCH_MISPREDICTS`: it counts cycles on a real
/// 21264, but its name says otherwise and the report keeps it apart.
pub static EV6_CYCLE_EVENTS: &[&str] = &["PF6_MUX0_CYCLES", "PF6_MUX1_CYCLES"];
pub static EV67_CYCLE_EVENTS: &[&str] = &["PF67_C0_CYCLES", "PF67_C1_CYCLES"];

const EV6_RETIRED: Count = Count::of("PF6_MUX0_RET_INSTRUCTIONS");

pub static EV6_STATISTICS: &[Derivation] = &[
    ratio(
        "Retired instructions per cycle",
        EV6_RETIRED,
        Count::Cycles,
        1.0,
    ),
    ratio(
        "Conditional branches / retired instructions",
        Count::of("PF6_MUX1_RET_COND_BRANCHES"),
        EV6_RETIRED,
        1.0,
    ),
    // The chip counts each single miss twice.
    ratio(
        "DTB single misses per 1000 instructions",
        Count::Event("PF6_MUX1_RET_DTB_SINGLE_MISSES", 0.5),
        EV6_RETIRED,
        1000.0,
    ),
    ratio(
        "ITB misses per 1000 instructions",
        Count::of("PF6_MUX1_RET_ITB_MISSES"),
        EV6_RETIRED,
        1000.0,
    ),
    ratio(
        "Replay traps per 1000 instructions",
        Count::of("PF6_MUX1_REPLAY_TRAP"),
        EV6_RETIRED,
        1000.0,
    ),
    ratio(
        "Unaligned traps per 1000 instructions",
        Count::of("PF6_MUX1_RET_UNALIGNED_TRAPS"),
        EV6_RETIRED,
        1000.0,
    ),
];

const EV67_RETIRED: Count = Count::of("PF67_C0_RET_INST");

pub static EV67_STATISTICS: &[Derivation] = &[
    ratio(
        "Retired instructions per cycle",
        EV67_RETIRED,
        Count::Cycles,
        1.0,
    ),
    ratio(
        "B-cache misses per 1000 instructions",
        Count::of("PF67_C1_BCACHE_MISS"),
        EV67_RETIRED,
        1000.0,
    ),
    ratio(
        "Replay traps per 1000 cycles",
        Count::of("PF67_C1_REPLAY_TRAPS"),
        Count::Cycles,
        1000.0,
    ),
    Derivation::MemoryTime {
        name: MEMORY_TIME,
        events: &["PF67_C1_BCACHE_MISS"],
    },
];
