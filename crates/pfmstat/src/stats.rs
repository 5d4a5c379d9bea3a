//! `-y` derived statistics: each is printed only when every event it needs
//! was counted (perfex: "A statistic is only printed if counts for the
//! events which define it have been gathered"). A statistic made from an
//! estimate (`-a`) is an estimate. Which statistics a model has is the
//! model's data (`pfm_model::Derivation`); this module evaluates them.

use super::costs::CostTable;
use pfm_model::{Count, Derivation, Implementation, Model};
use std::collections::HashMap;

/// What the statistics are computed from: event name → (count, estimate).
pub type Counts<'a> = HashMap<&'a str, (f64, bool)>;

#[derive(Debug, Clone, PartialEq)]
pub struct Statistic {
    pub name: String,
    pub value: f64,
    pub estimate: bool,
}

struct Calc<'a> {
    counts: &'a Counts<'a>,
    /// The model's cycle events, in preference order.
    cycle_events: &'a [&'a str],
    out: Vec<Statistic>,
}

impl Calc<'_> {
    fn get(&self, name: &str) -> Option<(f64, bool)> {
        self.counts.get(name).copied()
    }

    fn cycles(&self) -> Option<(f64, bool)> {
        self.cycle_events.iter().find_map(|n| self.get(n))
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

    fn count(&self, count: Count, cycles: Option<(f64, bool)>) -> Option<(f64, bool)> {
        match count {
            Count::Cycles => cycles,
            Count::Event(name, factor) => self.get(name).map(|(v, e)| (factor * v, e)),
        }
    }
}

/// The statistics the counted events allow, for `model` at `mhz`.
pub fn derive(
    model: Implementation,
    counts: &Counts,
    mhz: f64,
    costs: &CostTable,
) -> Vec<Statistic> {
    let model = Model::of(model);
    let mut c = Calc {
        counts,
        cycle_events: model.cycle_events,
        out: Vec::new(),
    };
    let cycles = c.cycles();
    let seconds = cycles.map(|(v, e)| (v / (mhz * 1e6), e));
    c.push("Run time at the nominal clock (s)", seconds);
    for statistic in model.statistics() {
        match *statistic {
            Derivation::Ratio {
                name,
                numerator,
                denominator,
                scale,
            } => {
                let v = c.ratio(
                    c.count(numerator, cycles),
                    c.count(denominator, cycles),
                    scale,
                );
                c.push(name, v);
            }
            Derivation::PerMicrosecond { name, event } => {
                let v = c
                    .get(event)
                    .zip(seconds)
                    .and_then(|((n, en), (s, es))| (s > 0.0).then(|| (n / s / 1e6, en || es)));
                c.push(name, v);
            }
            Derivation::MemoryTime { name, events } => {
                memory_time(&mut c, name, costs, seconds, mhz, events);
            }
        }
    }
    c.out
}

/// perfex's "time accessing memory / total time": the typical costs of the
/// memory events counted over the run time from cycles.
fn memory_time(
    c: &mut Calc,
    title: &str,
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
        c.push(title, Some((spent / total, estimate)));
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
