//! The EV4 event table: every mux0/mux1 code with its meaning and
//! its host candidates in order (docs/device.md §7).

use crate::{AlphaEvent, Candidate, HostEvent as H, Scale, Term, approx, exact};

/// The cycle counter, or CPU time at the nominal clock where the host has none.
pub(crate) const CYCLES: &[Candidate] = &[
    exact(&[Term::one(H::Cycles)], "cycles"),
    approx(
        &[Term::new(H::CpuClock, Scale::NsToCycles)],
        "cpu-clock ns x nominal MHz / 1000 (no cycle counter on this host)",
    ),
];

pub static MUX0_EVENTS: &[AlphaEvent] = &[
    AlphaEvent {
        name: "PF_ISSUES",
        code: 0x0,
        counter: 0,
        description: "total issues / 2: +1 per dual-issue cycle, +1/2 per single-issue cycle",
        candidates: &[approx(
            &[Term::new(H::Instructions, Scale::HALF)],
            "instructions / 2 (retired, not issued)",
        )],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_PIPEDRY",
        code: 0x2,
        counter: 0,
        description: "cycles with nothing issued for lack of valid I-stream data",
        candidates: &[approx(
            &[Term::one(H::StalledCyclesFrontend)],
            "stalled-cycles-frontend",
        )],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_LOADI",
        code: 0x4,
        counter: 0,
        description: "load instructions issued (replays of D-cache misses count again)",
        candidates: &[approx(
            &[Term::one(H::L1dReadAccess)],
            "L1-dcache-loads (no replays)",
        )],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_PIPEFROZEN",
        code: 0x6,
        counter: 0,
        description: "cycles with nothing issued because of a resource conflict",
        candidates: &[approx(
            &[Term::one(H::StalledCyclesBackend)],
            "stalled-cycles-backend",
        )],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_BRANCHI",
        code: 0x8,
        counter: 0,
        description: "branch instructions issued",
        candidates: &[exact(
            &[Term::one(H::BranchInstructions)],
            "branch-instructions",
        )],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_CYCLES",
        code: 0xa,
        counter: 0,
        description: "cycles",
        candidates: CYCLES,
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_PALMODE",
        code: 0xb,
        counter: 0,
        description: "cycles spent in PALmode",
        candidates: &[],
        unavailable_because: "the host has no PALcode and perf cannot see firmware time; bind a raw event in the site event map if your host has one",
    },
    AlphaEvent {
        name: "PF_NONISSUES",
        code: 0xc,
        counter: 0,
        description: "total non-issues / 2: +1 per cycle with no issue, +1/2 per single-issue cycle",
        candidates: &[approx(
            &[
                Term::one(H::Cycles),
                Term::new(H::Instructions, Scale::MINUS_HALF),
            ],
            "cycles - instructions / 2",
        )],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_EXTPIN0",
        code: 0xe,
        counter: 0,
        description: "external pin 0 (DEC 3000: B-cache misses with victims)",
        candidates: &[],
        unavailable_because: "a board signal with no host equivalent; bind a raw event in the site event map",
    },
];

pub static MUX1_EVENTS: &[AlphaEvent] = &[
    AlphaEvent {
        name: "PF_DCACHE",
        code: 0x0,
        counter: 1,
        description: "primary D-cache misses (probes not completing in one cycle)",
        candidates: &[approx(
            &[Term::one(H::L1dReadMiss)],
            "L1-dcache-load-misses",
        )],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_ICACHE",
        code: 0x1,
        counter: 1,
        description: "primary I-cache misses",
        candidates: &[exact(&[Term::one(H::L1iReadMiss)], "L1-icache-load-misses")],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_DUAL",
        code: 0x2,
        counter: 1,
        description: "cycles in which two instructions are dual-issued",
        candidates: &[],
        unavailable_because: "no generic host event counts multi-issue cycles; bind a raw event in the site event map",
    },
    AlphaEvent {
        name: "PF_BRANCHMISS",
        code: 0x3,
        counter: 1,
        description: "mispredicted branches",
        candidates: &[exact(&[Term::one(H::BranchMisses)], "branch-misses")],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_FPINST",
        code: 0x4,
        counter: 1,
        description: "floating-point operate instructions (not FP loads, stores, branches)",
        candidates: &[],
        unavailable_because: "no generic host event counts FP instructions; bind a raw event (e.g. fp_arith_inst_retired) in the site event map",
    },
    AlphaEvent {
        name: "PF_INTOPS",
        code: 0x5,
        counter: 1,
        description: "integer operate instructions, LDA and LDAH",
        candidates: &[],
        unavailable_because: "no generic host event counts integer operate instructions; bind a raw event in the site event map",
    },
    AlphaEvent {
        name: "PF_STOREI",
        code: 0x6,
        counter: 1,
        description: "store instructions",
        candidates: &[approx(&[Term::one(H::L1dWriteAccess)], "L1-dcache-stores")],
        unavailable_because: "",
    },
    AlphaEvent {
        name: "PF_EXTPIN1",
        code: 0x7,
        counter: 1,
        description: "external pin 1 (DEC 3000: B-cache misses without victims)",
        candidates: &[],
        unavailable_because: "a board signal with no host equivalent; bind a raw event in the site event map",
    },
];

/// Every EV4 event, counter 0's first.
pub static EVENTS: [&[AlphaEvent]; 2] = [MUX0_EVENTS, MUX1_EVENTS];
