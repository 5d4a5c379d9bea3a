//! The EV6 and EV67 event tables with their host candidates in
//! order (docs/device.md §7).

use crate::{
    AlphaEvent, Candidate, HostEvent as H, Scale, Term, approx, event, exact, unavailable,
};

const CYCLES: &[Candidate] = crate::ev4::CYCLES;
const RETIRED: &[Candidate] = &[exact(
    &[Term::one(H::Instructions)],
    "instructions (retired)",
)];
const REPLAY: &str = "no generic host event counts replay traps (pipeline flushes for memory ordering); bind a raw event (e.g. machine_clears) in the site event map";

/// EV6 counter 0 (`PF6_MUX0_*`, bit 4 of the `PCNT6MUX` word).
pub static EV6_MUX0_EVENTS: &[AlphaEvent] = &[
    event(
        "PF6_MUX0_CYCLES",
        0x00,
        0,
        "cycles (counter 1 also has a cycles counter)",
        CYCLES,
    ),
    event(
        "PF6_MUX0_RET_INSTRUCTIONS",
        0x10,
        0,
        "retired instructions",
        RETIRED,
    ),
];

/// EV6 counter 1 (`PF6_MUX1_*`, bits 0..3 of the `PCNT6MUX` word).
pub static EV6_MUX1_EVENTS: &[AlphaEvent] = &[
    event(
        "PF6_MUX1_CYCLES",
        0x0,
        1,
        "cycles (counter 0 also has a cycles counter)",
        CYCLES,
    ),
    event(
        "PF6_MUX1_RET_COND_BRANCHES",
        0x1,
        1,
        "retired conditional branches",
        &[approx(
            &[Term::one(H::BranchInstructions)],
            "branch-instructions (every retired branch, not only conditional ones)",
        )],
    ),
    // The quirk the Tru64 header documents: on a real 21264 this selection
    // counts cycles, not mispredictions. Programs calibrated on the chip
    // expect cycles, so pfmd keeps it; PF6_MUX1_CYCLES's host candidates.
    event(
        "PF6_MUX1_RET_BRANCH_MISPREDICTS",
        0x2,
        1,
        "meant to count retired mispredicted branches; counts cycles on a real 21264 (header), and so here",
        CYCLES,
    ),
    event(
        "PF6_MUX1_RET_DTB_SINGLE_MISSES",
        0x3,
        1,
        "retired single DTB misses, counted twice each",
        &[approx(
            &[Term::new(H::DtlbReadMiss, Scale::Ratio { num: 2, den: 1 })],
            "2 x dTLB-load-misses (loads only, as the chip counts each twice)",
        )],
    ),
    unavailable(
        "PF6_MUX1_RET_DTB_DOUBLE_MISSES",
        0x4,
        1,
        "retired double DTB misses (the page-table page itself missed)",
        "no generic host event tells a nested page-walk miss; bind a raw event in the site event map",
    ),
    event(
        "PF6_MUX1_RET_ITB_MISSES",
        0x5,
        1,
        "retired ITB misses",
        &[approx(&[Term::one(H::ItlbReadMiss)], "iTLB-load-misses")],
    ),
    event(
        "PF6_MUX1_RET_UNALIGNED_TRAPS",
        0x6,
        1,
        "retired unaligned-access traps",
        &[approx(
            &[Term::one(H::AlignmentFaults)],
            "alignment-faults (kernel fix-ups of unaligned accesses; hosts that do unaligned accesses in hardware, such as x86, never trap, so 0 there is the truth)",
        )],
    ),
    unavailable("PF6_MUX1_REPLAY_TRAP", 0x7, 1, "replay traps", REPLAY),
];

/// EV67 counter 0 in aggregate mode. `code` is the counter-0 selector bit of
/// the `PCNT6MUX` word (`0x04` set: cycles).
pub static EV67_MUX0_EVENTS: &[AlphaEvent] = &[
    event("PF67_C0_RET_INST", 0x00, 0, "retired instructions", RETIRED),
    event(
        "PF67_C0_CYCLES",
        0x04,
        0,
        "cycles (counter 1 also has a cycles counter)",
        CYCLES,
    ),
];

/// EV67 counter 1. `code` is the `PCNT6MUX` word of the one pair that
/// selects it (each counter-1 event appears in exactly one pair).
pub static EV67_MUX1_EVENTS: &[AlphaEvent] = &[
    event(
        "PF67_C1_CYCLES",
        0x00,
        1,
        "cycles (counter 0 also has a cycles counter)",
        CYCLES,
    ),
    unavailable(
        "PF67_C1_UNDEFINED",
        0x04,
        1,
        "undefined: with counter 0 counting cycles, counter 1 counts nothing defined",
        "undefined on the chip; pfmd leaves counter 1 off in this pair",
    ),
    event(
        "PF67_C1_BCACHE_MISS",
        0x08,
        1,
        "misses in the Backup cache",
        &[approx(
            &[Term::one(H::CacheMisses)],
            "cache-misses (last-level cache misses)",
        )],
    ),
    unavailable("PF67_C1_REPLAY_TRAPS", 0x0C, 1, "Mbox replay traps", REPLAY),
    unavailable(
        "PF67_C1_RET_DELAY",
        0x14,
        1,
        "profile-me mode: the retire-pointer delay of each profiled instruction",
        "a per-instruction latency, not an aggregate count: pfmd leaves counter 1 off in profile-me mode; the profile-me statistic PF67_PM_DELAY samples it",
    ),
];

/// Every EV6 event, counter 0's first.
pub static EV6_EVENTS: [&[AlphaEvent]; 2] = [EV6_MUX0_EVENTS, EV6_MUX1_EVENTS];
/// Every EV67 event, counter 0's first.
pub static EV67_EVENTS: [&[AlphaEvent]; 2] = [EV67_MUX0_EVENTS, EV67_MUX1_EVENTS];
