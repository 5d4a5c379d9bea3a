//! The EV6 and EV67 built-in cost rows pfmstat's `-y` starts from (the sources
//! are described in `crate::cost`).

use crate::cost::{CostRow, DEF, row};

/// EV6 (21264: out of order, 4-wide; 64 KB L1 with a 3-cycle load-use).
pub static EV6_COSTS: &[CostRow] = &[
    row("PF6_MUX0_CYCLES", 1.0, 1.0, 1.0, DEF),
    row(
        "PF6_MUX0_RET_INSTRUCTIONS",
        0.5,
        0.25,
        1.0,
        "estimate: a quarter cycle at the 4-wide fetch rate",
    ),
    row("PF6_MUX1_CYCLES", 1.0, 1.0, 1.0, DEF),
    row(
        "PF6_MUX1_RET_COND_BRANCHES",
        0.5,
        0.25,
        1.0,
        "estimate: one fetch slot",
    ),
    row(
        "PF6_MUX1_RET_BRANCH_MISPREDICTS",
        1.0,
        1.0,
        1.0,
        "definition: counts cycles on a real 21264 (header), so one cycle per count; a real misprediction costs 7 (HRM 21264 T2-1)",
    ),
    row(
        "PF6_MUX1_RET_DTB_SINGLE_MISSES",
        15.0,
        6.5,
        50.0,
        "HRM 21264 T2-1: DTB miss abort 13 (+ PALcode fill, estimate), halved: the chip counts each miss twice",
    ),
    row(
        "PF6_MUX1_RET_DTB_DOUBLE_MISSES",
        60.0,
        26.0,
        200.0,
        "HRM 21264 T2-1: two DTB miss aborts of 13 (+ two PALcode fills, estimate)",
    ),
    row(
        "PF6_MUX1_RET_ITB_MISSES",
        25.0,
        7.0,
        100.0,
        "HRM 21264 T2-1: ITB miss abort 7 (+ PALcode fill, estimate)",
    ),
    row(
        "PF6_MUX1_RET_UNALIGNED_TRAPS",
        300.0,
        100.0,
        1000.0,
        "estimate: a trap into the OS, which emulates the access",
    ),
    row(
        "PF6_MUX1_REPLAY_TRAP",
        13.0,
        13.0,
        14.0,
        "HRM 21264 T2-1: Mbox replay trap 13, order trap 14",
    ),
];

/// EV67 (21264A): the EV6 core; aggregate counting by pairs.
pub static EV67_COSTS: &[CostRow] = &[
    row(
        "PF67_C0_RET_INST",
        0.5,
        0.25,
        1.0,
        "estimate: a quarter cycle at the 4-wide fetch rate",
    ),
    row("PF67_C0_CYCLES", 1.0, 1.0, 1.0, DEF),
    row("PF67_C1_CYCLES", 1.0, 1.0, 1.0, DEF),
    row(
        "PF67_C1_UNDEFINED",
        0.0,
        0.0,
        0.0,
        "never counted: undefined on the chip",
    ),
    row(
        "PF67_C1_BCACHE_MISS",
        100.0,
        40.0,
        250.0,
        "estimate: a memory read, ~120-150 ns at 667-833 MHz",
    ),
    row(
        "PF67_C1_REPLAY_TRAPS",
        13.0,
        13.0,
        14.0,
        "HRM 21264/EV67 T2-1: Mbox replay trap 13, order trap 14",
    ),
    row(
        "PF67_C1_RET_DELAY",
        1.0,
        1.0,
        1.0,
        "definition: delay cycles",
    ),
];
