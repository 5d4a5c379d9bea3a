//! The command line, perfex style: single-dash options (`-mp` is one
//! option), options end at the first word that is not one (or `--`), the
//! rest is the command.

use super::Error;
use pfm_model::Implementation;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
usage: pfmstat [-e EVENT]... [-a] [-mp] [-o FILE] [-s] [-x] [-k] [-y] [-c FILE] [-t]
               [--json] [--device PATH] [--slice-ms N] COMMAND [ARGS]...
       pfmstat -t [-c FILE] [--model MODEL | --device PATH]
       pfmstat -l [--model MODEL | --device PATH]

Runs COMMAND and reports the Alpha performance-counter events it and all its
descendants caused, counted through /dev/pfcntr (perfex(1) for pfmd).

  -e EVENT        count EVENT: an Alpha name of the active model (PF_CYCLES,
                  PF6_MUX1_RET_COND_BRANCHES, ...), an alias (cycles, retinst,
                  ...) or an event number (pfmstat -l lists them); repeat for
                  more events, at most one per counter. Default: the model's
                  default set.
  -a              multiplex every event of the model over the counters, round
                  robin every --slice-ms, and scale each count by the run time
                  over the time it was counted (estimates). Ignores -e.
  -mp             also report per-CPU counts and each process of the command
                  (the device cannot split counts per process: per-process
                  figures are apportioned by CPU time and marked so). Not
                  with -s.
  -o FILE         write the report to FILE instead of stderr.
  -s              count only between a SIGUSR1 and the next SIGUSR2 sent to
                  pfmstat (repeatable; windows add up).
  -x              also count exception level (EV5: PALmode; EV4/EV6 cannot
                  choose modes).
  -k              also count kernel level (needs perf_event_paranoid <= 1 or
                  CAP_PERFMON; EV4/EV6 cannot choose modes).
  -y              cost estimates: counts x per-event cycle costs, most costly
                  first, and the statistics the counted events allow.
  -c FILE         override costs from FILE (format of -t); after $PFM_COSTS or
                  /etc/pfm/costs.
  -t              print the cost table (the format -c reads) to stdout.
  -l, --list      list the model's events with numbers and aliases.
  --json          machine-readable report.
  --device PATH   the device (default $PFM_DEVICE, else /dev/pfcntr).
  --model MODEL   with -t or -l only: print for MODEL without opening the device.
  --slice-ms N    -a time slice in milliseconds (default 10).
";

/// Everything the command line asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub events: Vec<String>,
    pub all: bool,
    pub per_process: bool,
    pub output: Option<PathBuf>,
    pub signals: bool,
    pub exception: bool,
    pub kernel: bool,
    pub costs: bool,
    pub cost_file: Option<PathBuf>,
    pub print_costs: bool,
    pub list: bool,
    pub json: bool,
    pub device: Option<PathBuf>,
    pub model: Option<Implementation>,
    pub slice: Duration,
    pub help: bool,
    pub command: Vec<OsString>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            events: Vec::new(),
            all: false,
            per_process: false,
            output: None,
            signals: false,
            exception: false,
            kernel: false,
            costs: false,
            cost_file: None,
            print_costs: false,
            list: false,
            json: false,
            device: None,
            model: None,
            slice: Duration::from_millis(10),
            help: false,
            command: Vec::new(),
        }
    }
}

fn usage(message: impl Into<String>) -> Error {
    Error::Usage(message.into())
}

/// Parses the arguments after the program name.
pub fn parse<I>(args: I) -> Result<Options, Error>
where
    I: IntoIterator<Item = OsString>,
{
    let mut opts = Options::default();
    let mut args = args.into_iter().peekable();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str().map(str::to_owned) else {
            // A non-UTF-8 word cannot be an option: it starts the command.
            opts.command.push(arg);
            break;
        };
        if text == "--" {
            break;
        }
        if !text.starts_with('-') || text == "-" {
            opts.command.push(arg);
            break;
        }
        let mut value = |name: &str| -> Result<String, Error> {
            args.next()
                .ok_or_else(|| usage(format!("{name} needs a value")))?
                .into_string()
                .map_err(|_| usage(format!("{name}: the value is not UTF-8")))
        };
        // `--name=value` for the long options.
        let (name, inline) = match text.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (text.clone(), None),
        };
        let mut long_value = |name: &str| match &inline {
            Some(v) => Ok(v.clone()),
            None => value(name),
        };
        match name.as_str() {
            "-e" => opts.events.push(value("-e")?),
            "-a" => opts.all = true,
            "-mp" => opts.per_process = true,
            "-o" => opts.output = Some(value("-o")?.into()),
            "-s" => opts.signals = true,
            "-x" => opts.exception = true,
            "-k" => opts.kernel = true,
            "-y" => opts.costs = true,
            "-c" => opts.cost_file = Some(value("-c")?.into()),
            "-t" => opts.print_costs = true,
            "-l" | "--list" => opts.list = true,
            "--json" => opts.json = true,
            "-h" | "--help" => opts.help = true,
            "--device" => opts.device = Some(long_value("--device")?.into()),
            "--model" => {
                let m = long_value("--model")?;
                opts.model = Some(m.parse().map_err(|e| usage(format!("--model: {e}")))?);
            }
            "--slice-ms" => {
                let v = long_value("--slice-ms")?;
                let ms: u64 = v
                    .parse()
                    .ok()
                    .filter(|ms| (1..=10_000).contains(ms))
                    .ok_or_else(|| usage(format!("--slice-ms {v:?}: 1 to 10000 milliseconds")))?;
                opts.slice = Duration::from_millis(ms);
            }
            // `-eNAME` and `-oFILE`, `-cFILE`, as getopt allows.
            _ if name.starts_with("-e") && name.len() > 2 => opts.events.push(name[2..].into()),
            _ if name.starts_with("-o") && name.len() > 2 => opts.output = Some(name[2..].into()),
            _ if name.starts_with("-c") && name.len() > 2 && !name.starts_with("--") => {
                opts.cost_file = Some(name[2..].into())
            }
            _ => return Err(usage(format!("unknown option {text}"))),
        }
    }
    opts.command.extend(args);
    validate(&opts)?;
    Ok(opts)
}

fn validate(opts: &Options) -> Result<(), Error> {
    if opts.help {
        return Ok(());
    }
    if opts.cost_file.is_some() && !(opts.costs || opts.print_costs) {
        return Err(usage(
            "-c needs -y or -t (it overrides the cost table they use)",
        ));
    }
    if opts.signals && opts.per_process {
        // As in perfex. Here because -mp apportions by CPU time over the
        // whole run, which a -s window is not.
        return Err(usage("-s and -mp are mutually exclusive"));
    }
    if opts.model.is_some() && !(opts.print_costs || opts.list) {
        return Err(usage(
            "--model is only for -t and -l: a counting run uses the device's model",
        ));
    }
    if opts.command.is_empty() && !(opts.print_costs || opts.list) {
        return Err(usage("no command to run"));
    }
    if opts.model.is_some() && !opts.command.is_empty() {
        return Err(usage(
            "--model cannot be used with a command: the device's model is used",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(words: &[&str]) -> Result<Options, Error> {
        parse(words.iter().map(OsString::from))
    }

    #[test]
    fn perfex_options_and_the_command() {
        let o = parse_str(&[
            "-e",
            "cycles",
            "-eretinst",
            "-mp",
            "-x",
            "-k",
            "-y",
            "-c",
            "costs",
            "-o",
            "out",
            "ls",
            "-l",
            "/",
        ])
        .unwrap();
        assert_eq!(o.events, ["cycles", "retinst"]);
        assert!(o.per_process && o.exception && o.kernel && o.costs && !o.signals);
        assert_eq!(o.cost_file, Some(PathBuf::from("costs")));
        assert_eq!(o.output, Some(PathBuf::from("out")));
        assert_eq!(o.command, ["ls", "-l", "/"].map(OsString::from));
        assert!(!o.list, "-l after the command belongs to the command");
    }

    #[test]
    fn long_options_and_double_dash() {
        let o = parse_str(&[
            "--json",
            "--device=/run/pfm/pfcntr",
            "--slice-ms",
            "20",
            "-a",
            "--",
            "-weird-command",
        ])
        .unwrap();
        assert!(o.json && o.all);
        assert_eq!(o.device, Some(PathBuf::from("/run/pfm/pfcntr")));
        assert_eq!(o.slice, Duration::from_millis(20));
        assert_eq!(o.command, [OsString::from("-weird-command")]);
    }

    #[test]
    fn table_and_listing_need_no_command() {
        let o = parse_str(&["-t", "--model", "ev6"]).unwrap();
        assert!(o.print_costs);
        assert_eq!(o.model, Some(Implementation::Ev6));
        assert!(parse_str(&["-l"]).unwrap().list);
    }

    #[test]
    fn mistakes_are_usage_errors() {
        for words in [
            &["-q", "ls"][..],
            &["-e"],
            &["-y"],
            &["-c", "f", "ls"],
            &["--model", "ev6", "ls"],
            &["--model", "ev9", "-t"],
            &["--slice-ms", "0", "ls"],
            &["-s", "--", ""][..1],
            &["-s", "-mp", "ls"],
        ] {
            assert!(
                matches!(parse_str(words), Err(Error::Usage(_))),
                "{words:?} must be a usage error"
            );
        }
    }
}
