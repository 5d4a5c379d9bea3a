//! Built-in costs: per Alpha event a typical, minimum and maximum cost of
//! one occurrence in cycles, as perfex kept per R10000/R12000 event. The
//! tools print and override them; the numbers are the model's.
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

/// The cost of one occurrence of `event`, in cycles at the nominal clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostRow {
    pub event: &'static str,
    pub typical: f64,
    pub min: f64,
    pub max: f64,
    /// Where the numbers come from.
    pub source: &'static str,
}

pub(crate) const DEF: &str = "definition: one cycle per count";

pub(crate) const fn row(
    event: &'static str,
    typical: f64,
    min: f64,
    max: f64,
    source: &'static str,
) -> CostRow {
    CostRow {
        event,
        typical,
        min,
        max,
        source,
    }
}
