//! The EV4 family's built-in cost rows pfmstat's `-y` starts from (the sources
//! are described in `crate::cost`).

use crate::cost::{CostRow, DEF, row};

/// EV4/EV45 (21064/21064A: dual issue, in order; 8 KB direct-mapped caches).
pub static COSTS: &[CostRow] = &[
    row(
        "PF_ISSUES",
        1.5,
        1.0,
        2.0,
        "estimate: each count is 2 issues, 1 cycle dual-issued, 2 single-issued",
    ),
    row("PF_PIPEDRY", 1.0, 1.0, 1.0, DEF),
    row(
        "PF_LOADI",
        1.0,
        0.5,
        3.0,
        "estimate: half a cycle dual-issued, 3 with a dependent use (load-use latency)",
    ),
    row("PF_PIPEFROZEN", 1.0, 1.0, 1.0, DEF),
    row("PF_BRANCHI", 1.0, 0.5, 1.0, "estimate: one issue slot"),
    row("PF_CYCLES", 1.0, 1.0, 1.0, DEF),
    row("PF_PALMODE", 1.0, 1.0, 1.0, DEF),
    row(
        "PF_NONISSUES",
        1.0,
        1.0,
        1.0,
        "definition: each count is one cycle of lost issue (2 slots)",
    ),
    row(
        "PF_EXTPIN0",
        30.0,
        20.0,
        60.0,
        "estimate: DEC 3000 Bcache miss with victim write-back, memory at ~150-200 ns",
    ),
    row(
        "PF_DCACHE",
        10.0,
        3.0,
        40.0,
        "estimate: line fill from the Bcache (BIU read speed 3-16 cycles per transfer), memory at worst",
    ),
    row(
        "PF_ICACHE",
        10.0,
        5.0,
        40.0,
        "estimate: as PF_DCACHE for the I-stream",
    ),
    row("PF_DUAL", 1.0, 1.0, 1.0, DEF),
    row(
        "PF_BRANCHMISS",
        4.0,
        4.0,
        5.0,
        "estimate: the 21064's short pipeline refetches in about 4 cycles",
    ),
    row(
        "PF_FPINST",
        1.0,
        0.5,
        63.0,
        "estimate: one issue slot; DIVT (double divide) at worst",
    ),
    row(
        "PF_INTOPS",
        1.0,
        0.5,
        23.0,
        "estimate: one issue slot; IMULQ at worst",
    ),
    row(
        "PF_STOREI",
        1.0,
        0.5,
        3.0,
        "estimate: one issue slot; write-buffer full at worst",
    ),
    row(
        "PF_EXTPIN1",
        25.0,
        15.0,
        50.0,
        "estimate: DEC 3000 Bcache miss without victim, memory at ~150-200 ns",
    ),
];
