//! The EV5 event tables (21164, 21164A, 21164PC): every `PF5_MUX0/1/2` code
//! with its meaning and its host candidates in order (docs/device.md
//! §7). The Cbox events of counters 1 and 2 differ between EV5/EV56 (on-chip
//! Scache) and PCA56 (no Scache; Bcache events instead).
//!
//! Host mapping notes:
//! - The Scache is the 21164's on-chip *second* level; a host's generic
//!   cache events are L1 or last level, so Scache events have no generic
//!   equivalent. The board-level Bcache is the last level: Bcache events map
//!   approximately onto the host's LLC events.
//! - Issue-slot events (split/single/dual/triple/quad issue) and replays have
//!   no generic host event; a site event map can bind them to raw events.

use crate::{
    AlphaEvent, Candidate, HostEvent as H, Scale, Term, approx, event, exact, unavailable,
};

const CYCLES: &[Candidate] = crate::ev4::CYCLES;
const NO_GENERIC: &str = "no generic host event counts it; bind a raw event in the site event map";
const SCACHE: &str = "the Scache is the 21164's on-chip second level; generic host cache events are L1 or last level only; bind a raw L2 event in the site event map";

/// Counter 0 (`PCNT5MUX` bit 31), all implementations.
pub static MUX0_EVENTS: &[AlphaEvent] = &[
    event(
        "PF5_MUX0_CYCLES",
        0,
        0,
        "cycles (counter 2 also has a cycles counter)",
        CYCLES,
    ),
    event(
        "PF5_MUX0_ISSUES",
        0x8000_0000,
        0,
        "instructions issued",
        &[approx(
            &[Term::one(H::Instructions)],
            "instructions (retired, not issued)",
        )],
    ),
];

/// Counter 1 base events (`PCNT5MUX` bits 4..7), all implementations, and the
/// Cbox Bcache-victim event both Cbox tables share.
pub static MUX1_EVENTS: &[AlphaEvent] = &[
    event(
        "PF5_MUX1_NON_ISSUE_CYCLES",
        0x00,
        1,
        "cycles in which valid instructions are ready but none issue, for a pipeline stall or missing resources",
        &[approx(
            &[Term::one(H::StalledCyclesBackend)],
            "stalled-cycles-backend",
        )],
    ),
    unavailable(
        "PF5_MUX1_SPLIT_ISSUE_CYCLES",
        0x10,
        1,
        "cycles in which some but not all of the (up to four) ready instructions issue",
        NO_GENERIC,
    ),
    event(
        "PF5_MUX1_PIPELINE_DRY",
        0x20,
        1,
        "cycles in which no instructions are ready to issue",
        &[approx(
            &[Term::one(H::StalledCyclesFrontend)],
            "stalled-cycles-frontend",
        )],
    ),
    unavailable(
        "PF5_MUX1_REPLAY_TRAP",
        0x30,
        1,
        "replay traps: an instruction re-executed because a resource it needed was unavailable",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX1_SINGLE_ISSUE_CYCLES",
        0x40,
        1,
        "cycles in which one instruction issues",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX1_DUAL_ISSUE_CYCLES",
        0x50,
        1,
        "cycles in which two instructions issue",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX1_TRIPLE_ISSUE_CYCLES",
        0x60,
        1,
        "cycles in which three instructions issue",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX1_QUAD_ISSUE_CYCLES",
        0x70,
        1,
        "cycles in which four instructions issue",
        NO_GENERIC,
    ),
    event(
        "PF5_MUX1_FLOW_CHANGE",
        0x80,
        1,
        "branch, jump and return instructions",
        &[exact(
            &[Term::one(H::BranchInstructions)],
            "branch-instructions",
        )],
    ),
    unavailable(
        "PF5_MUX1_INTEGER_OPERATE",
        0x90,
        1,
        "integer operate instructions",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX1_C_FP_INSTRUCTIONS",
        0xA0,
        1,
        "floating-point operate instructions",
        "no generic host event counts FP instructions; bind a raw event (e.g. fp_arith_inst_retired) in the site event map",
    ),
    event(
        "PF5_MUX1_C_LOAD_INSTRUCTIONS",
        0xB0,
        1,
        "load instructions",
        &[approx(
            &[Term::one(H::L1dReadAccess)],
            "L1-dcache-loads (retired loads)",
        )],
    ),
    event(
        "PF5_MUX1_C_STORE_INSTRUCTIONS",
        0xC0,
        1,
        "store instructions",
        &[approx(
            &[Term::one(H::L1dWriteAccess)],
            "L1-dcache-stores (retired stores)",
        )],
    ),
    unavailable(
        "PF5_MUX1_C_ICACHE_ACCESS",
        0xD0,
        1,
        "instruction cache accesses",
        NO_GENERIC,
    ),
    event(
        "PF5_MUX1_C_DCACHE_ACCESS",
        0xE0,
        1,
        "data cache accesses",
        &[approx(
            &[Term::one(H::L1dReadAccess), Term::one(H::L1dWriteAccess)],
            "L1-dcache-loads + L1-dcache-stores",
        )],
    ),
    unavailable(
        "PF5_MUX1_C_BCACHE_VICTIM",
        0x30_0000_0000_00F0,
        1,
        "Bcache victims: blocks written back to memory before reuse (PCA56: VICTIM commands issued)",
        "no generic host event counts last-level write-backs; bind a raw event in the site event map",
    ),
];

/// Counter 1 Cbox events of EV5 and EV56 (`0xF0` with bits 51..53).
pub static MUX1_SCACHE_EVENTS: &[AlphaEvent] = &[
    unavailable(
        "PF5_MUX1_C_SCACHE_ACCESS",
        0xF0,
        1,
        "Scache accesses (instructions or data)",
        SCACHE,
    ),
    unavailable(
        "PF5_MUX1_C_SCACHE_READ",
        0x8_0000_0000_00F0,
        1,
        "Scache reads",
        SCACHE,
    ),
    unavailable(
        "PF5_MUX1_C_SCACHE_WRITE",
        0x10_0000_0000_00F0,
        1,
        "Scache writes (counter 2 also has an Scache-writes counter)",
        SCACHE,
    ),
    unavailable(
        "PF5_MUX1_C_SCACHE_VICTIM",
        0x18_0000_0000_00F0,
        1,
        "Scache victims: blocks written back to memory before reuse",
        SCACHE,
    ),
    event(
        "PF5_MUX1_C_BCACHE_REF",
        0x28_0000_0000_00F0,
        1,
        "accesses to the optional board-level Backup cache",
        &[approx(
            &[Term::one(H::CacheReferences)],
            "cache-references (last-level cache references)",
        )],
    ),
    unavailable(
        "PF5_MUX1_C_SYS_REQ",
        0x38_0000_0000_00F0,
        1,
        "system requests",
        "system bus requests have no generic host event; bind a raw uncore event in the site event map",
    ),
];

/// Counter 1 Cbox events of PCA56 (`0xF0` with bits 51..53).
pub static MUX1_PCA56_EVENTS: &[AlphaEvent] = &[
    event(
        "PF5_MUX1_C_BCACHE_READ",
        0xF0,
        1,
        "Bcache read requests from the Mbox",
        &[approx(&[Term::one(H::LlcReadAccess)], "LLC-loads")],
    ),
    event(
        "PF5_MUX1_C_BCACHE_DREAD_HIT",
        0x8_0000_0000_00F0,
        1,
        "D-stream read requests that hit in the Bcache",
        &[approx(
            &[
                Term::one(H::LlcReadAccess),
                Term::new(H::LlcReadMiss, Scale::Ratio { num: -1, den: 1 }),
            ],
            "LLC-loads - LLC-load-misses (I-stream included)",
        )],
    ),
    event(
        "PF5_MUX1_C_BCACHE_DREAD_FILL",
        0x10_0000_0000_00F0,
        1,
        "D-stream read fills to the Bcache",
        &[approx(
            &[Term::one(H::LlcReadMiss)],
            "LLC-load-misses (I-stream included)",
        )],
    ),
    event(
        "PF5_MUX1_C_BCACHE_WRITE",
        0x18_0000_0000_00F0,
        1,
        "Bcache write requests from the Mbox",
        &[approx(&[Term::one(H::LlcWriteAccess)], "LLC-stores")],
    ),
    unavailable(
        "PF5_MUX1_C_BCACHE_CLN_WRT_HIT",
        0x28_0000_0000_00F0,
        1,
        "writes that hit a clean block in the Bcache",
        "no generic host event tells clean from dirty hits; bind a raw event in the site event map",
    ),
    unavailable(
        "PF5_MUX1_C_READ_MISS_2",
        0x38_0000_0000_00F0,
        1,
        "a second READ_MISS sent to the system while an earlier one is outstanding",
        NO_GENERIC,
    ),
];

/// Counter 2 base events (`PCNT5MUX` bits 0..3), all implementations.
pub static MUX2_EVENTS: &[AlphaEvent] = &[
    unavailable(
        "PF5_MUX2_C_LONG_STALLS",
        0x0,
        2,
        "long pipeline stalls (over 15 cycles)",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX2_C_PC_MISPR",
        0x2,
        2,
        "PC mispredictions (jumps and returns whose target was mispredicted)",
        "the host counts all branch mispredictions together (see PF5_MUX2_C_BRANCH_MISPREDICTS); bind a raw indirect-mispredict event in the site event map",
    ),
    event(
        "PF5_MUX2_C_BRANCH_MISPREDICTS",
        0x3,
        2,
        "branch mispredictions",
        &[approx(
            &[Term::one(H::BranchMisses)],
            "branch-misses (every branch kind; the 21164 counts PC mispredicts apart)",
        )],
    ),
    event(
        "PF5_MUX2_C_ICACHE_MISSES",
        0x4,
        2,
        "instructions found neither in the Icache nor in the refill buffer",
        &[approx(
            &[Term::one(H::L1iReadMiss)],
            "L1-icache-load-misses (no refill-buffer distinction)",
        )],
    ),
    event(
        "PF5_MUX2_C_ITB_MISS",
        0x5,
        2,
        "Icache misses whose page is not in the instruction translation buffer",
        &[approx(&[Term::one(H::ItlbReadMiss)], "iTLB-load-misses")],
    ),
    event(
        "PF5_MUX2_C_DCACHE_MISSES",
        0x6,
        2,
        "loads of a value not in the Dcache",
        &[approx(
            &[Term::one(H::L1dReadMiss)],
            "L1-dcache-load-misses",
        )],
    ),
    event(
        "PF5_MUX2_C_DTB_MISS",
        0x7,
        2,
        "Dcache misses whose page is not in the data translation buffer",
        &[approx(
            &[Term::one(H::DtlbReadMiss)],
            "dTLB-load-misses (loads only)",
        )],
    ),
    unavailable(
        "PF5_MUX2_C_LOADS_MERGED",
        0x8,
        2,
        "Dcache-missing loads merged with an outstanding miss to the same address in the MAF",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX2_C_LDU_REPLAYS",
        0x9,
        2,
        "Dcache load misses that replay a later instruction using the loaded value",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX2_C_WB_MAF_FULL_REPLAYS",
        0xA,
        2,
        "stores replayed because the write buffer is full, loads because the MAF is full",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX2_C_EXTERNAL",
        0xB,
        2,
        "cycles in which the perf_mon_h external input pin is true",
        "a board signal with no host equivalent; bind a raw event in the site event map",
    ),
    event(
        "PF5_MUX2_C_CYCLES",
        0xC,
        2,
        "cycles (counter 0 also has a cycles counter)",
        CYCLES,
    ),
    unavailable(
        "PF5_MUX2_C_MEM_BARRIER",
        0xD,
        2,
        "stall cycles caused by memory barriers",
        NO_GENERIC,
    ),
    unavailable(
        "PF5_MUX2_C_LOAD_LOCKED",
        0xE,
        2,
        "load-locked instructions",
        NO_GENERIC,
    ),
];

/// Counter 2 Cbox events of EV5 and EV56 (`0xF` with bits 54..56).
pub static MUX2_SCACHE_EVENTS: &[AlphaEvent] = &[
    unavailable("PF5_MUX2_C_SCACHE_MISS", 0xF, 2, "Scache misses", SCACHE),
    unavailable(
        "PF5_MUX2_C_SCACHE_READ_MISS",
        0x40_0000_0000_000F,
        2,
        "Scache read misses",
        SCACHE,
    ),
    unavailable(
        "PF5_MUX2_C_SCACHE_WRITE_MISS",
        0x80_0000_0000_000F,
        2,
        "Scache write misses",
        SCACHE,
    ),
    unavailable(
        "PF5_MUX2_C_SCACHE_SH_WRITE",
        0xC0_0000_0000_000F,
        2,
        "Scache shared-write operations",
        SCACHE,
    ),
    unavailable(
        "PF5_MUX2_C_SCACHE_WRITE",
        0x100_0000_0000_000F,
        2,
        "Scache write operations (counter 1 also has an Scache-writes counter)",
        SCACHE,
    ),
    event(
        "PF5_MUX2_C_BCACHE_MISS",
        0x140_0000_0000_000F,
        2,
        "misses in the optional board-level Backup cache",
        &[approx(
            &[Term::one(H::CacheMisses)],
            "cache-misses (last-level cache misses)",
        )],
    ),
    unavailable(
        "PF5_MUX2_C_SYS_INV",
        0x180_0000_0000_000F,
        2,
        "system invalidate operations",
        "coherence traffic from other agents has no generic host event; bind a raw uncore event in the site event map",
    ),
    unavailable(
        "PF5_MUX2_C_SYS_READ_REQ",
        0x1C0_0000_0000_000F,
        2,
        "system read requests",
        "coherence traffic from other agents has no generic host event; bind a raw uncore event in the site event map",
    ),
];

/// Counter 2 Cbox events of PCA56 (`0xF` with bits 54..56).
pub static MUX2_PCA56_EVENTS: &[AlphaEvent] = &[
    event(
        "PF5_MUX2_C_BCACHE_DREAD",
        0xF,
        2,
        "D-stream read requests from the Mbox",
        &[approx(
            &[Term::one(H::LlcReadAccess)],
            "LLC-loads (I-stream included)",
        )],
    ),
    event(
        "PF5_MUX2_C_BCACHE_READ_HIT",
        0x40_0000_0000_000F,
        2,
        "read requests that hit in the Bcache",
        &[approx(
            &[
                Term::one(H::LlcReadAccess),
                Term::new(H::LlcReadMiss, Scale::Ratio { num: -1, den: 1 }),
            ],
            "LLC-loads - LLC-load-misses",
        )],
    ),
    event(
        "PF5_MUX2_C_BCACHE_READ_FILL",
        0x80_0000_0000_000F,
        2,
        "read fills to the Bcache",
        &[approx(&[Term::one(H::LlcReadMiss)], "LLC-load-misses")],
    ),
    event(
        "PF5_MUX2_C_BCACHE_WRITE_HIT",
        0xC0_0000_0000_000F,
        2,
        "writes that hit in the Bcache",
        &[approx(
            &[
                Term::one(H::LlcWriteAccess),
                Term::new(H::LlcWriteMiss, Scale::Ratio { num: -1, den: 1 }),
            ],
            "LLC-stores - LLC-store-misses",
        )],
    ),
    event(
        "PF5_MUX2_C_BCACHE_WRITE_FILL",
        0x100_0000_0000_000F,
        2,
        "write fills to the Bcache",
        &[approx(&[Term::one(H::LlcWriteMiss)], "LLC-store-misses")],
    ),
    unavailable(
        "PF5_MUX2_C_SYS_READ_FLUSH_HIT",
        0x140_0000_0000_000F,
        2,
        "system READ or FLUSH requests that hit in the Bcache",
        "coherence traffic from other agents has no generic host event; bind a raw uncore event in the site event map",
    ),
    unavailable(
        "PF5_MUX2_C_SYS_READ_FLUSH_MISS",
        0x180_0000_0000_000F,
        2,
        "system READ or FLUSH requests",
        "coherence traffic from other agents has no generic host event; bind a raw uncore event in the site event map",
    ),
    unavailable(
        "PF5_MUX2_C_READ_MISS_3",
        0x1C0_0000_0000_000F,
        2,
        "a third READ_MISS sent to the system while two earlier ones are outstanding",
        NO_GENERIC,
    ),
];

/// Every event of EV5/EV56, counter by counter (base tables before Cbox).
pub static EV5_EVENTS: [&[AlphaEvent]; 5] = [
    MUX0_EVENTS,
    MUX1_EVENTS,
    MUX1_SCACHE_EVENTS,
    MUX2_EVENTS,
    MUX2_SCACHE_EVENTS,
];

/// Every event of PCA56, counter by counter (base tables before Cbox).
pub static PCA56_EVENTS: [&[AlphaEvent]; 5] = [
    MUX0_EVENTS,
    MUX1_EVENTS,
    MUX1_PCA56_EVENTS,
    MUX2_EVENTS,
    MUX2_PCA56_EVENTS,
];
