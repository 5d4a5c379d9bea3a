//! `-y` cost tables: per Alpha event a typical, minimum and maximum cost of
//! one occurrence, in cycles ("clks") or nanoseconds ("nsec"), as perfex
//! kept per R10000/R12000 event. `-t` prints a table in the format `-c FILE`
//! and the site file (`$PFM_COSTS`, else `/etc/pfm/costs`) read back; a file
//! may hold any subset of the rows.
//!
//! The built-in rows are the model's (`pfm_model::Model::costs`, which
//! also says where the numbers come from); this module applies files over
//! them and prints them.

use super::Error;
use super::events;
use pfm_model::{AlphaEvent, Implementation, Model};
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

/// `1`, `0.25`, `6.5`: at most three decimals, no trailing zeros.
fn number(v: f64) -> String {
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
        let table = Model::of(model).costs;
        let entries = events::flat(model)
            .into_iter()
            .map(|event| {
                let row = table
                    .iter()
                    .find(|r| r.event == event.name)
                    .expect("every event has a built-in cost (unit-tested)");
                Entry {
                    event,
                    cost: Cost::clks(row.typical, row.min, row.max),
                    source: row.source.to_string(),
                }
            })
            .collect();
        CostTable { model, entries }
    }

    pub fn get(&self, event: &AlphaEvent) -> Option<&Entry> {
        self.entries.iter().find(|e| std::ptr::eq(e.event, event))
    }

    /// Applies a cost file (the `-t` format): each row replaces that
    /// event's costs. A row for another model's event is passed over, so
    /// one site file can hold the rows of several models. Returns how many
    /// rows it overrode and how many it passed over.
    pub fn apply(&mut self, text: &str, origin: &str) -> Result<(usize, usize), Error> {
        let mut applied = 0;
        let mut other_models = 0;
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
            // The row's numbers are checked whichever model it is for: a
            // bad row is an error (pfmstat(1)), passed over or not.
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
                    words[0]
                )));
            }
            let unit = match words.get(4).map(|u| u.to_ascii_lowercase()) {
                None => Unit::Clks,
                Some(u) if ["clks", "clk", "cycles"].contains(&u.as_str()) => Unit::Clks,
                Some(u) if ["nsec", "ns"].contains(&u.as_str()) => Unit::Nsec,
                Some(u) => return Err(err(format!("unit {u:?}: clks or nsec"))),
            };
            let event = match events::lookup(self.model, words[0]) {
                Ok(event) => event,
                Err(_) if events::of_another_model(self.model, words[0]) => {
                    other_models += 1;
                    continue;
                }
                Err(e) => return Err(err(e.to_string())),
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
        Ok((applied, other_models))
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
        for rows in Model::all().map(|m| m.costs) {
            for (i, r) in rows.iter().enumerate() {
                assert!(
                    !rows[i + 1..].iter().any(|o| o.event == r.event),
                    "{} twice",
                    r.event
                );
            }
        }
    }

    #[test]
    fn the_printed_table_reads_back_unchanged() {
        for model in Implementation::ALL {
            let table = CostTable::builtin(model);
            let mut copy = CostTable::builtin(model);
            let n = copy.apply(&table.format(), "t").unwrap();
            assert_eq!(n, (table.entries.len(), 0));
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
        assert_eq!(n, (1, 0));
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

    /// One site file may hold every model's table: the rows of other
    /// models are passed over, a name of no model is still refused.
    #[test]
    fn other_models_rows_are_passed_over() {
        let mut t = CostTable::builtin(Implementation::Ev6);
        let before = t.clone();
        let ev5 = CostTable::builtin(Implementation::Ev5).format();
        let rows = ev5
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .count();
        assert_eq!(t.apply(&ev5, "ev5.costs").unwrap(), (0, rows));
        assert_eq!(
            t.entries.iter().map(|e| e.cost).collect::<Vec<_>>(),
            before.entries.iter().map(|e| e.cost).collect::<Vec<_>>()
        );
        let both = format!("{ev5}retinst 2 1 4\n");
        assert_eq!(t.apply(&both, "site").unwrap(), (1, rows));
        assert!(t.apply("PF_NOPE 1 1 1", "f").is_err());
        // Another model's aliases and PAPI presets are passed over too; a
        // bad row is an error whatever model it is for; a number is no name.
        assert_eq!(
            t.apply("brmiss 1 1 1\nPAPI_BR_MSP 1 1 1", "f").unwrap(),
            (0, 2)
        );
        assert!(t.apply("PF5_MUX0_CYCLES x 1 1", "f").is_err());
        assert!(t.apply("40 1 1 1", "f").is_err());
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
