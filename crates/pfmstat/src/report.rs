//! The report: counts per event (unavailable events say so, never 0;
//! approximate ones are marked; `-a` estimates are marked with their share),
//! `-mp` per-CPU and per-process sections, `-y` costs and statistics; as
//! text (perfex-like) or JSON.

use super::accounting::Scaled;
use super::client::Fidelity;
use super::costs::{CostTable, number};
use super::procs::Process;
use super::stats::{self, Statistic};
use pfm_model::{AlphaEvent, Fidelity as TableFidelity, Implementation};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    /// pfmstat's own exit status: the command's (128 + signal if killed).
    pub fn status(self) -> u8 {
        match self {
            Exit::Code(c) => u8::try_from(c & 0xff).unwrap_or(1),
            Exit::Signal(s) => u8::try_from((128 + s).min(255)).unwrap_or(255),
        }
    }

    fn text(self) -> String {
        match self {
            Exit::Code(c) => format!("exit status {c}"),
            Exit::Signal(s) => format!("killed by signal {s}"),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Outcome {
    Counted {
        scaled: Scaled,
        /// The raw count while programmed (the value itself when exact).
        raw: u64,
        per_cpu: Vec<u64>,
        fidelity: Fidelity,
        /// Events per increment of the counter (EV4: the period).
        resolution: u64,
    },
    /// `-a`: the run ended before the event got a slice.
    NotObserved {
        fidelity: Fidelity,
    },
    Unavailable {
        reason: String,
    },
}

#[derive(Debug, Clone)]
pub struct EventRow {
    pub number: usize,
    pub event: &'static AlphaEvent,
    pub aliases: Vec<&'static str>,
    pub outcome: Outcome,
}

impl EventRow {
    pub fn value(&self) -> Option<(f64, bool)> {
        match &self.outcome {
            Outcome::Counted { scaled, .. } => Some((scaled.value, !scaled.exact)),
            _ => None,
        }
    }
}

/// Why the host cannot count `event`, from the model's table (the device
/// says only `EOPNOTSUPP`; `pfmd --list-events` and its log say more).
pub fn unavailable_reason(event: &AlphaEvent) -> String {
    if event.candidates.is_empty() {
        format!("EOPNOTSUPP: {}", event.unavailable_because)
    } else {
        format!(
            "EOPNOTSUPP: this host can open none of {}",
            event
                .candidates
                .iter()
                .map(|c| c.formula)
                .collect::<Vec<_>>()
                .join("; ")
        )
    }
}

/// The formula an approximate event is likely counted with: the model's
/// first approximate candidate (`pfmd --list-events` shows the one chosen).
fn approximation(event: &AlphaEvent) -> &'static str {
    event
        .candidates
        .iter()
        .find(|c| c.fidelity == TableFidelity::Approximate)
        .map_or("a documented formula", |c| c.formula)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Multiplexing {
    pub slice_ms: u64,
    pub configurations: usize,
    pub switches: u64,
    pub switch_time_s: f64,
    /// The command had other threads/processes while the mux was switched.
    pub tasks_lost: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PerProcess {
    pub processes: Vec<Process>,
    /// CPU time of the whole tree from wait4's rusage, ns.
    pub tree_cpu_ns: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CostRow {
    pub number: usize,
    pub event: &'static str,
    pub count: f64,
    pub estimate: bool,
    pub typical: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Costs {
    pub mhz: f64,
    pub rows: Vec<CostRow>,
    pub total: (f64, f64, f64),
    pub statistics: Vec<Statistic>,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub command: Vec<String>,
    pub pid: i32,
    pub exit: Exit,
    pub model: Implementation,
    pub ncpus: usize,
    pub clock_khz: u64,
    pub device: String,
    pub modes: String,
    pub elapsed_s: f64,
    pub counted_s: f64,
    /// `-s`: how many SIGUSR1..SIGUSR2 windows were opened.
    pub windows: Option<u32>,
    pub multiplexing: Option<Multiplexing>,
    pub events: Vec<EventRow>,
    pub per_process: Option<PerProcess>,
    pub costs: Option<Costs>,
    pub notes: Vec<String>,
}

/// Counted events × costs, most costly (typical) first; totals are the
/// plain sums of the rows. Events with no count have no row.
pub fn cost_rows(events: &[EventRow], table: &CostTable, mhz: f64) -> Costs {
    let mut rows: Vec<CostRow> = events
        .iter()
        .filter_map(|row| {
            let (count, estimate) = row.value()?;
            let entry = table.get(row.event)?;
            let (typical, min, max) = entry.cost.seconds(count, mhz);
            Some(CostRow {
                number: row.number,
                event: row.event.name,
                count,
                estimate,
                typical,
                min,
                max,
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        b.typical
            .total_cmp(&a.typical)
            .then_with(|| a.event.cmp(b.event))
    });
    let total = rows.iter().fold((0.0, 0.0, 0.0), |t, r| {
        (t.0 + r.typical, t.1 + r.min, t.2 + r.max)
    });
    Costs {
        mhz,
        rows,
        total,
        statistics: Vec::new(),
    }
}

/// The statistics of `events` (their counts or estimates).
pub fn statistics(
    model: Implementation,
    events: &[EventRow],
    mhz: f64,
    table: &CostTable,
) -> Vec<Statistic> {
    let counts: stats::Counts = events
        .iter()
        .filter_map(|r| Some((r.event.name, r.value()?)))
        .collect();
    stats::derive(model, &counts, mhz, table)
}

fn count_text(row: &EventRow) -> String {
    match &row.outcome {
        Outcome::Counted { scaled, raw, .. } if scaled.exact => raw.to_string(),
        Outcome::Counted { scaled, .. } => format!("~{:.0}", scaled.value),
        Outcome::NotObserved { .. } => "not observed".into(),
        Outcome::Unavailable { .. } => "unavailable".into(),
    }
}

fn notes_text(row: &EventRow) -> String {
    let mut notes = Vec::new();
    match &row.outcome {
        Outcome::Counted {
            scaled,
            fidelity,
            resolution,
            raw,
            ..
        } => {
            if !scaled.exact {
                notes.push(format!(
                    "estimate: counted {:.1}% of the time ({raw} counted, x{:.2})",
                    scaled.share * 100.0,
                    scaled.factor
                ));
            }
            if *fidelity == Fidelity::Approximate {
                notes.push(format!("approximate: {}", approximation(row.event)));
            }
            if *resolution > 1 {
                notes.push(format!("resolution {resolution} events per CPU"));
            }
        }
        Outcome::NotObserved { .. } => {
            notes.push("never observed: the command used no CPU time while this event was on its counter (too short a run for -a?)".into())
        }
        Outcome::Unavailable { reason } => notes.push(reason.clone()),
    }
    notes.join("; ")
}

impl Report {
    fn mhz(&self) -> f64 {
        self.clock_khz as f64 / 1000.0
    }

    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "pfmstat: {}: pid {}, {}",
            self.command.join(" "),
            self.pid,
            self.exit.text()
        );
        let _ = writeln!(
            o,
            "model {} ({}), {} CPUs, nominal clock {:.3} MHz, device {}",
            self.model,
            self.model.chip(),
            self.ncpus,
            self.mhz(),
            self.device
        );
        let _ = writeln!(
            o,
            "counted: the command and all its descendants (PCNTLOGSELECT by the command's process before exec); modes: {}",
            self.modes
        );
        let _ = write!(o, "elapsed {:.3} s", self.elapsed_s);
        if let Some(w) = self.windows {
            let _ = write!(
                o,
                ", counted {:.3} s in {w} SIGUSR1..SIGUSR2 window{}",
                self.counted_s,
                if w == 1 { "" } else { "s" }
            );
        }
        let _ = writeln!(o);
        if let Some(m) = &self.multiplexing {
            let _ = writeln!(
                o,
                "multiplexed (-a): {} configurations, {} ms slices, {} switches costing {:.3} ms in all; estimates scale by the command's CPU time per slice",
                m.configurations,
                m.slice_ms,
                m.switches,
                m.switch_time_s * 1e3
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            " {:>3}  {:<34} {:>3} {:>20}  notes",
            "#", "event", "ctr", "count"
        );
        for row in &self.events {
            let _ = writeln!(
                o,
                " {:>3}  {:<34} {:>3} {:>20}  {}",
                row.number,
                row.event.name,
                row.event.counter,
                count_text(row),
                notes_text(row)
            );
        }
        if let Some(pp) = &self.per_process {
            self.per_cpu_text(&mut o);
            self.per_process_text(&mut o, pp);
        }
        if let Some(costs) = &self.costs {
            costs_text(&mut o, self, costs);
        }
        if !self.notes.is_empty() {
            let _ = writeln!(o);
            for note in &self.notes {
                let _ = writeln!(o, "note: {note}");
            }
        }
        o
    }

    fn counted_rows(&self) -> impl Iterator<Item = &EventRow> {
        self.events
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Counted { .. }))
    }

    fn per_cpu_text(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "\nper CPU (the device's PCNTOPENEACH counts{}):",
            if self.multiplexing.is_some() {
                ", scaled like the totals"
            } else {
                ""
            }
        );
        for row in self.counted_rows() {
            let Outcome::Counted {
                per_cpu, scaled, ..
            } = &row.outcome
            else {
                continue;
            };
            let cells: Vec<String> = per_cpu
                .iter()
                .enumerate()
                .map(|(cpu, v)| format!("cpu{cpu} {:.0}", *v as f64 * scaled.factor))
                .collect();
            let _ = writeln!(o, "  {:<34} {}", row.event.name, cells.join("  "));
        }
    }

    fn per_process_text(&self, o: &mut String, pp: &PerProcess) {
        let _ = writeln!(
            o,
            "\nper process: CPU time from /proc; the device counts the whole tree into one set of counters, so the event counts below are the totals apportioned by CPU time (~), not counted per process:"
        );
        let rows: Vec<&EventRow> = self.counted_rows().collect();
        let _ = write!(
            o,
            "  {:>7} {:>7} {:<16} {:>10} {:>7}",
            "pid", "ppid", "command", "cpu s", "share"
        );
        for r in &rows {
            let _ = write!(o, " {:>22}", r.event.name);
        }
        let _ = writeln!(o);
        let total = pp.tree_cpu_ns.max(1) as f64;
        let mut seen = 0u64;
        let line = |o: &mut String, label: String, ns: u64| {
            let share = ns as f64 / total;
            let _ = write!(
                o,
                "  {label} {:>10.3} {:>6.1}%",
                ns as f64 / 1e9,
                share * 100.0
            );
            for r in &rows {
                let v = r.value().map_or(0.0, |(v, _)| v);
                let _ = write!(o, " {:>22}", format!("~{:.0}", v * share));
            }
            let _ = writeln!(o);
        };
        for p in &pp.processes {
            let ns = p.cpu_ns.min(pp.tree_cpu_ns);
            seen += ns;
            let comm: String = p.comm.chars().take(16).collect();
            line(o, format!("{:>7} {:>7} {comm:<16}", p.pid, p.ppid), ns);
        }
        let rest = pp.tree_cpu_ns.saturating_sub(seen);
        line(
            o,
            format!("{:>7} {:>7} {:<16}", "-", "-", "(unattributed)"),
            rest,
        );
        let _ = writeln!(
            o,
            "  tree CPU time {:.3} s (wait4 rusage); device totals are in the table above",
            pp.tree_cpu_ns as f64 / 1e9
        );
    }

    pub fn json(&self) -> Value {
        let events: Vec<Value> = self
            .events
            .iter()
            .map(|row| {
                let mut v = json!({
                    "number": row.number,
                    "name": row.event.name,
                    "aliases": row.aliases,
                    "counter": row.event.counter,
                    "description": row.event.description,
                });
                match &row.outcome {
                    Outcome::Counted {
                        scaled,
                        raw,
                        per_cpu,
                        fidelity,
                        resolution,
                    } => {
                        v["status"] = json!("counted");
                        v["count"] = if scaled.exact {
                            json!(raw)
                        } else {
                            json!(scaled.value.round() as u64)
                        };
                        v["estimate"] = json!(!scaled.exact);
                        v["raw_count"] = json!(raw);
                        v["share"] = json!(scaled.share);
                        v["scale"] = json!(scaled.factor);
                        v["fidelity"] = json!(fidelity.name());
                        if *fidelity == Fidelity::Approximate {
                            v["approximation"] = json!(approximation(row.event));
                        }
                        v["resolution"] = json!(resolution);
                        v["per_cpu"] = json!(per_cpu);
                    }
                    Outcome::NotObserved { fidelity } => {
                        v["status"] = json!("not_observed");
                        v["count"] = Value::Null;
                        v["fidelity"] = json!(fidelity.name());
                    }
                    Outcome::Unavailable { reason } => {
                        v["status"] = json!("unavailable");
                        v["count"] = Value::Null;
                        v["reason"] = json!(reason);
                    }
                }
                v
            })
            .collect();
        let mut out = json!({
            "command": self.command,
            "pid": self.pid,
            "exit": match self.exit {
                Exit::Code(c) => json!({"code": c}),
                Exit::Signal(s) => json!({"signal": s}),
            },
            "model": self.model.name(),
            "chip": self.model.chip(),
            "ncpus": self.ncpus,
            "clock_mhz": self.mhz(),
            "device": self.device,
            "modes": self.modes,
            "elapsed_s": self.elapsed_s,
            "counted_s": self.counted_s,
            "events": events,
            "notes": self.notes,
        });
        if let Some(w) = self.windows {
            out["windows"] = json!(w);
        }
        if let Some(m) = &self.multiplexing {
            out["multiplexing"] = json!({
                "slice_ms": m.slice_ms,
                "configurations": m.configurations,
                "switches": m.switches,
                "switch_time_s": m.switch_time_s,
                "tasks_created_before_a_switch_lost": m.tasks_lost,
            });
        }
        if let Some(pp) = &self.per_process {
            let total = pp.tree_cpu_ns.max(1) as f64;
            out["per_process"] = json!({
                "method": "CPU time from /proc; event counts apportioned by CPU share (the device cannot split counts per process)",
                "tree_cpu_ns": pp.tree_cpu_ns,
                "processes": pp.processes.iter().map(|p| json!({
                    "pid": p.pid,
                    "ppid": p.ppid,
                    "command": p.comm,
                    "cpu_ns": p.cpu_ns,
                    "threads": p.threads,
                    "share": p.cpu_ns.min(pp.tree_cpu_ns) as f64 / total,
                })).collect::<Vec<_>>(),
            });
        }
        if let Some(c) = &self.costs {
            out["costs"] = json!({
                "clock_mhz": c.mhz,
                "rows": c.rows.iter().map(|r| json!({
                    "number": r.number,
                    "event": r.event,
                    "count": r.count,
                    "estimate": r.estimate,
                    "typical_s": r.typical,
                    "min_s": r.min,
                    "max_s": r.max,
                })).collect::<Vec<_>>(),
                "total": {"typical_s": c.total.0, "min_s": c.total.1, "max_s": c.total.2},
            });
            out["statistics"] = json!(
                c.statistics
                    .iter()
                    .map(|s| json!({"name": s.name, "value": s.value, "estimate": s.estimate}))
                    .collect::<Vec<_>>()
            );
        }
        out
    }
}

fn costs_text(o: &mut String, report: &Report, costs: &Costs) {
    let _ = writeln!(
        o,
        "\ncosts for the {} ({}) at {:.3} MHz (nominal clock, PCNTGETINFO pi_cpu_khz); most costly first:",
        report.model,
        report.model.chip(),
        costs.mhz
    );
    let _ = writeln!(
        o,
        " {:>3}  {:<34} {:>20} {:>13} {:>13} {:>13}",
        "#", "event", "count", "typical (s)", "minimum (s)", "maximum (s)"
    );
    for r in &costs.rows {
        let count = if r.estimate {
            format!("~{:.0}", r.count)
        } else {
            format!("{:.0}", r.count)
        };
        let _ = writeln!(
            o,
            " {:>3}  {:<34} {:>20} {:>13.6} {:>13.6} {:>13.6}",
            r.number, r.event, count, r.typical, r.min, r.max
        );
    }
    let _ = writeln!(
        o,
        " {:>3}  {:<34} {:>20} {:>13.6} {:>13.6} {:>13.6}",
        "", "total (sum of the rows)", "", costs.total.0, costs.total.1, costs.total.2
    );
    let _ = writeln!(
        o,
        "      (rows overlap: a cycle event's time includes the other events' time, so the total is not the run time)"
    );
    if costs.statistics.is_empty() {
        let _ = writeln!(o, "statistics: none (the counted events define none)");
    } else {
        let _ = writeln!(o, "statistics:");
        for s in &costs.statistics {
            let _ = writeln!(
                o,
                "  {:<60} {:>14}{}",
                s.name,
                number_for_stat(s.value),
                if s.estimate { "  (estimate)" } else { "" }
            );
        }
    }
}

fn number_for_stat(v: f64) -> String {
    if v != 0.0 && v.abs() < 0.001 {
        format!("{v:.3e}")
    } else {
        let s = number(v);
        if s.contains('.') || v.abs() >= 1.0 || v == 0.0 {
            s
        } else {
            format!("{v:.4}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::lookup;

    fn counted(model: Implementation, name: &str, value: u64, share: f64) -> EventRow {
        let event = lookup(model, name).unwrap();
        let exact = share >= 1.0;
        EventRow {
            number: crate::events::number(model, event),
            event,
            aliases: vec![],
            outcome: Outcome::Counted {
                scaled: Scaled {
                    value: value as f64 / share,
                    exact,
                    share,
                    factor: 1.0 / share,
                },
                raw: value,
                per_cpu: vec![value],
                fidelity: Fidelity::Exact,
                resolution: 1,
            },
        }
    }

    #[test]
    fn cost_rows_are_sorted_and_total_their_sum() {
        let m = Implementation::Ev5;
        let table = CostTable::builtin(m);
        let events = vec![
            counted(m, "PF5_MUX0_ISSUES", 1_000_000, 1.0),
            counted(m, "PF5_MUX2_C_CYCLES", 2_000_000, 1.0),
            counted(m, "PF5_MUX1_C_LOAD_INSTRUCTIONS", 300_000, 1.0),
            EventRow {
                number: 0,
                event: lookup(m, "PF5_MUX2_C_BCACHE_MISS").unwrap(),
                aliases: vec![],
                outcome: Outcome::Unavailable { reason: "x".into() },
            },
        ];
        let c = cost_rows(&events, &table, 500.0);
        let names: Vec<&str> = c.rows.iter().map(|r| r.event).collect();
        assert_eq!(
            names,
            [
                "PF5_MUX2_C_CYCLES",
                "PF5_MUX0_ISSUES",
                "PF5_MUX1_C_LOAD_INSTRUCTIONS"
            ],
            "2e6 x 1 > 1e6 x 0.5 > 3e5 x 1 cycles; unavailable events have no row"
        );
        for w in c.rows.windows(2) {
            assert!(w[0].typical >= w[1].typical);
        }
        let sum: f64 = c.rows.iter().map(|r| r.max).sum();
        assert_eq!(c.total.2, sum);
        assert!((c.rows[0].typical - 2e6 / 500e6).abs() < 1e-15);
    }

    #[test]
    fn unavailable_is_never_zero_and_estimates_are_marked() {
        let m = Implementation::Ev6;
        let report = Report {
            command: vec!["true".into()],
            pid: 1,
            exit: Exit::Code(0),
            model: m,
            ncpus: 1,
            clock_khz: 2_000_000,
            device: "/dev/pfcntr".into(),
            modes: "all".into(),
            elapsed_s: 1.0,
            counted_s: 1.0,
            windows: None,
            multiplexing: None,
            events: vec![
                counted(m, "PF6_MUX1_CYCLES", 500, 0.5),
                EventRow {
                    number: 1,
                    event: lookup(m, "retinst").unwrap(),
                    aliases: vec!["retinst"],
                    outcome: Outcome::Unavailable {
                        reason: unavailable_reason(lookup(m, "retinst").unwrap()),
                    },
                },
            ],
            per_process: None,
            costs: None,
            notes: vec![],
        };
        let text = report.text();
        assert!(text.contains("unavailable"), "{text}");
        assert!(
            text.contains("~1000") && text.contains("estimate: counted 50.0%"),
            "{text}"
        );
        let j = report.json();
        assert_eq!(j["events"][1]["status"], "unavailable");
        assert!(j["events"][1]["count"].is_null());
        assert_eq!(j["events"][0]["count"], 1000);
        assert_eq!(j["events"][0]["estimate"], true);
        assert_eq!(Exit::Signal(9).status(), 137);
    }
}
