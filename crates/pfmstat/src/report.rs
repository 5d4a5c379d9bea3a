//! The report: counts per event (unavailable events say so, never 0;
//! approximate ones are marked; `-a` estimates are marked with their share;
//! `--repeat` means with their spread), `-mp` per-CPU and per-process
//! sections, `-y` costs and statistics; as text (perfex-like, lines of at
//! most [`crate::wrap::WIDTH`] columns), JSON (schema [`JSON_VERSION`], in pfmstat(1)) or
//! separated fields (perf stat `-x`). `--interval-print` rows too.

use super::accounting::Scaled;
use super::client::Fidelity;
use super::costs::CostTable;
use super::procs::Process;
use super::stats::{self, Statistic};
use super::wrap::{cells, fill};
use pfm_model::{AlphaEvent, Fidelity as TableFidelity, Implementation};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// The version of the JSON report's and listing's schema (pfmstat(1),
/// JSON OUTPUT): raised when a field changes meaning or goes away, not when
/// one is added.
pub const JSON_VERSION: u32 = 1;

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
        /// `--repeat`: each run's value; `scaled` holds their mean.
        spread: Option<Spread>,
    },
    /// `-a`: the run ended before the event got a slice.
    NotObserved {
        fidelity: Fidelity,
    },
    Unavailable {
        reason: String,
    },
}

/// An event's values over the runs of `--repeat`.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    /// Each run's count (or estimate), in run order.
    pub values: Vec<f64>,
}

impl Spread {
    pub fn mean(&self) -> f64 {
        self.values.iter().sum::<f64>() / self.values.len().max(1) as f64
    }

    /// The sample standard deviation (n - 1), 0 for one run.
    pub fn stddev(&self) -> f64 {
        let n = self.values.len();
        if n < 2 {
            return 0.0;
        }
        let mean = self.mean();
        let squares: f64 = self.values.iter().map(|v| (v - mean) * (v - mean)).sum();
        (squares / (n - 1) as f64).sqrt()
    }

    /// The standard error of the mean relative to the mean, in percent:
    /// perf stat -r's "+- x%". 0 when the mean is 0.
    pub fn stderr_pct(&self) -> f64 {
        let mean = self.mean();
        if mean == 0.0 {
            return 0.0;
        }
        100.0 * self.stddev() / (self.values.len() as f64).sqrt() / mean.abs()
    }
}

#[derive(Debug, Clone)]
pub struct EventRow {
    pub number: usize,
    pub event: &'static AlphaEvent,
    pub aliases: Vec<&'static str>,
    /// PAPI presets that name the event on this model.
    pub papi: Vec<&'static str>,
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
pub fn approximation(event: &AlphaEvent) -> &'static str {
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

impl PerProcess {
    /// Each process's share of the tree's CPU time, and the share no
    /// process was seen with. `/proc` times are in clock ticks and the
    /// tree's rusage is finer, so the processes can add up to more than
    /// the tree: then their shares are scaled to add up to it (an
    /// apportioned total never exceeds the total).
    pub fn shares(&self) -> (Vec<f64>, f64) {
        let tree = self.tree_cpu_ns.max(1) as f64;
        let seen: u64 = self.processes.iter().map(|p| p.cpu_ns).sum();
        let scale = if seen as f64 > tree {
            tree / seen as f64
        } else {
            1.0
        };
        let shares: Vec<f64> = self
            .processes
            .iter()
            .map(|p| p.cpu_ns as f64 * scale / tree)
            .collect();
        let rest = (1.0 - shares.iter().sum::<f64>()).max(0.0);
        (shares, rest)
    }
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

/// Whose events were counted.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    /// The command and its descendants (`PCNTLOGSELECT` before exec).
    Command,
    /// `--pid`: everything on every CPU (`PCNTLOGALL`) while the target ran.
    SystemWide(Target),
}

/// The process `--pid` named.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub pid: i32,
    pub comm: String,
    /// Its CPU time while counted (its CPU-time clock), if it could be read.
    pub cpu_ns: Option<u64>,
    pub ended: Ending,
}

/// What ended `--pid` counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    TargetExited,
    CommandEnded,
    /// pfmstat got this signal (SIGINT: Ctrl-C).
    Signal(i32),
}

impl Ending {
    fn name(self) -> &'static str {
        match self {
            Ending::TargetExited => "target exited",
            Ending::CommandEnded => "command ended",
            Ending::Signal(_) => "signal",
        }
    }
}

/// One `--interval-print` period: each counted event's increase in it.
#[derive(Debug, Clone)]
pub struct Interval {
    /// Seconds since counting began, at the period's end.
    pub time_s: f64,
    pub rows: Vec<IntervalRow>,
}

#[derive(Debug, Clone)]
pub struct IntervalRow {
    pub event: &'static AlphaEvent,
    /// The increase, scaled like the totals; `None`: the event was not on
    /// its counter during the period (`-a`) or no `-s` window was open.
    pub scaled: Option<Scaled>,
    pub fidelity: Fidelity,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub command: Vec<String>,
    /// The command's pid (the last run's); `None` with `--pid` and no command.
    pub pid: Option<i32>,
    /// How the command ended (the status pfmstat exits with).
    pub exit: Option<Exit>,
    pub scope: Scope,
    /// `--repeat`: how many runs the counts are the means of.
    pub runs: usize,
    /// `--repeat`: the sample standard deviation of the runs' elapsed time.
    pub elapsed_stddev_s: Option<f64>,
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
    /// `--interval-print` periods, for the JSON report (text and separated
    /// fields print them as they come).
    pub intervals: Vec<Interval>,
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
        Outcome::Counted {
            scaled,
            raw,
            spread: None,
            ..
        } if scaled.exact => raw.to_string(),
        Outcome::Counted { scaled, .. } if scaled.exact => format!("{:.0}", scaled.value),
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
            spread,
            ..
        } => {
            if let Some(spread) = spread {
                notes.push(format!(
                    "+- {:.2}% (standard error of the mean of {} runs; stddev {:.0})",
                    spread.stderr_pct(),
                    spread.values.len(),
                    spread.stddev()
                ));
            }
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

/// An event's value as the separated fields and interval rows print it.
fn value_field(scaled: &Scaled) -> String {
    format!("{:.0}", scaled.value)
}

/// Where the event rows' notes start, and where their wrapped lines do.
const ROW_NOTES_INDENT: usize = 8;

/// The column header of `--interval-print` text rows.
pub fn interval_header() -> String {
    format!("# {:>10}  {:>20}  event\n", "time (s)", "count")
}

/// One `--interval-print` period as text rows.
pub fn interval_text(interval: &Interval) -> String {
    let mut o = String::new();
    for row in &interval.rows {
        let (count, note) = match &row.scaled {
            Some(s) if s.exact => (value_field(s), String::new()),
            Some(s) => (
                format!("~{}", value_field(s)),
                format!(
                    "  (estimate: counted {:.1}% of the period)",
                    s.share * 100.0
                ),
            ),
            None => ("not counted".to_string(), String::new()),
        };
        let _ = writeln!(
            o,
            "{:>12.6}  {count:>20}  {}{note}",
            interval.time_s, row.event.name
        );
    }
    o
}

/// One `--interval-print` period as separated fields: the time, then the
/// fields of [`Report::separated`].
pub fn interval_separated(interval: &Interval, sep: &str) -> String {
    let mut o = String::new();
    for row in &interval.rows {
        let time = format!("{:.6}", interval.time_s);
        let fields = match &row.scaled {
            Some(s) => [
                time,
                value_field(s),
                String::new(),
                row.event.name.to_string(),
                String::new(),
                String::new(),
                format!("{:.2}", s.share * 100.0),
                row.fidelity.name().to_string(),
            ],
            None => [
                time,
                "<not counted>".into(),
                String::new(),
                row.event.name.to_string(),
                String::new(),
                "0".into(),
                "0.00".into(),
                row.fidelity.name().to_string(),
            ],
        };
        let _ = writeln!(o, "{}", fields.join(sep));
    }
    o
}

fn interval_json(interval: &Interval) -> Value {
    json!({
        "time_s": interval.time_s,
        "events": interval.rows.iter().map(|r| match &r.scaled {
            Some(s) => json!({
                "name": r.event.name,
                "count": s.value.round() as u64,
                "estimate": !s.exact,
                "share": s.share,
            }),
            None => json!({"name": r.event.name, "count": Value::Null}),
        }).collect::<Vec<_>>(),
    })
}

impl Report {
    fn mhz(&self) -> f64 {
        self.clock_khz as f64 / 1000.0
    }

    fn command_text(&self) -> String {
        pfm_client::command_line(&self.command)
    }

    /// The first line: what ran, and how it ended.
    fn headline(&self) -> String {
        let ended = match (self.pid, self.exit) {
            (Some(pid), Some(exit)) => format!("pid {pid}, {}", exit.text()),
            _ => String::new(),
        };
        match &self.scope {
            Scope::Command if self.runs > 1 => format!(
                "pfmstat: {} runs of {}: last {ended}",
                self.runs,
                self.command_text()
            ),
            Scope::Command => format!("pfmstat: {}: {ended}", self.command_text()),
            Scope::SystemWide(t) => {
                let until = match t.ended {
                    Ending::TargetExited => "until it exited".to_string(),
                    Ending::CommandEnded => "until the command ended".to_string(),
                    Ending::Signal(s) => format!("until signal {s} stopped pfmstat"),
                };
                let command = if self.command.is_empty() {
                    String::new()
                } else {
                    format!("; command {}: {ended}", self.command_text())
                };
                format!(
                    "pfmstat: system-wide while pid {} ({}) ran, {until}{command}",
                    t.pid, t.comm
                )
            }
        }
    }

    /// Who was counted, in words.
    fn counted_text(&self) -> String {
        match &self.scope {
            Scope::Command => format!(
                "counted: the command and all its descendants (PCNTLOGSELECT by the command's \
                 process before exec); modes: {}",
                self.modes
            ),
            Scope::SystemWide(t) => {
                let cpu = t.cpu_ns.map_or(String::new(), |ns| {
                    format!(
                        "; pid {} used {:.3} s of CPU meanwhile (its CPU-time clock)",
                        t.pid,
                        ns as f64 / 1e9
                    )
                });
                format!(
                    "counted: everything on every CPU (PCNTLOGALL), not pid {} alone: the device \
                     counts only threads that select themselves, which another process cannot be \
                     made to do{cpu}; modes: {}",
                    t.pid, self.modes
                )
            }
        }
    }

    pub fn text(&self) -> String {
        let mut o = String::new();
        fill(&mut o, "", 2, &self.headline());
        fill(
            &mut o,
            "",
            2,
            &format!(
                "model {} ({}), {} CPUs, nominal clock {:.3} MHz, device {}",
                self.model,
                self.model.chip(),
                self.ncpus,
                self.mhz(),
                self.device
            ),
        );
        fill(&mut o, "", 2, &self.counted_text());
        let mut elapsed = format!("elapsed {:.3} s", self.elapsed_s);
        if let Some(sd) = self.elapsed_stddev_s {
            let _ = write!(elapsed, " (mean of {} runs, stddev {sd:.3} s)", self.runs);
        }
        if let Some(w) = self.windows {
            let _ = write!(
                elapsed,
                ", counted {:.3} s in {w} SIGUSR1..SIGUSR2 window{}",
                self.counted_s,
                if w == 1 { "" } else { "s" }
            );
        }
        fill(&mut o, "", 2, &elapsed);
        if let Some(m) = &self.multiplexing {
            fill(
                &mut o,
                "",
                2,
                &format!(
                    "multiplexed (-a): {} configuration{}, {} ms slices, {} switch{} costing \
                     {:.3} ms in all; estimates scale by the {} per slice",
                    m.configurations,
                    if m.configurations == 1 { "" } else { "s" },
                    m.slice_ms,
                    m.switches,
                    if m.switches == 1 { "" } else { "es" },
                    m.switch_time_s * 1e3,
                    match self.scope {
                        Scope::Command => "command's CPU time",
                        Scope::SystemWide(_) => "wall time",
                    }
                ),
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            " {:>3}  {:<31} {:>3} {:>18}  notes",
            "#", "event", "ctr", "count"
        );
        for row in &self.events {
            let columns = format!(
                " {:>3}  {:<31} {:>3} {:>18}  ",
                row.number,
                row.event.name,
                row.event.counter,
                count_text(row),
            );
            fill(&mut o, &columns, ROW_NOTES_INDENT, &notes_text(row));
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
                fill(&mut o, "note: ", 6, note);
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
            let values: Vec<String> = per_cpu
                .iter()
                .enumerate()
                .map(|(cpu, v)| format!("cpu{cpu} {:.0}", *v as f64 * scaled.factor))
                .collect();
            cells(o, &format!("  {:<31} ", row.event.name), 4, &values);
        }
    }

    fn per_process_text(&self, o: &mut String, pp: &PerProcess) {
        let _ = writeln!(o);
        fill(
            o,
            "",
            2,
            "per process: CPU time from /proc; the device counts the whole tree into one set of \
             counters, so the event counts below each process are the totals apportioned by \
             CPU time (~), not counted per process:",
        );
        let rows: Vec<&EventRow> = self.counted_rows().collect();
        let _ = writeln!(
            o,
            "  {:>7} {:>7} {:<16} {:>10} {:>7}",
            "pid", "ppid", "command", "cpu s", "share"
        );
        let (shares, rest) = pp.shares();
        let line = |o: &mut String, label: String, ns: u64, share: f64| {
            let _ = writeln!(
                o,
                "  {label} {:>10.3} {:>6.1}%",
                ns as f64 / 1e9,
                share * 100.0
            );
            let values: Vec<String> = rows
                .iter()
                .map(|r| {
                    let v = r.value().map_or(0.0, |(v, _)| v);
                    format!("{} ~{:.0}", r.event.name, v * share)
                })
                .collect();
            cells(o, "      ", 6, &values);
        };
        for (p, share) in pp.processes.iter().zip(shares) {
            let comm: String = p.comm.chars().take(16).collect();
            let label = format!("{:>7} {:>7} {comm:<16}", p.pid, p.ppid);
            line(o, label, p.cpu_ns, share);
        }
        line(
            o,
            format!("{:>7} {:>7} {:<16}", "-", "-", "(unattributed)"),
            (rest * pp.tree_cpu_ns as f64).round() as u64,
            rest,
        );
        let _ = writeln!(
            o,
            "  tree CPU time {:.3} s (wait4 rusage); device totals are in the table above",
            pp.tree_cpu_ns as f64 / 1e9
        );
    }

    /// The counts as perf stat `-x SEP` prints them, one event a line:
    /// value, unit (empty), event, variance (`--repeat`: the mean's standard
    /// error in percent), the time the event was counted in ns, the
    /// percentage of the measurement it was counted, and (pfmstat's own
    /// seventh field) how the host counts it.
    pub fn separated(&self, sep: &str) -> String {
        let mut o = String::new();
        for row in &self.events {
            let name = row.event.name.to_string();
            let fields: [String; 7] = match &row.outcome {
                Outcome::Counted {
                    scaled,
                    fidelity,
                    spread,
                    ..
                } => [
                    value_field(scaled),
                    String::new(),
                    name,
                    spread
                        .as_ref()
                        .map_or(String::new(), |s| format!("{:.2}%", s.stderr_pct())),
                    format!("{:.0}", self.counted_s * scaled.share * 1e9),
                    format!("{:.2}", scaled.share * 100.0),
                    fidelity.name().to_string(),
                ],
                Outcome::NotObserved { fidelity } => [
                    "<not counted>".into(),
                    String::new(),
                    name,
                    String::new(),
                    "0".into(),
                    "0.00".into(),
                    fidelity.name().to_string(),
                ],
                Outcome::Unavailable { .. } => [
                    "<not supported>".into(),
                    String::new(),
                    name,
                    String::new(),
                    "0".into(),
                    "0.00".into(),
                    "unavailable".into(),
                ],
            };
            let _ = writeln!(o, "{}", fields.join(sep));
        }
        o
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
                    "papi": row.papi,
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
                        spread,
                    } => {
                        v["status"] = json!("counted");
                        v["count"] = if scaled.exact && spread.is_none() {
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
                        if let Some(s) = spread {
                            v["mean"] = json!(s.mean());
                            v["stddev"] = json!(s.stddev());
                            v["stderr_pct"] = json!(s.stderr_pct());
                            // Counts, as `count` is: whole (a scaled
                            // estimate rounded).
                            let counts: Vec<u64> =
                                s.values.iter().map(|c| c.round() as u64).collect();
                            v["counts"] = json!(counts);
                        }
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
            "version": JSON_VERSION,
            "pfmstat": env!("CARGO_PKG_VERSION"),
            "command": self.command,
            "pid": self.pid,
            "exit": match self.exit {
                Some(Exit::Code(c)) => json!({"code": c}),
                Some(Exit::Signal(s)) => json!({"signal": s}),
                None => Value::Null,
            },
            "scope": match self.scope {
                Scope::Command => "command",
                Scope::SystemWide(_) => "system-wide",
            },
            "model": self.model.name(),
            "chip": self.model.chip(),
            "ncpus": self.ncpus,
            "clock_mhz": self.mhz(),
            "device": self.device,
            "modes": self.modes,
            "runs": self.runs,
            "elapsed_s": self.elapsed_s,
            "counted_s": self.counted_s,
            "events": events,
            "notes": self.notes,
        });
        if let Scope::SystemWide(t) = &self.scope {
            out["target"] = json!({
                "pid": t.pid,
                "command": t.comm,
                "cpu_ns": t.cpu_ns,
                "ended": t.ended.name(),
                "signal": match t.ended {
                    Ending::Signal(s) => json!(s),
                    _ => Value::Null,
                },
            });
        }
        if let Some(sd) = self.elapsed_stddev_s {
            out["elapsed_stddev_s"] = json!(sd);
        }
        if !self.intervals.is_empty() {
            out["intervals"] = json!(self.intervals.iter().map(interval_json).collect::<Vec<_>>());
        }
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
            let (shares, rest) = pp.shares();
            out["per_process"] = json!({
                "method": "CPU time from /proc; event counts apportioned by CPU share (the device cannot split counts per process)",
                "tree_cpu_ns": pp.tree_cpu_ns,
                "processes": pp.processes.iter().zip(shares).map(|(p, share)| json!({
                    "pid": p.pid,
                    "ppid": p.ppid,
                    "command": p.comm,
                    "cpu_ns": p.cpu_ns,
                    "threads": p.threads,
                    "share": share,
                })).collect::<Vec<_>>(),
                "unattributed_share": rest,
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
    let _ = writeln!(o);
    fill(
        o,
        "",
        2,
        &format!(
            "costs for the {} ({}) at {:.3} MHz (the nominal clock), most costly first:",
            report.model,
            report.model.chip(),
            costs.mhz
        ),
    );
    let _ = writeln!(
        o,
        " {:>3}  {:<31} {:>17} {:>13} {:>13} {:>13}",
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
            " {:>3}  {:<31} {:>17} {:>13.6} {:>13.6} {:>13.6}",
            r.number, r.event, count, r.typical, r.min, r.max
        );
    }
    let _ = writeln!(
        o,
        " {:>3}  {:<31} {:>17} {:>13.6} {:>13.6} {:>13.6}",
        "", "total (sum of the rows)", "", costs.total.0, costs.total.1, costs.total.2
    );
    fill(
        o,
        "      ",
        6,
        "(rows overlap: a cycle event's time includes the other events' time, so the total is \
         not the run time)",
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

/// A statistic to four significant digits, so that one column reads alike
/// (`0.3010`, `1.000`, `6.916e-7`); whole numbers up to 10^7 keep all their
/// digits (`12345`), and out of that range it is scientific notation.
fn number_for_stat(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let magnitude = v.abs().log10().floor();
    if !(-3.0..7.0).contains(&magnitude) {
        return format!("{v:.3e}");
    }
    // magnitude is within -3..=6 here: 0 to 6 decimals.
    let decimals = (3.0 - magnitude).max(0.0) as usize;
    format!("{v:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::scale;
    use crate::events::lookup;

    fn counted(model: Implementation, name: &str, value: u64, share: f64) -> EventRow {
        let event = lookup(model, name).unwrap();
        let exact = share >= 1.0;
        EventRow {
            number: crate::events::number(model, event),
            event,
            aliases: vec![],
            papi: vec![],
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
                spread: None,
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
                papi: vec![],
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

    fn report(m: Implementation, events: Vec<EventRow>) -> Report {
        Report {
            command: vec!["true".into()],
            pid: Some(1),
            exit: Some(Exit::Code(0)),
            scope: Scope::Command,
            runs: 1,
            elapsed_stddev_s: None,
            model: m,
            ncpus: 1,
            clock_khz: 2_000_000,
            device: "/dev/pfcntr".into(),
            modes: "all".into(),
            elapsed_s: 1.0,
            counted_s: 1.0,
            windows: None,
            multiplexing: None,
            events,
            per_process: None,
            costs: None,
            intervals: vec![],
            notes: vec![],
        }
    }

    fn unavailable(m: Implementation, name: &str) -> EventRow {
        let event = lookup(m, name).unwrap();
        EventRow {
            number: crate::events::number(m, event),
            event,
            aliases: vec![],
            papi: vec![],
            outcome: Outcome::Unavailable {
                reason: unavailable_reason(event),
            },
        }
    }

    #[test]
    fn unavailable_is_never_zero_and_estimates_are_marked() {
        let m = Implementation::Ev6;
        let report = report(
            m,
            vec![
                counted(m, "PF6_MUX1_CYCLES", 500, 0.5),
                unavailable(m, "retinst"),
            ],
        );
        let text = report.text();
        assert!(text.contains("unavailable"), "{text}");
        assert!(
            text.contains("~1000") && text.contains("estimate: counted 50.0%"),
            "{text}"
        );
        let j = report.json();
        assert_eq!(j["version"], JSON_VERSION);
        assert_eq!(j["scope"], "command");
        assert_eq!(j["events"][1]["status"], "unavailable");
        assert!(j["events"][1]["count"].is_null());
        assert_eq!(j["events"][0]["count"], 1000);
        assert_eq!(j["events"][0]["estimate"], true);
        assert_eq!(Exit::Signal(9).status(), 137);
    }

    /// Every line of a report with long notes, per-process and cost
    /// sections, and a system-wide scope fits 100 columns.
    #[test]
    fn text_lines_fit_100_columns() {
        let m = Implementation::Ev5;
        let mut r = report(
            m,
            vec![
                counted(m, "PF5_MUX0_ISSUES", 123_456_789_012, 0.25),
                counted(m, "PF5_MUX2_C_CYCLES", 223_456_789_012, 1.0),
                counted(m, "PF5_MUX1_FLOW_CHANGE", 3_456_789_012, 0.5),
                unavailable(m, "PF5_MUX2_C_SCACHE_WRITE_MISS"),
                unavailable(m, "PF5_MUX2_C_BCACHE_MISS"),
            ],
        );
        if let Outcome::Counted {
            fidelity, per_cpu, ..
        } = &mut r.events[1].outcome
        {
            *fidelity = Fidelity::Approximate;
            *per_cpu = vec![1_000_000_000; 24];
        }
        r.command = vec!["./a-rather-long-program-name".into(), "--with=args".into()];
        r.multiplexing = Some(Multiplexing {
            slice_ms: 10,
            configurations: 20,
            switches: 1234,
            switch_time_s: 0.5,
            tasks_lost: true,
        });
        r.notes = vec!["x ".repeat(120)];
        r.per_process = Some(PerProcess {
            processes: vec![],
            tree_cpu_ns: 1_000_000_000,
        });
        let table = CostTable::builtin(m);
        let mut costs = cost_rows(&r.events, &table, 500.0);
        costs.statistics = statistics(m, &r.events, 500.0, &table);
        r.costs = Some(costs);
        r.scope = Scope::SystemWide(Target {
            pid: 4242,
            comm: "server".into(),
            cpu_ns: Some(1_500_000_000),
            ended: Ending::Signal(2),
        });
        let text = r.text();
        for line in text.lines() {
            assert!(
                line.chars().count() <= 100,
                "{} columns: {line}",
                line.len()
            );
        }
        assert!(
            text.contains("system-wide while pid 4242 (server)"),
            "{text}"
        );
        assert!(text.contains("not pid 4242 alone"), "{text}");
        assert_eq!(r.json()["scope"], "system-wide");
        assert_eq!(r.json()["target"]["ended"], "signal");
    }

    /// `/proc`'s tick-rounded process times can add up to more than the
    /// tree's rusage: the shares are scaled to the tree, never over it
    /// (108.7 % once); under it, the rest is unattributed.
    #[test]
    fn process_shares_never_add_up_to_more_than_the_tree() {
        let process = Process::with_cpu;
        let over = PerProcess {
            processes: vec![process(2, 600), process(3, 500)],
            tree_cpu_ns: 1000,
        };
        let (shares, rest) = over.shares();
        assert!(
            (shares.iter().sum::<f64>() - 1.0).abs() < 1e-12,
            "{shares:?}"
        );
        assert!((shares[0] / shares[1] - 1.2).abs() < 1e-12);
        assert_eq!(rest, 0.0);
        let under = PerProcess {
            processes: vec![process(2, 600)],
            tree_cpu_ns: 1000,
        };
        let (shares, rest) = under.shares();
        assert_eq!(shares, vec![0.6]);
        assert!((rest - 0.4).abs() < 1e-12);
    }

    #[test]
    fn spread_is_perf_stats() {
        let s = Spread {
            values: vec![10.0, 12.0, 14.0],
        };
        assert_eq!(s.mean(), 12.0);
        assert_eq!(s.stddev(), 2.0);
        // stderr of the mean 2 / sqrt(3), relative to 12.
        assert!((s.stderr_pct() - 100.0 * 2.0 / 3f64.sqrt() / 12.0).abs() < 1e-12);
        assert_eq!(Spread { values: vec![5.0] }.stddev(), 0.0);
    }

    #[test]
    fn separated_fields_follow_perf_stat_x() {
        let m = Implementation::Ev6;
        let mut r = report(
            m,
            vec![
                counted(m, "PF6_MUX0_CYCLES", 1000, 1.0),
                unavailable(m, "branches"),
            ],
        );
        if let Outcome::Counted { spread, .. } = &mut r.events[0].outcome {
            *spread = Some(Spread {
                values: vec![900.0, 1000.0, 1100.0],
            });
        }
        let csv = r.separated(",");
        let lines: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
        assert_eq!(
            lines[0],
            [
                "1000",
                "",
                "PF6_MUX0_CYCLES",
                "5.77%",
                "1000000000",
                "100.00",
                "exact"
            ]
        );
        assert_eq!(
            lines[1],
            [
                "<not supported>",
                "",
                "PF6_MUX1_RET_COND_BRANCHES",
                "",
                "0",
                "0.00",
                "unavailable"
            ]
        );
        let interval = Interval {
            time_s: 0.1,
            rows: vec![IntervalRow {
                event: lookup(m, "cycles").unwrap(),
                scaled: scale(
                    5,
                    std::time::Duration::from_millis(1),
                    std::time::Duration::from_millis(1),
                ),
                fidelity: Fidelity::Approximate,
            }],
        };
        assert_eq!(
            interval_separated(&interval, ";"),
            "0.100000;5;;PF6_MUX0_CYCLES;;;100.00;approximate\n"
        );
        assert!(interval_text(&interval).contains("PF6_MUX0_CYCLES"));
    }

    #[test]
    fn statistics_read_alike_in_their_column() {
        let shown: Vec<String> = [0.3, 1.0, 6.916e-7, 0.301, 123.45, 2_500_000.0, 4.2e9, 0.0]
            .into_iter()
            .map(number_for_stat)
            .collect();
        assert_eq!(
            shown,
            [
                "0.3000", "1.000", "6.916e-7", "0.3010", "123.5", "2500000", "4.200e9", "0"
            ]
        );
    }
}
