//! `pfmstat`: perfex(1) for `/dev/pfcntr`. Runs a command and reports the
//! Alpha events it and all its descendants caused, as a legacy client of the
//! device would count them (open, ioctl, read; nothing else). See
//! `docs/pfmstat.md` for what each option does on each model and what the
//! device can and cannot split.

pub mod accounting;
pub mod args;
pub mod client;
pub mod command_clock;
pub mod costs;
pub mod events;
pub mod listing;
pub mod procs;
pub mod report;
mod runner;
pub mod stats;
pub mod wrap;

use accounting::{Ledger, Scaled, scale};
use args::{Format, Options};
use client::{CountingDevice, Fidelity};
use costs::CostTable;
use events::Config;
use nix::errno::Errno;
use pfm_client::SpawnError;
use report::{EventRow, Exit, Interval, IntervalRow, Outcome, Report, Scope, Spread};
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub use args::EXIT_USAGE;

/// Exit status for pfmstat's own failures (as env(1) and nice(1) use it).
pub const EXIT_FAILURE: u8 = 125;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad command line, or `--help`/`--version` (clap's display kinds),
    /// rendered as clap renders it.
    #[error("{0}")]
    Usage(Box<clap::Error>),
    #[error("{0}")]
    Event(String),
    /// Events that need the same counter; the hint says what to do.
    #[error(
        "{0}\n  count them in separate runs, or with -a (every event of the model, in turns); pfmstat -l shows each event's counter"
    )]
    Conflict(String),
    /// Opening or driving the device.
    #[error("{0}")]
    Device(#[from] pfm_client::Error),
    /// `-l` or `-t` alone could not open the device; `--model` needs none.
    #[error("{source}; without a daemon, pfmstat {option} --model MODEL prints a model's {what}")]
    NoDeviceFor {
        option: &'static str,
        what: &'static str,
        source: pfm_client::Error,
    },
    /// Programming the counters for `what` (an event, the events, the next
    /// `-a` configuration) was refused.
    #[error("{what}: {source}")]
    Program {
        what: &'static str,
        source: pfm_client::Error,
    },
    /// `--pid` needs system-wide counting, which the device refused.
    #[error(
        "--pid {pid} counts system-wide (the device counts only threads that select themselves, \
         and another process cannot be made to): {source}; system-wide counting needs root, \
         CAP_PERFMON, pfmd's --allow-group group or kernel.perf_event_paranoid <= 0"
    )]
    SystemWide { pid: i32, source: pfm_client::Error },
    #[error("--pid {0}: no such process")]
    NoSuchProcess(i32),
    #[error("{origin} line {line}: {message}")]
    CostFile {
        origin: String,
        line: usize,
        message: String,
    },
    /// The `-o` file cannot be created; nothing was run.
    #[error("-o {path}: {why}; the command was not run (name a file pfmstat may create)")]
    Output { path: String, why: String },
    #[error("{what}: {}", pfm_client::describe(source))]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{command}: {source}")]
    Spawn {
        command: String,
        source: pfm_client::SpawnError,
    },
    #[error("{what}: {errno}")]
    Sys { what: &'static str, errno: Errno },
    #[error("nothing to count: {0}")]
    NothingToCount(String),
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(e) => u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE),
            Error::Spawn {
                source: SpawnError::Spawn(source),
                ..
            } if source.kind() == std::io::ErrorKind::NotFound => 127,
            Error::Spawn {
                source: SpawnError::Spawn(_),
                ..
            } => 126,
            _ => EXIT_FAILURE,
        }
    }
}

/// The site cost file: `$PFM_COSTS`, else `/etc/pfm/costs`.
fn site_costs() -> PathBuf {
    std::env::var_os("PFM_COSTS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/pfm/costs"))
}

pub fn main() -> ExitCode {
    let opts = match args::parse(std::env::args_os().skip(1)) {
        Ok(o) => o,
        Err(Error::Usage(e)) => {
            // Help and version on stdout, errors on stderr, as clap does.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE));
        }
        Err(e) => {
            eprintln!("pfmstat: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    match run(&opts) {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("pfmstat: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn cost_table(model: pfm_model::Implementation, opts: &Options) -> Result<CostTable, Error> {
    let mut table = CostTable::builtin(model);
    let site = site_costs();
    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    if site.exists() {
        files.push((site, false));
    }
    files.extend(opts.cost_file.iter().map(|path| (path.clone(), true)));
    for (path, named) in files {
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            what: format!("cost file {}", path.display()),
            source,
        })?;
        let origin = path.display().to_string();
        let (applied, other_models) = table.apply(&text, &origin)?;
        // The site file may hold only other models' rows; a file named
        // with -c for none of this model's events is a mistake to say.
        if named && applied == 0 && other_models > 0 {
            return Err(Error::CostFile {
                origin,
                line: 1,
                message: format!(
                    "none of its {other_models} rows is for the {model} ({}); \
                     pfmstat -t --model {model} prints that model's table",
                    model.chip()
                ),
            });
        }
    }
    Ok(table)
}

/// The modes counted, in words, from what was asked and what the device
/// reports.
fn modes_text(device: &CountingDevice, opts: &Options) -> (String, Vec<String>) {
    let mut notes = Vec::new();
    let user_only = device.user_only();
    let text = match device.family() {
        pfm_model::Family::Ev5 => {
            let mut modes = vec!["user"];
            if opts.kernel && !user_only {
                modes.push("kernel");
            }
            if opts.exception && !user_only {
                modes.push("exception (PALmode, host hypervisor mode)");
            }
            if (opts.kernel || opts.exception) && user_only {
                notes.push(
                    "-k/-x asked for kernel/exception level, which this caller may not count (perf_event_paranoid > 1 without CAP_PERFMON): user level only".into(),
                );
            }
            modes.join(" + ")
        }
        _ if user_only => {
            if opts.kernel || opts.exception {
                notes.push(format!(
                    "-k/-x: the {} cannot choose modes, and this caller may not count kernel mode: user level only",
                    device.model().chip()
                ));
            }
            format!(
                "user only (the {} cannot choose modes; kernel-mode counting is not allowed for this caller)",
                device.model().chip()
            )
        }
        _ => {
            if !(opts.kernel && opts.exception) {
                notes.push(format!(
                    "the {} has no mode selection: kernel and exception level are counted with user level whether or not -k/-x are given",
                    device.model().chip()
                ));
            }
            format!(
                "user + kernel + exception (the {} cannot choose modes)",
                device.model().chip()
            )
        }
    };
    (text, notes)
}

/// Where the report (and `--interval-print` rows) go: the `-o` file,
/// else stdout for machine output and stderr for text. The file is
/// opened before the command runs, so that a path that cannot be written
/// costs no run, and emptied at the first write, so that a command that
/// cannot start costs no earlier result.
struct Sink {
    /// The `-o` file, by name, and whether it is still to be emptied.
    file: Option<(String, File, bool)>,
    stdout: bool,
}

impl Sink {
    fn new(opts: &Options) -> Result<Sink, Error> {
        let file = match &opts.output {
            Some(path) => {
                let name = path.display().to_string();
                let opened = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path);
                match opened {
                    Ok(file) => Some((name, file, true)),
                    Err(e) => {
                        let why = pfm_client::describe(&e);
                        return Err(Error::Output { path: name, why });
                    }
                }
            }
            None => None,
        };
        Ok(Sink {
            file,
            stdout: opts.format.is_machine(),
        })
    }

    fn write(&mut self, text: &str) -> Result<(), Error> {
        let io = |what: String| move |source| Error::Io { what, source };
        if let Some((name, file, to_empty)) = &mut self.file {
            if std::mem::take(to_empty) && file.metadata().is_ok_and(|m| m.is_file()) {
                file.set_len(0).map_err(io(name.clone()))?;
            }
            return file.write_all(text.as_bytes()).map_err(io(name.clone()));
        }
        if self.stdout {
            print_stdout(text)
        } else {
            std::io::stderr()
                .write_all(text.as_bytes())
                .map_err(io("stderr".into()))
        }
    }
}

/// Prints `text` on stdout (reports, listings and the cost table). A
/// reader that stopped early (`| head`) took what it wanted: not an error.
fn print_stdout(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(source) if source.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::Io {
            what: "stdout".into(),
            source,
        }),
        _ => Ok(()),
    }
}

fn to_json_text(value: &serde_json::Value) -> Result<String, Error> {
    let mut s = serde_json::to_string_pretty(value).map_err(|e| Error::Io {
        what: "writing JSON".into(),
        source: std::io::Error::other(e),
    })?;
    s.push('\n');
    Ok(s)
}

/// `-l` on stdout: text or JSON.
fn print_listing(
    model: pfm_model::Implementation,
    device: Option<&str>,
    host: Option<&[listing::Host]>,
    opts: &Options,
) -> Result<(), Error> {
    let text = match opts.format {
        Format::Json => to_json_text(&listing::json(model, device, host))?,
        _ => listing::text(model, device, host),
    };
    print_stdout(&text)
}

/// The events to count, what the host says of each, and the counter
/// configurations that count them.
struct Selection {
    rows: Vec<EventRow>,
    /// The fidelity of each countable event.
    fidelity_of: Vec<(&'static pfm_model::AlphaEvent, Fidelity)>,
    configs: Vec<Config>,
}

impl Selection {
    fn fidelity(&self, event: &pfm_model::AlphaEvent) -> Fidelity {
        self.fidelity_of
            .iter()
            .find(|(e, _)| std::ptr::eq(*e, event))
            .map_or(Fidelity::Exact, |(_, f)| *f)
    }
}

/// Resolves the events asked for, probes each on the host, and fits the
/// countable ones onto the counters.
fn select(
    device: &mut CountingDevice,
    opts: &Options,
    notes: &mut Vec<String>,
) -> Result<Selection, Error> {
    let model = device.model();
    let wanted: Vec<&'static pfm_model::AlphaEvent> = if opts.all {
        if !opts.events.is_empty() {
            notes.push("-a counts every event: the -e events were ignored".into());
        }
        events::flat(model)
    } else {
        let names: Vec<String> = if opts.events.is_empty() {
            events::default_events(model)
                .iter()
                .map(|s| s.to_string())
                .collect()
        } else {
            opts.events.clone()
        };
        let mut v: Vec<&'static pfm_model::AlphaEvent> = Vec::new();
        for name in &names {
            let e = events::lookup(model, name)?;
            if !v.iter().any(|x| std::ptr::eq(*x, e)) {
                v.push(e);
            }
        }
        // Conflicts are about the chip's counters, whatever the host has.
        events::fit(model, &v)?;
        v
    };
    let mut available = Vec::new();
    let mut rows: Vec<EventRow> = Vec::new();
    let mut fidelity_of = Vec::new();
    for &event in &wanted {
        let outcome = if !events::countable(model, event) {
            Some(Outcome::Unavailable {
                reason: format!("never counted: {}", event.unavailable_because),
            })
        } else {
            match listing::probe(device, event)? {
                Some(f) => {
                    available.push(event);
                    fidelity_of.push((event, f));
                    None
                }
                None => Some(Outcome::Unavailable {
                    reason: report::unavailable_reason(event),
                }),
            }
        };
        rows.push(EventRow {
            number: events::number(model, event),
            event,
            aliases: events::aliases_of(model, event),
            papi: events::papi_of(model, event),
            outcome: outcome.unwrap_or(Outcome::NotObserved {
                fidelity: Fidelity::Exact,
            }),
        });
    }
    if available.is_empty() {
        return Err(Error::NothingToCount(
            rows.iter()
                .map(|r| match &r.outcome {
                    Outcome::Unavailable { reason } => format!("{}: {reason}", r.event.name),
                    _ => r.event.name.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n  "),
        ));
    }
    let configs: Vec<Config> = if opts.all {
        events::rotation(model, &available)
    } else {
        vec![events::fit(model, &available)?]
    };
    Ok(Selection {
        rows,
        fidelity_of,
        configs,
    })
}

/// What one run gave each row.
fn row_outcomes(
    selection: &Selection,
    outcome: &runner::Outcome,
    opts: &Options,
    device: &CountingDevice,
) -> Vec<Outcome> {
    let total = outcome.ledger.weight;
    let resolution = device.resolution();
    selection
        .rows
        .iter()
        .map(|row| {
            if let Outcome::Unavailable { .. } = row.outcome {
                return row.outcome.clone();
            }
            let fidelity = selection.fidelity(row.event);
            let resolution = resolution[row.event.counter as usize].max(1);
            let tally = outcome.ledger.find(row.event);
            match tally.and_then(|t| scale(t.count(), t.observed, total).map(|s| (t, s))) {
                Some((t, scaled)) => Outcome::Counted {
                    scaled,
                    raw: t.count(),
                    per_cpu: t.per_cpu.clone(),
                    fidelity,
                    resolution,
                    spread: None,
                },
                None if opts.signals && outcome.windows == 0 => Outcome::Counted {
                    scaled: Scaled {
                        value: 0.0,
                        exact: true,
                        share: 1.0,
                        factor: 1.0,
                    },
                    raw: 0,
                    per_cpu: vec![0; device.ncpus()],
                    fidelity,
                    resolution,
                    spread: None,
                },
                None => Outcome::NotObserved { fidelity },
            }
        })
        .collect()
}

/// `--repeat`: one row's outcomes over the runs, as one outcome with the
/// mean and the spread. Runs that did not count the event (`-a` too short)
/// are left out of the mean, and a note says so.
fn combine(runs: Vec<Outcome>, name: &str, notes: &mut Vec<String>) -> Outcome {
    let n = runs.len();
    if n == 1 {
        return runs.into_iter().next().expect("one run");
    }
    let counted: Vec<&Outcome> = runs
        .iter()
        .filter(|o| matches!(o, Outcome::Counted { .. }))
        .collect();
    let Some(Outcome::Counted {
        fidelity,
        resolution,
        per_cpu,
        ..
    }) = counted.first().copied()
    else {
        return runs.into_iter().next().expect("runs");
    };
    if counted.len() < n {
        notes.push(format!(
            "{name}: observed in {} of {n} runs; its mean and spread are of those",
            counted.len()
        ));
    }
    let mut values = Vec::new();
    let mut raws = 0.0;
    let mut share = 0.0;
    let mut factor = 0.0;
    let mut exact = true;
    let mut cpus = vec![0.0; per_cpu.len()];
    for o in &counted {
        if let Outcome::Counted {
            scaled,
            raw,
            per_cpu,
            ..
        } = o
        {
            values.push(scaled.value);
            raws += *raw as f64;
            share += scaled.share;
            factor += scaled.factor;
            exact &= scaled.exact;
            for (sum, v) in cpus.iter_mut().zip(per_cpu) {
                *sum += *v as f64;
            }
        }
    }
    let k = counted.len() as f64;
    let spread = Spread { values };
    Outcome::Counted {
        scaled: Scaled {
            value: spread.mean(),
            exact,
            share: share / k,
            factor: factor / k,
        },
        raw: (raws / k).round() as u64,
        per_cpu: cpus.iter().map(|v| (v / k).round() as u64).collect(),
        fidelity: *fidelity,
        resolution: *resolution,
        spread: Some(spread),
    }
}

/// Builds each `--interval-print` period from the ledger: every countable
/// event's increase since the last period, scaled like the totals.
struct Intervals {
    /// Per event: the count and the time observed at the last period's end.
    last: Vec<(&'static pfm_model::AlphaEvent, u64, Duration)>,
    last_weight: Duration,
}

impl Intervals {
    fn new() -> Intervals {
        Intervals {
            last: Vec::new(),
            last_weight: Duration::ZERO,
        }
    }

    fn next(&mut self, ledger: &Ledger, at: Duration, selection: &Selection) -> Interval {
        let weight = ledger.weight.saturating_sub(self.last_weight);
        self.last_weight = ledger.weight;
        let mut rows = Vec::new();
        for row in &selection.rows {
            if let Outcome::Unavailable { .. } = row.outcome {
                continue;
            }
            let (count, observed) = ledger
                .find(row.event)
                .map_or((0, Duration::ZERO), |t| (t.count(), t.observed));
            let slot = match self
                .last
                .iter()
                .position(|(e, ..)| std::ptr::eq(*e, row.event))
            {
                Some(i) => &mut self.last[i],
                None => {
                    self.last.push((row.event, 0, Duration::ZERO));
                    self.last.last_mut().expect("just pushed")
                }
            };
            let scaled = scale(
                count.saturating_sub(slot.1),
                observed.saturating_sub(slot.2),
                weight,
            );
            *slot = (row.event, count, observed);
            rows.push(IntervalRow {
                event: row.event,
                scaled,
                fidelity: selection.fidelity(row.event),
            });
        }
        Interval {
            time_s: at.as_secs_f64(),
            rows,
        }
    }
}

/// The name of a running process (`/proc/PID/comm`), or why there is none.
fn process_name(pid: i32) -> Result<String, Error> {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(comm) => Ok(comm.trim_end().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::NoSuchProcess(pid)),
        Err(source) => Err(Error::Io {
            what: format!("/proc/{pid}/comm"),
            source,
        }),
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

fn run(opts: &Options) -> Result<u8, Error> {
    if let Some(model) = opts.model {
        // -t / -l without a device.
        if opts.list {
            print_listing(model, None, None, opts)?;
        }
        if opts.print_costs {
            print_stdout(&cost_table(model, opts)?.format())?;
        }
        return Ok(0);
    }
    let path = pfm_client::device_path(opts.device.as_deref());
    let only_printing = opts.command.is_empty() && opts.pid.is_none();
    let mut device = CountingDevice::open(&path).map_err(|e| match e {
        Error::Device(source) if only_printing && opts.list => Error::NoDeviceFor {
            option: "-l",
            what: "events",
            source,
        },
        Error::Device(source) if only_printing => Error::NoDeviceFor {
            option: "-t",
            what: "cost table",
            source,
        },
        e => e,
    })?;
    let model = device.model();
    let table = if opts.costs || opts.print_costs {
        Some(cost_table(model, opts)?)
    } else {
        None
    };
    if opts.list {
        device.prepare(false, false, false)?;
        let host = listing::ask_host(&mut device)?;
        print_listing(model, Some(&path.display().to_string()), Some(&host), opts)?;
    }
    if let (true, Some(t)) = (opts.print_costs, &table) {
        print_stdout(&t.format())?;
    }
    if opts.command.is_empty() && opts.pid.is_none() {
        return Ok(0);
    }
    let target_name = opts.pid.map(process_name).transpose()?;
    let system_wide = |source: pfm_client::Error| match opts.pid {
        Some(pid) if source.errno() == Some(Errno::EACCES) => Error::SystemWide { pid, source },
        _ => Error::Device(source),
    };
    let mut notes: Vec<String> = Vec::new();
    device
        .prepare(opts.pid.is_some(), opts.exception, opts.kernel)
        .map_err(system_wide)?;
    let selection = select(&mut device, opts, &mut notes)?;
    let configs = &selection.configs;
    let target = match (opts.pid, opts.command.is_empty()) {
        (Some(pid), empty) => runner::Target::Pid {
            pid,
            command: (!empty).then_some(opts.command.as_slice()),
        },
        (None, _) => runner::Target::Command(&opts.command),
    };
    let plan = runner::Plan {
        configs,
        slice: opts.all.then_some(opts.slice),
        signals: opts.signals,
        track: opts.per_process.then(|| Duration::from_millis(10)),
        interval: opts.interval,
        command_stdout_to_stderr: opts.format.is_machine() && opts.output.is_none(),
    };
    let mut sink = Sink::new(opts)?;
    let mut intervals = Intervals::new();
    let mut json_intervals: Vec<Interval> = Vec::new();
    let mut first_interval = true;
    let mut outcomes: Vec<runner::Outcome> = Vec::new();
    let mut modes = (String::new(), Vec::new());
    for _ in 0..opts.repeat {
        device
            .program(&configs[0])
            .map_err(|source| Error::Program {
                what: "selecting the events",
                source,
            })?;
        device.start(&configs[0]).map_err(system_wide)?;
        if outcomes.is_empty() {
            modes = modes_text(&device, opts);
        }
        let mut on_interval = |ledger: &Ledger, at: Duration| -> Result<(), Error> {
            let interval = intervals.next(ledger, at, &selection);
            match &opts.format {
                Format::Text => {
                    if first_interval {
                        first_interval = false;
                        sink.write(&report::interval_header())?;
                    }
                    sink.write(&report::interval_text(&interval))
                }
                Format::Separated(sep) => sink.write(&report::interval_separated(&interval, sep)),
                Format::Json => {
                    json_intervals.push(interval);
                    Ok(())
                }
            }
        };
        let outcome = runner::run(&mut device, target, &plan, &mut on_interval)?;
        let _ = device.stop();
        outcomes.push(outcome);
    }
    let (modes, mode_notes) = modes;
    notes.extend(mode_notes);
    let has_cpu_clock = selection.rows.iter().any(|r| {
        selection
            .fidelity_of
            .iter()
            .any(|(e, f)| std::ptr::eq(*e, r.event) && *f == Fidelity::Approximate)
            && r.event.candidates.iter().any(|c| {
                c.terms
                    .iter()
                    .any(|t| t.event == pfm_model::HostEvent::CpuClock)
            })
    });
    if has_cpu_clock && device.family() == pfm_model::Family::Ev5 {
        notes.push(
            "cycles approximated from cpu-clock count time in every mode: the EV5 mode selection does not split them".into(),
        );
    }

    // Results per event, over the runs.
    let per_run: Vec<Vec<Outcome>> = outcomes
        .iter()
        .map(|o| row_outcomes(&selection, o, opts, &device))
        .collect();
    let mut rows = selection.rows.clone();
    for (i, row) in rows.iter_mut().enumerate() {
        let runs: Vec<Outcome> = per_run.iter().map(|r| r[i].clone()).collect();
        row.outcome = combine(runs, row.event.name, &mut notes);
    }
    let windows = outcomes.iter().map(|o| o.windows).sum::<u32>();
    if opts.signals && outcomes.iter().any(|o| o.windows == 0) {
        notes.push(
            "-s: no SIGUSR1 arrived, so nothing was counted (the zeros are counted zeros)".into(),
        );
    }
    for o in &outcomes {
        if let Some(f) = &o.failure {
            notes.push(format!(
                "counting failed while the command ran, counts stop there: {f}"
            ));
        }
    }
    let failed: Vec<(usize, Exit)> = outcomes
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.exit.filter(|e| e.status() != 0).map(|e| (i, e)))
        .collect();
    if outcomes.len() > 1 && !failed.is_empty() {
        notes.push(format!(
            "--repeat: {} of {} runs failed ({}); pfmstat exits with the first failure's status",
            failed.len(),
            outcomes.len(),
            failed
                .iter()
                .map(|(i, e)| format!("run {}: {}", i + 1, e.status()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let last = outcomes.last().expect("at least one run");
    let exit = failed.first().map(|(_, e)| *e).or(last.exit);
    let multiplexing = opts.all.then(|| {
        let lost = outcomes.iter().any(|o| {
            o.tracker.as_ref().is_some_and(|t| t.saw_other_tasks())
                && configs.len() > 1
                && o.reopened != Some(0)
        });
        if lost {
            notes.push(
                "-a: the command had other threads or processes while the mux was switched, and the device opened its counters anew on the command's first thread at a switch (it keeps every configuration's counters only within its budgets, and only where pfmstat could stop the command at its exec); perf's inherit extends new counters only to tasks created afterwards, so those tasks' events after such a switch are missing and the estimates are low".into(),
            );
        }
        if configs.len() == 1 {
            notes.push(
                "-a: the events this host counts fit the counters at once: nothing was multiplexed".into(),
            );
        }
        report::Multiplexing {
            slice_ms: opts.slice.as_millis() as u64,
            configurations: configs.len(),
            switches: outcomes.iter().map(|o| o.switches).sum(),
            switch_time_s: outcomes.iter().map(|o| o.switch_time.as_secs_f64()).sum(),
            tasks_lost: lost,
        }
    });
    let elapsed: Vec<f64> = outcomes.iter().map(|o| o.elapsed.as_secs_f64()).collect();
    let counted: Vec<f64> = outcomes
        .iter()
        .map(|o| o.ledger.counted.as_secs_f64())
        .collect();
    let scope = match (opts.pid, target_name) {
        (Some(pid), Some(comm)) => Scope::SystemWide(report::Target {
            pid,
            comm,
            cpu_ns: last.target_cpu_ns,
            ended: last.ending,
        }),
        _ => Scope::Command,
    };
    let mut report = Report {
        command: opts
            .command
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect(),
        pid: last.pid,
        exit,
        scope,
        runs: outcomes.len(),
        elapsed_stddev_s: (outcomes.len() > 1).then(|| {
            Spread {
                values: elapsed.clone(),
            }
            .stddev()
        }),
        model,
        ncpus: device.ncpus(),
        clock_khz: device.clock_khz(),
        device: path.display().to_string(),
        modes,
        elapsed_s: mean(&elapsed),
        counted_s: mean(&counted),
        windows: opts.signals.then_some(windows),
        multiplexing,
        per_process: None,
        costs: None,
        events: rows,
        intervals: json_intervals,
        notes,
    };
    if opts.per_process {
        report.per_process = Some(report::PerProcess {
            processes: last
                .tracker
                .as_ref()
                .map(|t| t.processes())
                .unwrap_or_default(),
            tree_cpu_ns: last.tree_cpu_ns,
        });
    }
    if let Some(table) = &table
        && opts.costs
    {
        let mhz = device.clock_khz() as f64 / 1000.0;
        let mut c = report::cost_rows(&report.events, table, mhz);
        c.statistics = report::statistics(model, &report.events, mhz, table);
        report.costs = Some(c);
    }
    let text = match &opts.format {
        Format::Json => to_json_text(&report.json())?,
        Format::Separated(sep) => report.separated(sep),
        Format::Text => report.text(),
    };
    sink.write(&text)?;
    // With --pid and no command pfmstat ends well unless counting failed.
    Ok(match report.exit {
        Some(exit) => exit.status(),
        None => 0,
    })
}
