//! The command line: perfex's letters (`-e`, `-a`, `-mp`, `-o`, `-s`, `-x`,
//! `-k`, `-y`, `-c`, `-t`, `-l`) and perf stat's long options, parsed by
//! clap. Options end at the first word that is not one (or `--`); the rest
//! is the command.
//!
//! Before clap, [`perfex_compat`] rewrites the one perfex spelling clap
//! would misread (`-mp`, which clap takes for `-m -p`) and turns perf
//! habits that mean something else here into usage errors that say what
//! to type instead: perf's `-x,` (CSV) is `--field-separator ,` because
//! `-x` is perfex's exception level, and perf's `-p PID` is `--pid PID`
//! because perfex's `-p` was PC sampling (pfmprof's job here).

use super::Error;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use pfm_model::Implementation;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Usage errors exit with this status, as clap's own do.
pub const EXIT_USAGE: u8 = 2;

/// The options. Help texts carry their own line breaks (clap wraps only
/// with its `wrap_help` feature, which would add a crate): every line of
/// `--help` fits 100 columns.
#[derive(Parser, Debug)]
#[command(
    name = "pfmstat",
    version,
    next_line_help = true,
    about = "Runs COMMAND and reports the Alpha performance-counter events it and all its \
             descendants\ncaused, counted through /dev/pfcntr (perfex(1) for pfmd).",
    override_usage = "pfmstat [OPTIONS] [--] COMMAND [ARGS]...\n       \
                      pfmstat [OPTIONS] --pid PID [[--] COMMAND [ARGS]...]\n       \
                      pfmstat -l|-t [--model MODEL | --device PATH]",
    after_help = "perfex spellings: -mp is one option (--per-process); -eNAME, -oFILE and -cFILE \
                  work.\n-x is perfex's exception level: perf stat's -x SEP is --field-separator \
                  SEP here.\nUsage errors exit with status 2. See pfmstat(1)."
)]
struct Cli {
    #[arg(
        short = 'e',
        long = "event",
        value_name = "EVENT",
        value_delimiter = ',',
        help = "Count EVENT: an Alpha name of the model, an alias (cycles, retinst, ...), a PAPI\n\
                preset (PAPI_TOT_CYC, ...) or an event number (-l lists them). Repeat, or\n\
                separate with commas; at most one per counter. Default: the model's default set."
    )]
    events: Vec<String>,
    #[arg(
        short = 'a',
        long = "all-events",
        help = "Multiplex every event of the model over the counters and scale the counts\n\
                (estimates). Ignores -e."
    )]
    all: bool,
    #[arg(
        long = "per-process",
        help = "(-mp) Also report per-CPU counts and each process of the command (apportioned\n\
                by CPU time). Not with -s."
    )]
    per_process: bool,
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        allow_hyphen_values = true,
        help = "Write the report to FILE instead of stderr (--json and --field-separator:\n\
                instead of stdout)."
    )]
    output: Option<PathBuf>,
    #[arg(
        short = 's',
        long = "signal-windows",
        help = "Count only between a SIGUSR1 and the next SIGUSR2 sent to pfmstat."
    )]
    signals: bool,
    #[arg(
        short = 'x',
        long = "exception",
        help = "Also count exception level (EV5: PALmode). Not perf's -x: see --field-separator."
    )]
    exception: bool,
    #[arg(short = 'k', long = "kernel", help = "Also count kernel level.")]
    kernel: bool,
    #[arg(
        short = 'y',
        long = "costs",
        help = "Cost estimates, and the statistics the counted events allow."
    )]
    costs: bool,
    #[arg(
        short = 'c',
        long = "cost-file",
        value_name = "FILE",
        allow_hyphen_values = true,
        help = "Override cost table rows from FILE (with -y or -t)."
    )]
    cost_file: Option<PathBuf>,
    #[arg(
        short = 't',
        long = "cost-table",
        help = "Print the cost table (the format -c reads) on stdout."
    )]
    print_costs: bool,
    #[arg(
        short = 'l',
        long = "list",
        help = "List the model's events on stdout, with what the running daemon counts for each\n\
                (exact, approximate, unavailable)."
    )]
    list: bool,
    #[arg(
        long,
        conflicts_with = "field_separator",
        help = "The report as JSON, on stdout (the command's stdout then goes to stderr) or in\n\
                the -o file. With -l: the listing as JSON."
    )]
    json: bool,
    #[arg(
        long = "field-separator",
        value_name = "SEP",
        allow_hyphen_values = true,
        help = "The counts as SEP-separated fields (perf stat -x SEP), on stdout (the command's\n\
                stdout then goes to stderr) or in the -o file."
    )]
    field_separator: Option<String>,
    #[arg(
        short = 'r',
        long = "repeat",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=100_000),
        help = "Run the command N times; report each count's mean and spread."
    )]
    repeat: Option<u32>,
    #[arg(
        short = 'I',
        long = "interval-print",
        value_name = "MS",
        value_parser = clap::value_parser!(u64).range(10..=86_400_000),
        help = "Also print the counts of every MS milliseconds (10 or more) while counting."
    )]
    interval_ms: Option<u64>,
    #[arg(
        long,
        value_name = "PID",
        value_parser = clap::value_parser!(i32).range(1..),
        help = "Count while process PID runs, until it exits, COMMAND ends, or SIGINT. The device\n\
                cannot count another process alone: this counts system-wide (needs the\n\
                privilege to), and the report says so."
    )]
    pid: Option<i32>,
    #[arg(
        long,
        value_name = "PATH",
        allow_hyphen_values = true,
        help = "The device (default $PFM_DEVICE, else /dev/pfcntr)."
    )]
    device: Option<PathBuf>,
    #[arg(
        long,
        value_name = "MODEL",
        ignore_case = true,
        value_parser = parse_model(),
        help = "With -t or -l only: print for MODEL without opening the device.\n"
    )]
    model: Option<Implementation>,
    #[arg(
        long = "slice-ms",
        value_name = "N",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..=10_000),
        help = "The -a time slice in milliseconds, 1 to 10000."
    )]
    slice_ms: u64,
    #[arg(
        trailing_var_arg = true,
        num_args = 1..,
        value_name = "COMMAND",
        help = "The command to run, and its arguments."
    )]
    command: Vec<OsString>,
}

/// The model names come from the list of implementations, so `--help`
/// and the error for a wrong name list every model there is.
fn parse_model() -> impl clap::builder::TypedValueParser<Value = Implementation> {
    use clap::builder::{PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(Implementation::ALL.map(Implementation::name))
        .map(|name| name.parse().expect("a name from Implementation::ALL"))
}

/// Where machine-readable output goes, and in which form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// perfex's text report (stderr, or the `-o` file).
    Text,
    Json,
    /// perf stat `-x SEP` lines with this separator.
    Separated(String),
}

impl Format {
    /// Machine output goes to stdout (or the `-o` file), never to stderr.
    pub fn is_machine(&self) -> bool {
        !matches!(self, Format::Text)
    }
}

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
    pub format: Format,
    pub repeat: u32,
    pub interval: Option<Duration>,
    pub pid: Option<i32>,
    pub device: Option<PathBuf>,
    pub model: Option<Implementation>,
    pub slice: Duration,
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
            format: Format::Text,
            repeat: 1,
            interval: None,
            pid: None,
            device: None,
            model: None,
            slice: Duration::from_millis(10),
            command: Vec::new(),
        }
    }
}

/// A usage error in clap's form (message, usage line, where to read more).
pub fn usage(message: impl std::fmt::Display) -> Error {
    Error::Usage(Box::new(
        Cli::command().error(ErrorKind::ArgumentConflict, message),
    ))
}

/// Parses the arguments after the program name. `--help` and `--version`
/// come back as [`Error::Usage`] of clap's display kinds, which print to
/// stdout and exit 0.
pub fn parse<I>(args: I) -> Result<Options, Error>
where
    I: IntoIterator<Item = OsString>,
{
    let words = perfex_compat(args.into_iter().collect())?;
    let cli = Cli::try_parse_from(std::iter::once(OsString::from("pfmstat")).chain(words))
        .map_err(|e| Error::Usage(Box::new(e)))?;
    let format = match (cli.json, cli.field_separator) {
        (true, _) => Format::Json,
        (false, Some(sep)) => Format::Separated(sep),
        (false, None) => Format::Text,
    };
    let opts = Options {
        events: cli.events,
        all: cli.all,
        per_process: cli.per_process,
        output: cli.output,
        signals: cli.signals,
        exception: cli.exception,
        kernel: cli.kernel,
        costs: cli.costs,
        cost_file: cli.cost_file,
        print_costs: cli.print_costs,
        list: cli.list,
        format,
        repeat: cli.repeat.unwrap_or(1),
        interval: cli.interval_ms.map(Duration::from_millis),
        pid: cli.pid,
        device: cli.device,
        model: cli.model,
        slice: Duration::from_millis(cli.slice_ms),
        command: cli.command,
    };
    validate(&opts)?;
    Ok(opts)
}

/// The perfex-compatibility pass over the words before clap (see the
/// module docs). Walks the options only: the command's words are left
/// alone, whatever they look like.
pub fn perfex_compat(words: Vec<OsString>) -> Result<Vec<OsString>, Error> {
    let mut cli = Cli::command();
    // Actions are filled in when the command is built.
    cli.build();
    let takes_value_short = |c: char| {
        cli.get_arguments()
            .any(|a| a.get_short() == Some(c) && a.get_action().takes_values())
    };
    let takes_value_long = |name: &str| {
        cli.get_arguments()
            .any(|a| a.get_long() == Some(name) && a.get_action().takes_values())
    };
    let mut out = Vec::with_capacity(words.len());
    let mut exception = false;
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let Some(text) = word.to_str().map(str::to_owned) else {
            out.push(word);
            break; // a non-UTF-8 word cannot be an option: the command
        };
        if text == "--" {
            out.push(word);
            break;
        }
        if !text.starts_with('-') || text == "-" {
            if exception && text.chars().count() == 1 && !text.chars().all(char::is_alphanumeric) {
                return Err(usage(format!(
                    "-x is perfex's exception level, so {text:?} would run as the command; \
                     for perf stat's -x {text:?} (separated fields) use --field-separator \
                     {text:?} (or `-- {text}` to run a command of that name)"
                )));
            }
            out.push(word);
            break;
        }
        if text == "-mp" {
            out.push("--per-process".into());
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            out.push(word.clone());
            if !long.contains('=')
                && takes_value_long(long)
                && let Some(value) = words.next()
            {
                out.push(value);
            }
            continue;
        }
        // A cluster of short options: `-ky`, `-ecycles`, `-o` FILE.
        let letters: Vec<char> = text[1..].chars().collect();
        let mut next_is_value = false;
        for (i, &c) in letters.iter().enumerate() {
            match c {
                'p' => {
                    return Err(usage(
                        "perfex's -p (PC sampling) is pfmprof(1) here; \
                         to count a running process (perf stat -p PID) use --pid PID",
                    ));
                }
                'x' => {
                    exception = true;
                    if let Some(&sep) = letters.get(i + 1)
                        && !sep.is_ascii_alphabetic()
                    {
                        return Err(usage(format!(
                            "-x is perfex's exception level; for perf stat's -x{sep} \
                             (separated fields) use --field-separator {:?}",
                            letters[i + 1..].iter().collect::<String>()
                        )));
                    }
                }
                _ if takes_value_short(c) => {
                    next_is_value = i + 1 == letters.len();
                    break;
                }
                _ => {}
            }
        }
        out.push(word);
        if next_is_value && let Some(value) = words.next() {
            out.push(value);
        }
    }
    out.extend(words);
    Ok(out)
}

fn validate(opts: &Options) -> Result<(), Error> {
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
    if opts.model.is_some() && (!opts.command.is_empty() || opts.pid.is_some()) {
        return Err(usage(
            "--model cannot be used with a command: the device's model is used",
        ));
    }
    if opts.command.is_empty() && opts.pid.is_none() && !(opts.print_costs || opts.list) {
        return Err(usage(
            "no command to run (or --pid PID to count a running one)",
        ));
    }
    if let Format::Separated(sep) = &opts.format {
        if sep.is_empty() {
            return Err(usage("--field-separator needs a separator, such as ','"));
        }
        if opts.costs || opts.per_process {
            return Err(usage(
                "--field-separator carries the counts only: use --json for -y and -mp",
            ));
        }
    }
    if opts.repeat > 1 {
        if opts.pid.is_some() {
            return Err(usage(
                "--repeat runs the command again; --pid counts a running process once",
            ));
        }
        if opts.per_process {
            return Err(usage("-mp reports one run: not with --repeat"));
        }
        if opts.interval.is_some() {
            return Err(usage("--interval-print follows one run: not with --repeat"));
        }
    }
    // `--pid $(pidof server)` with two servers: the second PID would be
    // run as the command ("command not found").
    if let (Some(pid), Some(first)) = (opts.pid, opts.command.first()) {
        let first = first.to_string_lossy();
        if !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()) {
            return Err(usage(format!(
                "--pid takes one PID: {first} after --pid {pid} would run as the command \
                 (pidof -s NAME gives one PID)"
            )));
        }
    }
    if opts.pid.is_some() && opts.per_process {
        return Err(usage(
            "-mp apportions the command's own counts; --pid counts system-wide, \
             which cannot be apportioned to processes",
        ));
    }
    Ok(())
}

/// The `--help` text (for tests and the man page's check).
pub fn help() -> String {
    Cli::command().render_help().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(words: &[&str]) -> Result<Options, Error> {
        parse(words.iter().map(OsString::from))
    }

    fn usage_message(words: &[&str]) -> String {
        match parse_str(words) {
            Err(Error::Usage(e)) => {
                assert_eq!(e.exit_code(), i32::from(EXIT_USAGE), "{words:?}: {e}");
                e.to_string()
            }
            other => panic!("{words:?} must be a usage error: {other:?}"),
        }
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
            "-mp",
            "/",
        ])
        .unwrap();
        assert_eq!(o.events, ["cycles", "retinst"]);
        assert!(o.per_process && o.exception && o.kernel && o.costs && !o.signals);
        assert_eq!(o.cost_file, Some(PathBuf::from("costs")));
        assert_eq!(o.output, Some(PathBuf::from("out")));
        assert_eq!(o.command, ["ls", "-l", "-mp", "/"].map(OsString::from));
        assert!(!o.list, "-l after the command belongs to the command");
        // Clusters, as getopt allows; a value ends a cluster.
        let o = parse_str(&["-kyecycles", "-ofile", "true"]).unwrap();
        assert!(o.kernel && o.costs);
        assert_eq!(o.events, ["cycles"]);
        assert_eq!(o.output, Some(PathBuf::from("file")));
        // `-o -mp`: the value is a file name, not an option.
        let o = parse_str(&["-o", "-mp", "true"]).unwrap();
        assert_eq!(o.output, Some(PathBuf::from("-mp")));
        assert!(!o.per_process);
    }

    #[test]
    fn perf_long_options_and_comma_lists() {
        let o = parse_str(&[
            "--json",
            "--device=/run/pfm/pfcntr",
            "--slice-ms",
            "20",
            "-e",
            "cycles,branches",
            "--event=PAPI_TOT_CYC",
            "--repeat",
            "3",
            "-a",
            "--",
            "-weird-command",
        ])
        .unwrap();
        assert!(o.all);
        assert_eq!(o.format, Format::Json);
        assert_eq!(o.events, ["cycles", "branches", "PAPI_TOT_CYC"]);
        assert_eq!(o.repeat, 3);
        assert_eq!(o.device, Some(PathBuf::from("/run/pfm/pfcntr")));
        assert_eq!(o.slice, Duration::from_millis(20));
        assert_eq!(o.command, [OsString::from("-weird-command")]);
        let o = parse_str(&[
            "--field-separator",
            ";",
            "--interval-print",
            "100",
            "--output",
            "f",
            "true",
        ])
        .unwrap();
        assert_eq!(o.format, Format::Separated(";".into()));
        assert_eq!(o.interval, Some(Duration::from_millis(100)));
        assert_eq!(o.output, Some(PathBuf::from("f")));
        let o = parse_str(&["--pid", "1"]).unwrap();
        assert_eq!(o.pid, Some(1));
        assert!(o.command.is_empty());
        let o = parse_str(&["--pid", "1", "--", "sleep", "1"]).unwrap();
        assert_eq!(o.command, ["sleep", "1"].map(OsString::from));
    }

    #[test]
    fn table_and_listing_need_no_command() {
        let o = parse_str(&["-t", "--model", "ev6"]).unwrap();
        assert!(o.print_costs);
        assert_eq!(o.model, Some(Implementation::Ev6));
        let o = parse_str(&["-l", "--model", "PCA56"]).unwrap();
        assert_eq!(o.model, Some(Implementation::Pca56), "any case");
        let m = usage_message(&["-l", "--model", "ev8"]);
        for model in Implementation::ALL {
            assert!(m.contains(model.name()), "{model} listed: {m}");
        }
        assert!(parse_str(&["-l"]).unwrap().list);
        assert!(parse_str(&["-l", "--json"]).unwrap().list);
    }

    #[test]
    fn perf_habits_that_mean_something_else_say_what_to_type() {
        let m = usage_message(&["-x,", "-e", "cycles", "true"]);
        assert!(m.contains("--field-separator \",\""), "{m}");
        let m = usage_message(&["-x", ",", "true"]);
        assert!(m.contains("--field-separator"), "{m}");
        let m = usage_message(&["-p", "42", "true"]);
        assert!(m.contains("--pid PID"), "{m}");
        // A command named `,` after `--` is the user's business.
        assert_eq!(
            parse_str(&["-x", "--", ","]).unwrap().command,
            [OsString::from(",")]
        );
        assert!(parse_str(&["-xk", "true"]).unwrap().exception);
    }

    #[test]
    fn mistakes_are_short_usage_errors() {
        for words in [
            &["-q", "ls"][..],
            &["-e"],
            &["-y"],
            &["-c", "f", "ls"],
            &["--model", "ev6", "ls"],
            &["--model", "ev9", "-t"],
            &["--slice-ms", "0", "ls"],
            &["-s", "-mp", "ls"],
            &["--json", "--field-separator", ",", "ls"],
            &["--field-separator", "", "ls"],
            &["--field-separator", ",", "-y", "ls"],
            &["--repeat", "0", "ls"],
            &["--repeat", "2", "--pid", "1"],
            &["--repeat", "2", "-I", "100", "ls"],
            &["--interval-print", "5", "ls"],
            &["--pid", "0"],
            &["--pid", "1", "-mp"],
            &["--pid", "1", "2"],
            &["--model", "ev6", "--pid", "1", "-l"],
        ] {
            let m = usage_message(words);
            assert!(
                m.lines().count() <= 10 && m.contains("--help") && !m.contains("Options:"),
                "{words:?}: short, with a pointer to --help:\n{m}"
            );
        }
    }

    #[test]
    fn help_and_version_are_not_errors_and_fit_100_columns() {
        for flag in ["--help", "-h", "--version", "-V"] {
            let Err(Error::Usage(e)) = parse_str(&[flag]) else {
                panic!("{flag}")
            };
            assert_eq!(e.exit_code(), 0, "{flag}");
        }
        let Err(Error::Usage(e)) = parse_str(&["--version"]) else {
            panic!()
        };
        assert_eq!(
            e.to_string().trim(),
            format!("pfmstat {}", env!("CARGO_PKG_VERSION"))
        );
        let help = help();
        for line in help.lines() {
            assert!(line.chars().count() <= 100, "{line}");
        }
        assert!(help.contains("--field-separator") && help.contains("--per-process"));
    }
}
