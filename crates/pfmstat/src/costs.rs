//! `-y` cost tables: per Alpha event a typical, minimum and maximum cost of
//! one occurrence, in cycles ("clks") or nanoseconds ("nsec"), as perfex
//! kept per R10000/R12000 event. `-t` prints a table in the format `-c FILE`
//! and the site file (`$PFM_COSTS`, else `/etc/pfm/costs`) read back; a file
//! may hold any subset of the rows.
//!
//! Where the numbers come from (each row names its source):
//! - `definition`: the event *is* a cycle (cycles, stall cycles, issue-width
//!   cycles): one cycle per count, no range.
//! - `HRM 21264 T2-1`: the 21264/EV67 Hardware Reference Manual, Table 2-1
//!   "Pipeline Abort Delay (GCLK cycles)": branch misprediction 7, JSR
//!   misprediction 8, Mbox order trap 14, other Mbox replay traps 13, DTB
//!   miss 13, ITB miss 7. These are the abort penalties alone; a TLB miss
//!   also runs its PALcode fill routine, which the typical and maximum
//!   values add as our estimate.
//! - `HRM 21164PC 2.x`: the 21164PC Hardware Reference Manual's scheduling
//!   notes: a load that misses the Dcache and hits the Bcache has its data
//!   "in 10 or more cycles"; IMULQ latency 12 (+2), IMULH 14 (+2).
//! - `estimate`: ours, from the pipeline structure the manuals describe
//!   (issue width for the per-instruction minimum, load-use latency for the
//!   maximum of a hit, a few hundred ns of DRAM at the chips' clock rates for
//!   memory). They are plausible, not measured: override them with `-c` or
//!   the site file for your machines (perfex's advice too: its maximum
//!   costs were "very pessimistic" and its minimum ones optimistic).

use super::Error;
use super::events;
use pfm_model::{AlphaEvent, Implementation};
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Machine cycles at the nominal clock.
    Clks,
    Nsec,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Clks => "clks",
            Unit::Nsec => "nsec",
        }
    }
}

/// The cost of one occurrence of an event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    pub typical: f64,
    pub min: f64,
    pub max: f64,
    pub unit: Unit,
}

impl Cost {
    const fn clks(typical: f64, min: f64, max: f64) -> Cost {
        Cost {
            typical,
            min,
            max,
            unit: Unit::Clks,
        }
    }

    /// Seconds `count` occurrences cost at `mhz`: (typical, minimum, maximum).
    pub fn seconds(&self, count: f64, mhz: f64) -> (f64, f64, f64) {
        let per = |v: f64| match self.unit {
            Unit::Clks => count * v / (mhz * 1e6),
            Unit::Nsec => count * v * 1e-9,
        };
        (per(self.typical), per(self.min), per(self.max))
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub event: &'static AlphaEvent,
    pub cost: Cost,
    pub source: String,
}

#[derive(Debug, Clone)]
pub struct CostTable {
    pub model: Implementation,
    /// Catalog order.
    pub entries: Vec<Entry>,
}

const DEF: &str = "definition: one cycle per count";

type Row = (&'static str, f64, f64, f64, &'static str);

/// EV4/EV45 (21064/21064A: dual issue, in order; 8 KB direct-mapped caches).
static EV4_COSTS: &[Row] = &[
    (
        "PF_ISSUES",
        1.5,
        1.0,
        2.0,
        "estimate: each count is 2 issues, 1 cycle dual-issued, 2 single-issued",
    ),
    ("PF_PIPEDRY", 1.0, 1.0, 1.0, DEF),
    (
        "PF_LOADI",
        1.0,
        0.5,
        3.0,
        "estimate: half a cycle dual-issued, 3 with a dependent use (load-use latency)",
    ),
    ("PF_PIPEFROZEN", 1.0, 1.0, 1.0, DEF),
    ("PF_BRANCHI", 1.0, 0.5, 1.0, "estimate: one issue slot"),
    ("PF_CYCLES", 1.0, 1.0, 1.0, DEF),
    ("PF_PALMODE", 1.0, 1.0, 1.0, DEF),
    (
        "PF_NONISSUES",
        1.0,
        1.0,
        1.0,
        "definition: each count is one cycle of lost issue (2 slots)",
    ),
    (
        "PF_EXTPIN0",
        30.0,
        20.0,
        60.0,
        "estimate: DEC 3000 Bcache miss with victim write-back, memory at ~150-200 ns",
    ),
    (
        "PF_DCACHE",
        10.0,
        3.0,
        40.0,
        "estimate: line fill from the Bcache (BIU read speed 3-16 cycles per transfer), memory at worst",
    ),
    (
        "PF_ICACHE",
        10.0,
        5.0,
        40.0,
        "estimate: as PF_DCACHE for the I-stream",
    ),
    ("PF_DUAL", 1.0, 1.0, 1.0, DEF),
    (
        "PF_BRANCHMISS",
        4.0,
        4.0,
        5.0,
        "estimate: the 21064's short pipeline refetches in about 4 cycles",
    ),
    (
        "PF_FPINST",
        1.0,
        0.5,
        63.0,
        "estimate: one issue slot; DIVT (double divide) at worst",
    ),
    (
        "PF_INTOPS",
        1.0,
        0.5,
        23.0,
        "estimate: one issue slot; IMULQ at worst",
    ),
    (
        "PF_STOREI",
        1.0,
        0.5,
        3.0,
        "estimate: one issue slot; write-buffer full at worst",
    ),
    (
        "PF_EXTPIN1",
        25.0,
        15.0,
        50.0,
        "estimate: DEC 3000 Bcache miss without victim, memory at ~150-200 ns",
    ),
];

/// EV5/EV56/PCA56 (21164 family: quad issue, in order; 8 KB Dcache with a
/// 2-cycle load latency; on-chip 96 KB Scache on EV5/EV56; board Bcache).
static EV5_COSTS: &[Row] = &[
    ("PF5_MUX0_CYCLES", 1.0, 1.0, 1.0, DEF),
    (
        "PF5_MUX0_ISSUES",
        0.5,
        0.25,
        1.0,
        "estimate: a quarter cycle quad-issued, one cycle single-issued",
    ),
    ("PF5_MUX1_NON_ISSUE_CYCLES", 1.0, 1.0, 1.0, DEF),
    ("PF5_MUX1_SPLIT_ISSUE_CYCLES", 1.0, 1.0, 1.0, DEF),
    ("PF5_MUX1_PIPELINE_DRY", 1.0, 1.0, 1.0, DEF),
    (
        "PF5_MUX1_REPLAY_TRAP",
        6.0,
        5.0,
        10.0,
        "estimate: the IDU flushes and restarts from the trapping instruction (about a mispredict)",
    ),
    ("PF5_MUX1_SINGLE_ISSUE_CYCLES", 1.0, 1.0, 1.0, DEF),
    ("PF5_MUX1_DUAL_ISSUE_CYCLES", 1.0, 1.0, 1.0, DEF),
    ("PF5_MUX1_TRIPLE_ISSUE_CYCLES", 1.0, 1.0, 1.0, DEF),
    ("PF5_MUX1_QUAD_ISSUE_CYCLES", 1.0, 1.0, 1.0, DEF),
    (
        "PF5_MUX1_FLOW_CHANGE",
        1.0,
        0.25,
        1.0,
        "estimate: one issue slot, a fetch bubble when taken",
    ),
    (
        "PF5_MUX1_INTEGER_OPERATE",
        0.5,
        0.25,
        16.0,
        "HRM 21164PC 2.x: IMULH latency 14 (+2) at worst; else one slot",
    ),
    (
        "PF5_MUX1_C_FP_INSTRUCTIONS",
        1.0,
        0.25,
        63.0,
        "estimate: one slot; a double divide at worst",
    ),
    (
        "PF5_MUX1_C_LOAD_INSTRUCTIONS",
        1.0,
        0.25,
        2.0,
        "estimate: one slot; the 2-cycle Dcache load latency at worst",
    ),
    (
        "PF5_MUX1_C_STORE_INSTRUCTIONS",
        1.0,
        0.25,
        1.0,
        "estimate: one issue slot",
    ),
    (
        "PF5_MUX1_C_ICACHE_ACCESS",
        0.0,
        0.0,
        1.0,
        "estimate: fetch overlaps issue",
    ),
    (
        "PF5_MUX1_C_DCACHE_ACCESS",
        0.5,
        0.25,
        2.0,
        "estimate: as loads and stores",
    ),
    (
        "PF5_MUX1_C_BCACHE_VICTIM",
        20.0,
        10.0,
        60.0,
        "estimate: a Bcache write-back to memory, mostly buffered",
    ),
    (
        "PF5_MUX1_C_SCACHE_ACCESS",
        8.0,
        6.0,
        12.0,
        "estimate: a Dcache/Icache miss served by the pipelined on-chip Scache",
    ),
    (
        "PF5_MUX1_C_SCACHE_READ",
        8.0,
        6.0,
        12.0,
        "estimate: as PF5_MUX1_C_SCACHE_ACCESS",
    ),
    (
        "PF5_MUX1_C_SCACHE_WRITE",
        3.0,
        1.0,
        8.0,
        "estimate: write-buffer drain to the Scache",
    ),
    (
        "PF5_MUX1_C_SCACHE_VICTIM",
        10.0,
        5.0,
        40.0,
        "estimate: a write-back to the Bcache or memory",
    ),
    (
        "PF5_MUX1_C_BCACHE_REF",
        12.0,
        10.0,
        30.0,
        "HRM 21164PC 2.x: Bcache hit data in 10 or more cycles",
    ),
    (
        "PF5_MUX1_C_SYS_REQ",
        60.0,
        30.0,
        150.0,
        "estimate: a memory request, ~200-300 ns at 300-500 MHz",
    ),
    (
        "PF5_MUX1_C_BCACHE_READ",
        12.0,
        10.0,
        30.0,
        "HRM 21164PC 2.x: Bcache hit data in 10 or more cycles",
    ),
    (
        "PF5_MUX1_C_BCACHE_DREAD_HIT",
        12.0,
        10.0,
        20.0,
        "HRM 21164PC 2.x: Bcache hit data in 10 or more cycles",
    ),
    (
        "PF5_MUX1_C_BCACHE_DREAD_FILL",
        60.0,
        30.0,
        150.0,
        "estimate: a Bcache miss filled from memory",
    ),
    (
        "PF5_MUX1_C_BCACHE_WRITE",
        5.0,
        1.0,
        20.0,
        "estimate: write-buffer drain to the Bcache",
    ),
    (
        "PF5_MUX1_C_BCACHE_CLN_WRT_HIT",
        3.0,
        1.0,
        10.0,
        "estimate: a write hit on a clean block",
    ),
    (
        "PF5_MUX1_C_READ_MISS_2",
        60.0,
        30.0,
        150.0,
        "estimate: a second outstanding memory read",
    ),
    (
        "PF5_MUX2_C_LONG_STALLS",
        30.0,
        15.0,
        100.0,
        "estimate: the chip counts stalls over 15 cycles",
    ),
    (
        "PF5_MUX2_C_PC_MISPR",
        6.0,
        5.0,
        8.0,
        "estimate: a jump/return target refetch",
    ),
    (
        "PF5_MUX2_C_BRANCH_MISPREDICTS",
        5.0,
        5.0,
        6.0,
        "estimate: the 21164's 5-cycle mispredict restart",
    ),
    (
        "PF5_MUX2_C_ICACHE_MISSES",
        8.0,
        5.0,
        40.0,
        "estimate: refill from the Scache; Bcache or memory at worst",
    ),
    (
        "PF5_MUX2_C_ITB_MISS",
        30.0,
        20.0,
        60.0,
        "estimate: the PALcode ITB fill routine",
    ),
    (
        "PF5_MUX2_C_DCACHE_MISSES",
        8.0,
        6.0,
        40.0,
        "estimate: refill from the Scache; Bcache or memory at worst",
    ),
    (
        "PF5_MUX2_C_DTB_MISS",
        30.0,
        20.0,
        80.0,
        "estimate: the PALcode DTB fill routine; a double miss at worst",
    ),
    (
        "PF5_MUX2_C_LOADS_MERGED",
        2.0,
        0.0,
        8.0,
        "estimate: waits on a fill already outstanding",
    ),
    (
        "PF5_MUX2_C_LDU_REPLAYS",
        6.0,
        5.0,
        10.0,
        "estimate: a replay trap",
    ),
    (
        "PF5_MUX2_C_WB_MAF_FULL_REPLAYS",
        6.0,
        5.0,
        20.0,
        "estimate: a replay trap, longer while the buffer drains",
    ),
    ("PF5_MUX2_C_EXTERNAL", 1.0, 1.0, 1.0, DEF),
    ("PF5_MUX2_C_CYCLES", 1.0, 1.0, 1.0, DEF),
    (
        "PF5_MUX2_C_MEM_BARRIER",
        1.0,
        1.0,
        1.0,
        "definition: stall cycles",
    ),
    (
        "PF5_MUX2_C_LOAD_LOCKED",
        8.0,
        2.0,
        40.0,
        "estimate: LDx_L reads through to the Scache or Bcache",
    ),
    (
        "PF5_MUX2_C_SCACHE_MISS",
        20.0,
        10.0,
        100.0,
        "estimate: served by the Bcache (HRM 21164PC: 10 or more) or memory",
    ),
    (
        "PF5_MUX2_C_SCACHE_READ_MISS",
        20.0,
        10.0,
        100.0,
        "estimate: as PF5_MUX2_C_SCACHE_MISS",
    ),
    (
        "PF5_MUX2_C_SCACHE_WRITE_MISS",
        20.0,
        10.0,
        100.0,
        "estimate: as PF5_MUX2_C_SCACHE_MISS",
    ),
    (
        "PF5_MUX2_C_SCACHE_SH_WRITE",
        20.0,
        10.0,
        60.0,
        "estimate: a write to a shared block broadcasts on the system bus",
    ),
    (
        "PF5_MUX2_C_SCACHE_WRITE",
        2.0,
        1.0,
        5.0,
        "estimate: a write into the Scache",
    ),
    (
        "PF5_MUX2_C_BCACHE_MISS",
        60.0,
        30.0,
        150.0,
        "estimate: a memory read, ~200-300 ns at 300-500 MHz",
    ),
    (
        "PF5_MUX2_C_SYS_INV",
        5.0,
        0.0,
        20.0,
        "estimate: an invalidate probe from another agent",
    ),
    (
        "PF5_MUX2_C_SYS_READ_REQ",
        5.0,
        0.0,
        20.0,
        "estimate: a read probe from another agent",
    ),
    (
        "PF5_MUX2_C_BCACHE_DREAD",
        12.0,
        10.0,
        30.0,
        "HRM 21164PC 2.x: Bcache hit data in 10 or more cycles",
    ),
    (
        "PF5_MUX2_C_BCACHE_READ_HIT",
        12.0,
        10.0,
        20.0,
        "HRM 21164PC 2.x: Bcache hit data in 10 or more cycles",
    ),
    (
        "PF5_MUX2_C_BCACHE_READ_FILL",
        60.0,
        30.0,
        150.0,
        "estimate: a Bcache miss filled from memory",
    ),
    (
        "PF5_MUX2_C_BCACHE_WRITE_HIT",
        3.0,
        1.0,
        10.0,
        "estimate: a write hit in the Bcache",
    ),
    (
        "PF5_MUX2_C_BCACHE_WRITE_FILL",
        60.0,
        30.0,
        150.0,
        "estimate: a write miss filled from memory",
    ),
    (
        "PF5_MUX2_C_SYS_READ_FLUSH_HIT",
        5.0,
        0.0,
        20.0,
        "estimate: a probe from another agent",
    ),
    (
        "PF5_MUX2_C_SYS_READ_FLUSH_MISS",
        5.0,
        0.0,
        20.0,
        "estimate: a probe from another agent",
    ),
    (
        "PF5_MUX2_C_READ_MISS_3",
        60.0,
        30.0,
        150.0,
        "estimate: a third outstanding memory read",
    ),
];

/// EV6 (21264: out of order, 4-wide; 64 KB L1 with a 3-cycle load-use).
static EV6_COSTS: &[Row] = &[
    ("PF6_MUX0_CYCLES", 1.0, 1.0, 1.0, DEF),
    (
        "PF6_MUX0_RET_INSTRUCTIONS",
        0.5,
        0.25,
        1.0,
        "estimate: a quarter cycle at the 4-wide fetch rate",
    ),
    ("PF6_MUX1_CYCLES", 1.0, 1.0, 1.0, DEF),
    (
        "PF6_MUX1_RET_COND_BRANCHES",
        0.5,
        0.25,
        1.0,
        "estimate: one fetch slot",
    ),
    (
        "PF6_MUX1_RET_BRANCH_MISPREDICTS",
        1.0,
        1.0,
        1.0,
        "definition: counts cycles on a real 21264 (header), so one cycle per count; a real misprediction costs 7 (HRM 21264 T2-1)",
    ),
    (
        "PF6_MUX1_RET_DTB_SINGLE_MISSES",
        15.0,
        6.5,
        50.0,
        "HRM 21264 T2-1: DTB miss abort 13 (+ PALcode fill, estimate), halved: the chip counts each miss twice",
    ),
    (
        "PF6_MUX1_RET_DTB_DOUBLE_MISSES",
        60.0,
        26.0,
        200.0,
        "HRM 21264 T2-1: two DTB miss aborts of 13 (+ two PALcode fills, estimate)",
    ),
    (
        "PF6_MUX1_RET_ITB_MISSES",
        25.0,
        7.0,
        100.0,
        "HRM 21264 T2-1: ITB miss abort 7 (+ PALcode fill, estimate)",
    ),
    (
        "PF6_MUX1_RET_UNALIGNED_TRAPS",
        300.0,
        100.0,
        1000.0,
        "estimate: a trap into the OS, which emulates the access",
    ),
    (
        "PF6_MUX1_REPLAY_TRAP",
        13.0,
        13.0,
        14.0,
        "HRM 21264 T2-1: Mbox replay trap 13, order trap 14",
    ),
];

/// EV67 (21264A): the EV6 core; aggregate counting by pairs.
static EV67_COSTS: &[Row] = &[
    (
        "PF67_C0_RET_INST",
        0.5,
        0.25,
        1.0,
        "estimate: a quarter cycle at the 4-wide fetch rate",
    ),
    ("PF67_C0_CYCLES", 1.0, 1.0, 1.0, DEF),
    ("PF67_C1_CYCLES", 1.0, 1.0, 1.0, DEF),
    (
        "PF67_C1_UNDEFINED",
        0.0,
        0.0,
        0.0,
        "never counted: undefined on the chip",
    ),
    (
        "PF67_C1_BCACHE_MISS",
        100.0,
        40.0,
        250.0,
        "estimate: a memory read, ~120-150 ns at 667-833 MHz",
    ),
    (
        "PF67_C1_REPLAY_TRAPS",
        13.0,
        13.0,
        14.0,
        "HRM 21264/EV67 T2-1: Mbox replay trap 13, order trap 14",
    ),
    (
        "PF67_C1_RET_DELAY",
        1.0,
        1.0,
        1.0,
        "definition: delay cycles",
    ),
];

fn rows(model: Implementation) -> &'static [Row] {
    match model {
        Implementation::Ev4 | Implementation::Ev45 => EV4_COSTS,
        Implementation::Ev5 | Implementation::Ev56 | Implementation::Pca56 => EV5_COSTS,
        Implementation::Ev6 => EV6_COSTS,
        Implementation::Ev67 => EV67_COSTS,
    }
}

/// `1`, `0.25`, `6.5`: at most three decimals, no trailing zeros.
pub fn number(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-" {
        "0".into()
    } else {
        s.into()
    }
}

impl CostTable {
    /// The built-in table of `model`: one row per event of its catalog.
    pub fn builtin(model: Implementation) -> CostTable {
        let table = rows(model);
        let entries = events::flat(model)
            .into_iter()
            .map(|event| {
                let (_, typical, min, max, source) = table
                    .iter()
                    .find(|r| r.0 == event.name)
                    .expect("every event has a built-in cost (unit-tested)");
                Entry {
                    event,
                    cost: Cost::clks(*typical, *min, *max),
                    source: source.to_string(),
                }
            })
            .collect();
        CostTable { model, entries }
    }

    pub fn get(&self, event: &AlphaEvent) -> Option<&Entry> {
        self.entries.iter().find(|e| std::ptr::eq(e.event, event))
    }

    /// Applies a cost file (the `-t` format): each row replaces that
    /// event's costs. Returns how many rows it overrode.
    pub fn apply(&mut self, text: &str, origin: &str) -> Result<usize, Error> {
        let mut applied = 0;
        for (index, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |message: String| Error::CostFile {
                origin: origin.to_string(),
                line: index + 1,
                message,
            };
            let words: Vec<&str> = line.split_whitespace().collect();
            if !(4..=5).contains(&words.len()) {
                return Err(err(format!(
                    "expected EVENT TYPICAL MINIMUM MAXIMUM [clks|nsec], found {line:?}"
                )));
            }
            let event = events::lookup(self.model, words[0]).map_err(|e| err(e.to_string()))?;
            let value = |w: &str, what: &str| -> Result<f64, Error> {
                w.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| err(format!("{what} {w:?} is not a cost (a number >= 0)")))
            };
            let typical = value(words[1], "typical")?;
            let min = value(words[2], "minimum")?;
            let max = value(words[3], "maximum")?;
            if !(min <= typical && typical <= max) {
                return Err(err(format!(
                    "{}: needs minimum <= typical <= maximum ({min} {typical} {max})",
                    event.name
                )));
            }
            let unit = match words.get(4).map(|u| u.to_ascii_lowercase()) {
                None => Unit::Clks,
                Some(u) if ["clks", "clk", "cycles"].contains(&u.as_str()) => Unit::Clks,
                Some(u) if ["nsec", "ns"].contains(&u.as_str()) => Unit::Nsec,
                Some(u) => return Err(err(format!("unit {u:?}: clks or nsec"))),
            };
            let entry = self
                .entries
                .iter_mut()
                .find(|e| std::ptr::eq(e.event, event))
                .expect("lookup returns catalog events");
            entry.cost = Cost {
                typical,
                min,
                max,
                unit,
            };
            entry.source = format!("override: {origin} line {}", index + 1);
            applied += 1;
        }
        Ok(applied)
    }

    /// The table in the format [`CostTable::apply`] reads.
    pub fn format(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# pfmstat cost table for the {} ({}): cost of one occurrence of each event",
            self.model,
            self.model.chip()
        );
        let _ = writeln!(
            out,
            "# Copy to $PFM_COSTS, /etc/pfm/costs or a -c file and edit; delete rows you keep as built in."
        );
        let _ = writeln!(
            out,
            "# {:<32} {:>8} {:>8} {:>8}  {:<5} # source",
            "EVENT", "TYPICAL", "MINIMUM", "MAXIMUM", "UNIT"
        );
        for e in &self.entries {
            let _ = writeln!(
                out,
                "{:<34} {:>8} {:>8} {:>8}  {:<5} # {}",
                e.event.name,
                number(e.cost.typical),
                number(e.cost.min),
                number(e.cost.max),
                e.cost.unit.name(),
                e.source
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_of_every_model_has_one_sane_cost() {
        for model in Implementation::ALL {
            let table = CostTable::builtin(model);
            assert_eq!(table.entries.len(), events::flat(model).len());
            for e in &table.entries {
                let c = e.cost;
                assert!(c.min <= c.typical && c.typical <= c.max, "{}", e.event.name);
                assert!(!e.source.is_empty());
            }
        }
        for rows in [EV4_COSTS, EV5_COSTS, EV6_COSTS, EV67_COSTS] {
            for (i, r) in rows.iter().enumerate() {
                assert!(!rows[i + 1..].iter().any(|o| o.0 == r.0), "{} twice", r.0);
            }
        }
    }

    #[test]
    fn the_printed_table_reads_back_unchanged() {
        for model in Implementation::ALL {
            let table = CostTable::builtin(model);
            let mut copy = CostTable::builtin(model);
            let n = copy.apply(&table.format(), "t").unwrap();
            assert_eq!(n, table.entries.len());
            for (a, b) in table.entries.iter().zip(&copy.entries) {
                assert_eq!(a.cost, b.cost, "{}", a.event.name);
            }
        }
    }

    #[test]
    fn one_row_overrides_one_event() {
        let mut t = CostTable::builtin(Implementation::Ev6);
        let before = t.clone();
        let n = t
            .apply(
                "# site\nretinst 2 1 4 clks  # measured\n\n",
                "/etc/pfm/costs",
            )
            .unwrap();
        assert_eq!(n, 1);
        let changed: Vec<_> = t
            .entries
            .iter()
            .zip(&before.entries)
            .filter(|(a, b)| a.cost != b.cost)
            .map(|(a, _)| a.event.name)
            .collect();
        assert_eq!(changed, ["PF6_MUX0_RET_INSTRUCTIONS"]);
        let e = &t.entries[1];
        assert_eq!((e.cost.typical, e.cost.min, e.cost.max), (2.0, 1.0, 4.0));
        assert_eq!(e.source, "override: /etc/pfm/costs line 2");
        t.apply("PF6_MUX0_CYCLES 0.5 0.5 0.5 nsec", "f").unwrap();
        assert_eq!(t.entries[0].cost.unit, Unit::Nsec);
    }

    #[test]
    fn bad_rows_name_their_line() {
        let mut t = CostTable::builtin(Implementation::Ev4);
        for bad in [
            "PF_CYCLES 1 1",
            "PF_NOPE 1 1 1",
            "PF_CYCLES x 1 1",
            "PF_CYCLES 1 2 3",
            "PF_CYCLES 1 1 1 furlongs",
            "PF_CYCLES -1 -1 1",
        ] {
            let Err(Error::CostFile { line, .. }) = t.apply(&format!("# ok\n{bad}"), "f") else {
                panic!("{bad:?} must be refused")
            };
            assert_eq!(line, 2, "{bad}");
        }
    }

    #[test]
    fn seconds_at_the_clock() {
        let c = Cost::clks(10.0, 5.0, 20.0);
        let (t, lo, hi) = c.seconds(1e6, 1000.0);
        assert!(
            (t - 0.01).abs() < 1e-12 && (lo - 0.005).abs() < 1e-12 && (hi - 0.02).abs() < 1e-12
        );
        let ns = Cost {
            unit: Unit::Nsec,
            ..c
        };
        assert!((ns.seconds(1e6, 1000.0).0 - 0.01).abs() < 1e-12);
        assert_eq!(number(6.5), "6.5");
        assert_eq!(number(13.0), "13");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(0.0), "0");
    }
}
