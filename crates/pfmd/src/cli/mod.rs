//! `pfmd` command line: parse, then run the daemon or print a listing.

mod daemon;
mod host;
mod hotplug;
mod listing;
mod systemd;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, ValueEnum};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportChoice {
    /// CUSE where /dev/cuse opens, else FUSE.
    Auto,
    /// A one-file FUSE filesystem at --mountpoint, linked from --dev-link.
    Fuse,
    /// A character device /dev/<dev-name> (needs the cuse module).
    Cuse,
}

/// Serve the OSF/1 / Tru64 pfm performance-counter device on Linux.
#[derive(Debug, Parser)]
#[command(name = "pfmd", version)]
pub struct Args {
    /// Alpha implementation to emulate.
    #[arg(long, default_value = "ev4", ignore_case = true, value_parser = model_parser())]
    pub model: pfm_model::Implementation,
    /// How the device is served.
    #[arg(long, value_enum, default_value = "auto")]
    pub transport: TransportChoice,
    /// Where the FUSE transport mounts its one-file filesystem.
    #[arg(long, default_value = "/run/pfm")]
    pub mountpoint: PathBuf,
    /// Symlink to the device file, or `none`. Under CUSE the device itself
    /// is `/dev/<dev-name>`; a different path here becomes a link to it.
    #[arg(long, default_value = "/dev/pfcntr")]
    pub dev_link: String,
    /// CUSE: the character device's name, `/dev/<NAME>`.
    #[arg(long, default_value = "pfcntr", value_name = "NAME")]
    pub dev_name: String,
    /// Permission bits of the device, octal.
    #[arg(long, default_value = "0444", value_parser = parse_octal)]
    pub mode: u16,
    /// CUSE: group owning `/dev/<dev-name>` (with e.g. --mode 0440).
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// Nominal CPU clock in MHz for cycle approximations and pr_cycle
    /// (default: /proc/cpuinfo's "cpu MHz", else the cpufreq maximum, else
    /// measured against the cycle counter).
    #[arg(long, value_parser = parse_mhz)]
    pub cpu_mhz: Option<f64>,
    /// Members of this group get what CAP_PERFMON gives: system-wide and
    /// kernel-mode counting, kernel profiling, the EV5's 256-event periods.
    #[arg(long)]
    pub allow_group: Option<String>,
    /// Site event map binding Alpha events to raw host events
    /// (default: /etc/pfm/events.map if it exists).
    #[arg(long)]
    pub event_map: Option<PathBuf>,
    /// Largest PC-profile histogram one open may allocate, in bytes (ENOMEM past it).
    #[arg(long, default_value_t = 64 << 20)]
    pub max_profile_bytes: u64,
    /// Profile memory of all opens together, bytes (a profile counts twice
    /// its buckets: a read may keep a copy). ENOMEM past it.
    #[arg(long, default_value_t = 1 << 30, help_heading = "Budgets")]
    pub profile_memory_total: u64,
    /// Profile memory of one user's opens, bytes. ENOMEM past it.
    #[arg(long, default_value_t = 256 << 20, help_heading = "Budgets")]
    pub profile_memory_per_user: u64,
    /// perf descriptors the daemon opens for all callers. EBUSY past it.
    #[arg(long, default_value_t = 4096, help_heading = "Budgets")]
    pub perf_fds_total: u64,
    /// perf descriptors for one user's opens. EBUSY past it.
    #[arg(long, default_value_t = 1024, help_heading = "Budgets")]
    pub perf_fds_per_user: u64,
    /// perf ring-buffer memory of all samplers, bytes. ENOMEM past it.
    #[arg(long, default_value_t = 256 << 20, help_heading = "Budgets")]
    pub ring_memory_total: u64,
    /// perf ring-buffer memory of one user's samplers, bytes. ENOMEM past it.
    #[arg(long, default_value_t = 64 << 20, help_heading = "Budgets")]
    pub ring_memory_per_user: u64,
    /// Threads one open may give the PME bit (PCNTLOGSELECT). ENOSPC past it.
    #[arg(long, default_value_t = 256, help_heading = "Budgets")]
    pub max_pme_threads: usize,
    /// FUSE transport: serve over io_uring, one queue per CPU served on
    /// that CPU (auto: where /sys/module/fuse/parameters/enable_uring is Y
    /// and pfmd may run on every CPU; else the classic loop). `off`: the
    /// classic loop.
    #[arg(long, value_enum, default_value = "auto")]
    pub fuse_uring: crate::transport::fuse::UringChoice,
    /// Reader threads, at least 2 (CUSE, and FUSE's classic channel; over
    /// io_uring each CPU's queue has its own thread).
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// A read of the counters of this many CPUs or more (an ALL or EACH open
    /// counting every task) goes to a reader thread bound to each CPU, all
    /// at once; else the serving thread reads each CPU in turn. 0: always
    /// in turn. The default, 12, lies between what was measured on a
    /// 16-CPU host: in turn faster at 8 CPUs, the readers at 16.
    #[arg(long, default_value_t = 12, value_name = "CPUS")]
    pub parallel_reads: usize,
    /// Print the active model's events and what this host counts for each, then exit.
    #[arg(long)]
    pub list_events: bool,
    /// With --list-events: print the listing as JSON.
    #[arg(long, requires = "list_events")]
    pub json: bool,
    /// Print the current event mapping in the --event-map file format, then exit.
    #[arg(long)]
    pub print_event_map: bool,
}

/// The model names come from the list of implementations, so `--help` and
/// the error for a wrong name list every model there is.
fn model_parser() -> impl TypedValueParser<Value = pfm_model::Implementation> {
    PossibleValuesParser::new(pfm_model::Implementation::ALL.map(pfm_model::Implementation::name))
        .map(|name| name.parse().expect("a name from Implementation::ALL"))
}

impl Args {
    pub fn limits(&self) -> crate::device::budget::Limits {
        crate::device::budget::Limits::new(
            (self.profile_memory_total, self.profile_memory_per_user),
            (self.perf_fds_total, self.perf_fds_per_user),
            (self.ring_memory_total, self.ring_memory_per_user),
            self.max_pme_threads,
        )
    }
}

/// The clock rates `--cpu-mhz` takes: below 1 MHz cycle approximations
/// round to nothing, far above any chip they overflow.
const MHZ_RANGE: std::ops::RangeInclusive<f64> = 1.0..=100_000.0;

/// A clock rate in MHz within [`MHZ_RANGE`] (checked here, so that
/// `--list-events` refuses what the daemon would).
fn parse_mhz(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|mhz| MHZ_RANGE.contains(mhz))
        .ok_or_else(|| {
            format!(
                "{text:?} is not a clock rate in MHz from {} to {}",
                MHZ_RANGE.start(),
                MHZ_RANGE.end()
            )
        })
}

fn parse_octal(text: &str) -> Result<u16, String> {
    u16::from_str_radix(text.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{text:?} is not an octal mode"))
}

pub fn main() -> ExitCode {
    // The store helper is this executable started again by the daemon
    // (transport/store.rs); it has no command line of its own.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == crate::transport::store::HELPER_ARG)
    {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .init();
        return crate::transport::store::helper_main();
    }
    let args = Args::parse();
    let listing = args.list_events || args.print_event_map;
    // A listing prints its answer on stdout and nothing on stderr unless
    // something is wrong; the daemon logs its life at INFO. Colour only on
    // a terminal, and never with NO_COLOR set.
    let default_level = if listing { "warn" } else { "info" };
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .init();
    let result = if listing {
        listing::run(&args)
    } else {
        daemon::run(&args)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // On stderr, where the journal picks it up too.
            eprintln!("pfmd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why pfmd could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
    #[error("{what}: {}", describe(source))]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {}: {source}", path.display())]
    EventMap {
        /// `--event-map`, or the site event map read without it.
        what: &'static str,
        path: PathBuf,
        #[source]
        source: pfm_model::EventMapError,
    },
    #[error(transparent)]
    Cuse(#[from] crate::transport::cuse::CuseError),
    #[error(transparent)]
    Fuse(#[from] crate::transport::fuse::FuseError),
}

/// An I/O error as a person reads it: the errno's description, without
/// Rust's "(os error N)".
fn describe(e: &std::io::Error) -> String {
    e.raw_os_error().map_or_else(
        || e.to_string(),
        |n| nix::errno::Errno::from_raw(n).desc().to_string(),
    )
}

impl StartError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartError {
        let what = what.into();
        move |source| StartError::Io { what, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock that would round to 0 kHz (silent zero cycles) or overflow
    /// the counts is refused; real clocks are taken.
    #[test]
    fn cpu_mhz_takes_real_clocks_only() {
        for bad in ["0", "0.0001", "-5", "1e30", "inf", "NaN", "fast"] {
            assert!(parse_mhz(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_mhz("2600"), Ok(2600.0));
        assert_eq!(parse_mhz("1"), Ok(1.0));
    }

    /// `--model` takes every implementation's name, in any case, and a
    /// wrong one is told every name there is.
    #[test]
    fn model_names_come_from_the_implementations() {
        for model in pfm_model::Implementation::ALL {
            let upper = model.name().to_uppercase();
            let args = Args::try_parse_from(["pfmd", "--model", &upper]).unwrap();
            assert_eq!(args.model, model);
        }
        let said = Args::try_parse_from(["pfmd", "--model", "ev8"])
            .unwrap_err()
            .to_string();
        for model in pfm_model::Implementation::ALL {
            assert!(said.contains(model.name()), "{model}: {said}");
        }
    }
}
