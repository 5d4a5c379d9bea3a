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
pub mod procs;
pub mod report;
mod runner;
pub mod stats;

use accounting::scale;
use args::Options;
use client::{CountingDevice, Fidelity};
use costs::CostTable;
use events::Config;
use nix::errno::Errno;
use pfm_client::SpawnError;
use report::{EventRow, Outcome, Report};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit status for pfmstat's own failures (as env(1) and nice(1) use it).
pub const EXIT_FAILURE: u8 = 125;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Event(String),
    #[error("{0}")]
    Conflict(String),
    /// Opening or driving the device.
    #[error("{0}")]
    Device(#[from] pfm_client::Error),
    /// Programming the counters for `what` (an event, the events, the next
    /// `-a` configuration) was refused.
    #[error("{what}: {source}")]
    Program {
        what: &'static str,
        source: pfm_client::Error,
    },
    #[error("{origin} line {line}: {message}")]
    CostFile {
        origin: String,
        line: usize,
        message: String,
    },
    #[error("{what}: {source}")]
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
        Err(e) => {
            eprintln!("pfmstat: {e}\n{}", args::USAGE);
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    if opts.help {
        print!("{}", args::USAGE);
        return ExitCode::SUCCESS;
    }
    match run(&opts) {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("pfmstat: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// The cost table for `model`: built in, then the site file, then `-c`.
fn cost_table(model: pfm_model::Implementation, opts: &Options) -> Result<CostTable, Error> {
    let mut table = CostTable::builtin(model);
    let site = site_costs();
    let mut files: Vec<PathBuf> = Vec::new();
    if site.exists() {
        files.push(site);
    }
    files.extend(opts.cost_file.clone());
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            what: format!("cost file {}", path.display()),
            source,
        })?;
        table.apply(&text, &path.display().to_string())?;
    }
    Ok(table)
}

fn listing(model: pfm_model::Implementation) -> String {
    let mut out = format!(
        "events of the {} ({}): number, name, counter, aliases, meaning\n",
        model,
        model.chip()
    );
    for (n, e) in events::flat(model).iter().enumerate() {
        let aliases = events::aliases_of(model, e);
        out += &format!(
            "{n:>3}  {:<34} {}  {:<22} {}\n",
            e.name,
            e.counter,
            aliases.join(","),
            e.description
        );
    }
    let defaults = events::default_events(model).join(" ");
    out += &format!("default events (no -e): {defaults}\n");
    out
}

/// Whether the host counts `event`: programs it alone and asks
/// `PCNTGETINFO`. `Ok(None)`: unavailable (EOPNOTSUPP).
fn probe(
    device: &mut CountingDevice,
    event: &'static pfm_model::AlphaEvent,
) -> Result<Option<Fidelity>, Error> {
    let Some(config) = Config::single(device.model(), event) else {
        return Ok(None);
    };
    match device.program(&config) {
        Ok(()) => Ok(device.fidelity()?[event.counter as usize]),
        Err(e) if e.errno() == Some(Errno::EOPNOTSUPP) => Ok(None),
        Err(source) => Err(Error::Program {
            what: "selecting an event",
            source,
        }),
    }
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

fn run(opts: &Options) -> Result<u8, Error> {
    let mut stdout = std::io::stdout().lock();
    let write_out = |out: &mut dyn std::io::Write, text: &str| {
        out.write_all(text.as_bytes()).map_err(|source| Error::Io {
            what: "stdout".into(),
            source,
        })
    };
    if let Some(model) = opts.model {
        // -t / -l without a device.
        if opts.list {
            write_out(&mut stdout, &listing(model))?;
        }
        if opts.print_costs {
            write_out(&mut stdout, &cost_table(model, opts)?.format())?;
        }
        return Ok(0);
    }
    let path = pfm_client::device_path(opts.device.as_deref());
    let mut device = CountingDevice::open(&path)?;
    let model = device.model();
    let table = if opts.costs || opts.print_costs {
        Some(cost_table(model, opts)?)
    } else {
        None
    };
    if opts.list {
        write_out(&mut stdout, &listing(model))?;
    }
    if let (true, Some(t)) = (opts.print_costs, &table) {
        write_out(&mut stdout, &t.format())?;
    }
    drop(stdout);
    if opts.command.is_empty() {
        return Ok(0);
    }
    let mut notes: Vec<String> = Vec::new();

    // Which events, and are they countable here?
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
    device.prepare(opts.exception, opts.kernel)?;
    let mut available = Vec::new();
    let mut rows: Vec<EventRow> = Vec::new();
    let mut fidelity_of = Vec::new();
    for &event in &wanted {
        let outcome = if !events::countable(model, event) {
            Some(Outcome::Unavailable {
                reason: format!("never counted: {}", event.unavailable_because),
            })
        } else {
            match probe(&mut device, event)? {
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
    device
        .program(&configs[0])
        .map_err(|source| Error::Program {
            what: "selecting the events",
            source,
        })?;
    device.start(&configs[0])?;
    let (modes, mode_notes) = modes_text(&device, opts);
    notes.extend(mode_notes);
    let has_cpu_clock = rows.iter().any(|r| {
        fidelity_of
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

    let plan = runner::Plan {
        configs: &configs,
        slice: opts.all.then_some(opts.slice),
        signals: opts.signals,
        track: opts
            .per_process
            .then(|| std::time::Duration::from_millis(10)),
    };
    let outcome = runner::run(&mut device, &opts.command, &plan)?;
    let _ = device.stop();

    // Results per event.
    let total = outcome.ledger.weight;
    let resolution = device.resolution();
    for row in &mut rows {
        if matches!(row.outcome, Outcome::Unavailable { .. }) {
            continue;
        }
        let fidelity = fidelity_of
            .iter()
            .find(|(e, _)| std::ptr::eq(*e, row.event))
            .map_or(Fidelity::Exact, |(_, f)| *f);
        let tally = outcome.ledger.find(row.event);
        row.outcome = match tally.and_then(|t| scale(t.count(), t.observed, total).map(|s| (t, s)))
        {
            Some((t, scaled)) => Outcome::Counted {
                scaled,
                raw: t.count(),
                per_cpu: t.per_cpu.clone(),
                fidelity,
                resolution: resolution[row.event.counter as usize].max(1),
            },
            None if opts.signals && outcome.windows == 0 => Outcome::Counted {
                scaled: accounting::Scaled {
                    value: 0.0,
                    exact: true,
                    share: 1.0,
                    factor: 1.0,
                },
                raw: 0,
                per_cpu: vec![0; device.ncpus()],
                fidelity,
                resolution: resolution[row.event.counter as usize].max(1),
            },
            None => Outcome::NotObserved { fidelity },
        };
    }
    if opts.signals && outcome.windows == 0 {
        notes.push(
            "-s: no SIGUSR1 arrived, so nothing was counted (the zeros are counted zeros)".into(),
        );
    }
    if let Some(f) = &outcome.failure {
        notes.push(format!(
            "counting failed while the command ran, counts stop there: {f}"
        ));
    }
    let multiplexing = opts.all.then(|| {
        let lost = outcome
            .tracker
            .as_ref()
            .is_some_and(|t| t.saw_other_tasks())
            && configs.len() > 1;
        if lost {
            notes.push(
                "-a: the command had other threads or processes while the mux was switched; each switch makes the device reopen its counters on the command's first thread, which perf's inherit extends only to tasks created afterwards, so those tasks' events after a switch are missing and the estimates are low".into(),
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
            switches: outcome.switches,
            switch_time_s: outcome.switch_time.as_secs_f64(),
            tasks_lost: lost,
        }
    });
    let mut report = Report {
        command: opts
            .command
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect(),
        pid: outcome.pid,
        exit: outcome.exit,
        model,
        ncpus: device.ncpus(),
        clock_khz: device.clock_khz(),
        device: path.display().to_string(),
        modes,
        elapsed_s: outcome.elapsed.as_secs_f64(),
        counted_s: outcome.ledger.counted.as_secs_f64(),
        windows: opts.signals.then_some(outcome.windows),
        multiplexing,
        per_process: None,
        costs: None,
        events: rows,
        notes,
    };
    if opts.per_process {
        report.per_process = Some(report::PerProcess {
            processes: outcome
                .tracker
                .as_ref()
                .map(|t| t.processes())
                .unwrap_or_default(),
            tree_cpu_ns: outcome.tree_cpu_ns,
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
    write_report(&report, opts)?;
    Ok(report.exit.status())
}

fn write_report(report: &Report, opts: &Options) -> Result<(), Error> {
    let text = if opts.json {
        let mut s = serde_json::to_string_pretty(&report.json()).map_err(|e| Error::Io {
            what: "writing JSON".into(),
            source: std::io::Error::other(e),
        })?;
        s.push('\n');
        s
    } else {
        report.text()
    };
    let io = |what: &Path| {
        let what = what.display().to_string();
        move |source| Error::Io {
            what: what.clone(),
            source,
        }
    };
    match &opts.output {
        Some(path) => std::fs::write(path, text).map_err(io(path)),
        None => std::io::stderr()
            .write_all(text.as_bytes())
            .map_err(io(Path::new("stderr"))),
    }
}
