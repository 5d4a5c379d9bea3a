//! `-y` derived statistics: each is printed only when every event it needs
//! was counted (perfex: "A statistic is only printed if counts for the
//! events which define it have been gathered"). A statistic made from an
//! estimate (`-a`) is an estimate.

use super::costs::CostTable;
use pfm_model::Implementation;
use std::collections::HashMap;

/// What the statistics are computed from: event name → (count, estimate).
pub type Counts<'a> = HashMap<&'a str, (f64, bool)>;

#[derive(Debug, Clone, PartialEq)]
pub struct Statistic {
    pub name: String,
    pub value: f64,
    pub estimate: bool,
}

/// The cycle events of every model, in preference order. Not
/// `PF6_MUX1_RET_BRANCH_MISPREDICTS`: it counts cycles on a real 21264, but
/// its name says otherwise and the report keeps it apart.
pub const CYCLE_EVENTS: &[&str] = &[
    "PF_CYCLES",
    "PF5_MUX0_CYCLES",
    "PF5_MUX2_C_CYCLES",
    "PF6_MUX0_CYCLES",
    "PF6_MUX1_CYCLES",
    "PF67_C0_CYCLES",
    "PF67_C1_CYCLES",
];

struct Calc<'a> {
    counts: &'a Counts<'a>,
    out: Vec<Statistic>,
}

impl Calc<'_> {
    fn get(&self, name: &str) -> Option<(f64, bool)> {
        self.counts.get(name).copied()
    }

    fn cycles(&self) -> Option<(f64, bool)> {
        CYCLE_EVENTS.iter().find_map(|n| self.get(n))
    }

    fn push(&mut self, name: impl Into<String>, value: Option<(f64, bool)>) {
        if let Some((value, estimate)) = value.filter(|(v, _)| v.is_finite()) {
            self.out.push(Statistic {
                name: name.into(),
                value,
                estimate,
            });
        }
    }

    /// `scale × a / b`, when both were counted and `b` is not zero.
    fn ratio(
        &self,
        a: Option<(f64, bool)>,
        b: Option<(f64, bool)>,
        scale: f64,
    ) -> Option<(f64, bool)> {
        let ((a, ea), (b, eb)) = (a?, b?);
        (b > 0.0).then(|| (scale * a / b, ea || eb))
    }

    fn per(&mut self, name: &str, num: &str, den: Option<(f64, bool)>, scale: f64) {
        let v = self.ratio(self.get(num), den, scale);
        self.push(name, v);
    }

    fn rate(&mut self, name: &str, num: &str, den: &str) {
        let v = self.ratio(self.get(num), self.get(den), 1.0);
        self.push(name, v);
    }
}

/// The statistics the counted events allow, for `model` at `mhz`.
pub fn derive(
    model: Implementation,
    counts: &Counts,
    mhz: f64,
    costs: &CostTable,
) -> Vec<Statistic> {
    let mut c = Calc {
        counts,
        out: Vec::new(),
    };
    let cycles = c.cycles();
    let seconds = cycles.map(|(v, e)| (v / (mhz * 1e6), e));
    c.push("Run time at the nominal clock (s)", seconds);
    let per_second = |c: &Calc, name: &str| {
        let (n, en) = c.get(name)?;
        let (s, es) = seconds?;
        (s > 0.0).then(|| (n / s / 1e6, en || es))
    };
    match model {
        Implementation::Ev4 | Implementation::Ev45 => {
            let issues = c.get("PF_ISSUES").map(|(v, e)| (2.0 * v, e));
            let v = c.ratio(issues, cycles, 1.0);
            c.push("Issues per cycle", v);
            c.rate(
                "Branch mispredictions / branches",
                "PF_BRANCHMISS",
                "PF_BRANCHI",
            );
            c.rate("D-cache misses / loads", "PF_DCACHE", "PF_LOADI");
            c.per(
                "I-cache misses per 1000 issues",
                "PF_ICACHE",
                issues,
                1000.0,
            );
            c.per("Dual-issue cycles / cycles", "PF_DUAL", cycles, 1.0);
            c.per("Pipeline-dry cycles / cycles", "PF_PIPEDRY", cycles, 1.0);
            c.per(
                "Pipeline-frozen cycles / cycles",
                "PF_PIPEFROZEN",
                cycles,
                1.0,
            );
            c.per("PALmode cycles / cycles", "PF_PALMODE", cycles, 1.0);
            let v = per_second(&c, "PF_FPINST");
            c.push("MFLOPS (FP operate instructions per us)", v);
        }
        Implementation::Ev5 | Implementation::Ev56 | Implementation::Pca56 => {
            let issues = c.get("PF5_MUX0_ISSUES");
            let v = c.ratio(issues, cycles, 1.0);
            c.push("Issued instructions per cycle", v);
            c.rate(
                "Branch mispredictions / flow changes",
                "PF5_MUX2_C_BRANCH_MISPREDICTS",
                "PF5_MUX1_FLOW_CHANGE",
            );
            c.rate(
                "D-cache misses / loads",
                "PF5_MUX2_C_DCACHE_MISSES",
                "PF5_MUX1_C_LOAD_INSTRUCTIONS",
            );
            c.rate(
                "D-cache misses / accesses",
                "PF5_MUX2_C_DCACHE_MISSES",
                "PF5_MUX1_C_DCACHE_ACCESS",
            );
            c.rate(
                "I-cache misses / accesses",
                "PF5_MUX2_C_ICACHE_MISSES",
                "PF5_MUX1_C_ICACHE_ACCESS",
            );
            c.per(
                "I-cache misses per 1000 instructions",
                "PF5_MUX2_C_ICACHE_MISSES",
                issues,
                1000.0,
            );
            c.rate(
                "S-cache misses / accesses",
                "PF5_MUX2_C_SCACHE_MISS",
                "PF5_MUX1_C_SCACHE_ACCESS",
            );
            c.rate(
                "S-cache read misses / reads",
                "PF5_MUX2_C_SCACHE_READ_MISS",
                "PF5_MUX1_C_SCACHE_READ",
            );
            c.rate(
                "S-cache write misses / writes",
                "PF5_MUX2_C_SCACHE_WRITE_MISS",
                "PF5_MUX1_C_SCACHE_WRITE",
            );
            c.rate(
                "B-cache misses / references",
                "PF5_MUX2_C_BCACHE_MISS",
                "PF5_MUX1_C_BCACHE_REF",
            );
            c.rate(
                "B-cache read fills / D-stream reads",
                "PF5_MUX2_C_BCACHE_READ_FILL",
                "PF5_MUX2_C_BCACHE_DREAD",
            );
            c.rate(
                "B-cache D-stream read hits / reads",
                "PF5_MUX1_C_BCACHE_DREAD_HIT",
                "PF5_MUX1_C_BCACHE_READ",
            );
            c.per(
                "DTB misses per 1000 instructions",
                "PF5_MUX2_C_DTB_MISS",
                issues,
                1000.0,
            );
            c.per(
                "ITB misses per 1000 instructions",
                "PF5_MUX2_C_ITB_MISS",
                issues,
                1000.0,
            );
            c.per(
                "Replay traps per 1000 instructions",
                "PF5_MUX1_REPLAY_TRAP",
                issues,
                1000.0,
            );
            c.per(
                "Non-issue cycles / cycles",
                "PF5_MUX1_NON_ISSUE_CYCLES",
                cycles,
                1.0,
            );
            c.per(
                "Pipeline-dry cycles / cycles",
                "PF5_MUX1_PIPELINE_DRY",
                cycles,
                1.0,
            );
            c.per(
                "Long stalls per 1000 cycles",
                "PF5_MUX2_C_LONG_STALLS",
                cycles,
                1000.0,
            );
            let v = per_second(&c, "PF5_MUX1_C_FP_INSTRUCTIONS");
            c.push("MFLOPS (FP operate instructions per us)", v);
            memory_time(
                &mut c,
                costs,
                seconds,
                mhz,
                &[
                    "PF5_MUX1_C_LOAD_INSTRUCTIONS",
                    "PF5_MUX1_C_STORE_INSTRUCTIONS",
                    "PF5_MUX2_C_DCACHE_MISSES",
                    "PF5_MUX2_C_SCACHE_MISS",
                    "PF5_MUX2_C_BCACHE_MISS",
                    "PF5_MUX2_C_BCACHE_READ_FILL",
                    "PF5_MUX2_C_DTB_MISS",
                ],
            );
        }
        Implementation::Ev6 => {
            let retired = c.get("PF6_MUX0_RET_INSTRUCTIONS");
            let v = c.ratio(retired, cycles, 1.0);
            c.push("Retired instructions per cycle", v);
            c.per(
                "Conditional branches / retired instructions",
                "PF6_MUX1_RET_COND_BRANCHES",
                retired,
                1.0,
            );
            let single = c
                .get("PF6_MUX1_RET_DTB_SINGLE_MISSES")
                .map(|(v, e)| (v / 2.0, e));
            let v = c.ratio(single, retired, 1000.0);
            c.push("DTB single misses per 1000 instructions", v);
            c.per(
                "ITB misses per 1000 instructions",
                "PF6_MUX1_RET_ITB_MISSES",
                retired,
                1000.0,
            );
            c.per(
                "Replay traps per 1000 instructions",
                "PF6_MUX1_REPLAY_TRAP",
                retired,
                1000.0,
            );
            c.per(
                "Unaligned traps per 1000 instructions",
                "PF6_MUX1_RET_UNALIGNED_TRAPS",
                retired,
                1000.0,
            );
        }
        Implementation::Ev67 => {
            let retired = c.get("PF67_C0_RET_INST");
            let v = c.ratio(retired, cycles, 1.0);
            c.push("Retired instructions per cycle", v);
            c.per(
                "B-cache misses per 1000 instructions",
                "PF67_C1_BCACHE_MISS",
                retired,
                1000.0,
            );
            c.per(
                "Replay traps per 1000 cycles",
                "PF67_C1_REPLAY_TRAPS",
                cycles,
                1000.0,
            );
            memory_time(&mut c, costs, seconds, mhz, &["PF67_C1_BCACHE_MISS"]);
        }
    }
    c.out
}

/// perfex's "time accessing memory / total time": the typical costs of the
/// memory events counted over the run time from cycles.
fn memory_time(
    c: &mut Calc,
    costs: &CostTable,
    seconds: Option<(f64, bool)>,
    mhz: f64,
    events: &[&str],
) {
    let Some((total, total_estimate)) = seconds.filter(|(s, _)| *s > 0.0) else {
        return;
    };
    let mut spent = 0.0;
    let mut estimate = total_estimate;
    let mut any = false;
    for name in events {
        let (Some((count, e)), Some(entry)) = (
            c.get(name),
            costs.entries.iter().find(|e| e.event.name == *name),
        ) else {
            continue;
        };
        spent += entry.cost.seconds(count, mhz).0;
        estimate |= e;
        any = true;
    }
    if any {
        c.push(
            "Time accessing memory / total time (typical costs)",
            Some((spent / total, estimate)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_need_their_events() {
        let costs = CostTable::builtin(Implementation::Ev6);
        let mut counts: Counts = HashMap::new();
        counts.insert("PF6_MUX1_CYCLES", (2e9, false));
        let s = derive(Implementation::Ev6, &counts, 2000.0, &costs);
        assert_eq!(s.len(), 1, "only the run time from cycles: {s:?}");
        assert_eq!(s[0].value, 1.0);
        counts.insert("PF6_MUX0_RET_INSTRUCTIONS", (3e9, true));
        let s = derive(Implementation::Ev6, &counts, 2000.0, &costs);
        let ipc = s.iter().find(|s| s.name.contains("per cycle")).unwrap();
        assert_eq!(ipc.value, 1.5);
        assert!(ipc.estimate, "made from an estimate");
    }

    #[test]
    fn ev5_rates_and_memory_time() {
        let costs = CostTable::builtin(Implementation::Ev5);
        let counts: Counts = [
            ("PF5_MUX2_C_CYCLES", (1e9, false)),
            ("PF5_MUX2_C_DCACHE_MISSES", (1e6, false)),
            ("PF5_MUX1_C_LOAD_INSTRUCTIONS", (1e8, false)),
        ]
        .into_iter()
        .collect();
        let s = derive(Implementation::Ev5, &counts, 500.0, &costs);
        let get = |n: &str| s.iter().find(|s| s.name.starts_with(n)).map(|s| s.value);
        assert_eq!(get("D-cache misses / loads"), Some(0.01));
        assert_eq!(get("Run time"), Some(2.0));
        // 1e8 loads x 1 + 1e6 misses x 8 cycles = 1.08e8 of 1e9 cycles.
        let m = get("Time accessing memory").unwrap();
        assert!((m - 0.108).abs() < 1e-9, "{m}");
        assert_eq!(get("Branch"), None, "branches were not counted");
    }
}
