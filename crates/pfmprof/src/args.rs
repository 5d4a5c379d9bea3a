//! The `pfmprof` command line, Tru64 style (`-all`, `-stride 4`, ...): options
//! end at the first word that is not one, which is the program to run.

use super::ProfError;
use super::event::EventRequest;
use pfm_client::OpenMode;
use std::ffi::OsString;
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: pfmprof [-all|-each|-one] [-stride N] [-e EVENT] [-period N] [-pm STAT] [-k]
               [-select] [-o FILE] [--format F] [--output FILE] [--device PATH]
               [--no-ptrace] [-f] [--annotate FUNC] PROGRAM [ARGS...]
       pfmprof --report FILE [--format F] [--output FILE] [--annotate FUNC]
       pfmprof --version

  -all, -each, -one  open mode (default -all); -one binds pfmprof and PROGRAM
                     to the CPU pfmprof is running on
  -stride N          instructions (4 bytes) per bucket: 0 or a power of two (default 4)
  -e EVENT           an event of the model pfmd emulates, by name (with or without
                     its prefix: PF5_MUX0_CYCLES or cycles), pfmstat -l's aliases
                     and PAPI presets, or its number in pfmstat -l;
                     default cycles on counter 0 (PF_CYCLES, PF5_MUX0_CYCLES,
                     PF6_MUX0_CYCLES, PF67_C0_CYCLES). ev67: also a pair with one
                     counting counter, or a profile-me statistic (PF67_PM_RETIRE)
  -period N          events per interrupt, one the event's counter has; default
                     the shortest of at least 4096 (ev4 4096, ev5 65536 or 16384
                     on counter 2, ev6 and ev67 1048576); 256 needs privilege on ev5
  -pm STAT           ev67 profile-me mode recording STAT per sampled instruction
                     (PF67_PM_RETIRE, _FREQ or _VALID on Linux hosts)
  -k                 kprofile: profile kernel text (_stext.._etext) system-wide
                     until PROGRAM exits or SIGINT/SIGTERM (needs root,
                     CAP_PERFMON or pfmd's --allow-group, and kernel addresses
                     in /proc/kallsyms: root, CAP_SYSLOG or kptr_restrict 0
                     with perf_event_paranoid <= 1);
                     without -k the executable, its libraries and (where the
                     caller may) the kernel are profiled in turn
  -select            with -k: only kernel time of PROGRAM and its children
  -o FILE            also write the raw buckets and header; --report FILE prints
                     the same report again
  --format F         the report as text (default), json, folded (flame-graph
                     stacks), pprof (protobuf for go tool pprof, speedscope) or
                     svg (a flame graph); --json is --format json
  --output FILE      the report to FILE instead of standard output; PROGRAM
                     then keeps its standard output (without --output, PROGRAM's
                     standard output is pfmprof's standard error)
  --device PATH      the device (default $PFM_DEVICE, else /dev/pfcntr)
  --no-ptrace        learn PROGRAM's load address without stopping it at exec
                     (samples before the ranges are set are lost)
  -f, --follow-exec  profile the newest process PROGRAM starts (sh -c ./prog:
                     prog), switching ranges to it; else PROGRAM's own process
  --annotate FUNC    with the text report: FUNC's samples by source line (from
                     DWARF), with the source where the file can be read
  -V, --version      print pfmprof's version

Usage errors exit with status 2.
";

/// Usage errors exit with this status (as clap's do, and pfmstat's).
pub const EXIT_USAGE: u8 = 2;

/// The synopsis alone: what a usage error prints under its message (the
/// whole of [`USAGE`] is for `--help`).
pub fn synopsis() -> &'static str {
    USAGE.split("\n\n").next().unwrap_or(USAGE)
}

/// `--version`'s line.
pub fn version() -> String {
    format!("pfmprof {}", env!("CARGO_PKG_VERSION"))
}

/// pfmprof's name of an open mode (docs/device.md §2), as its options (`-all`,
/// `-each`, `-one`) and the `open` line of a profile file say it.
pub fn open_mode_name(mode: OpenMode) -> &'static str {
    match mode {
        OpenMode::All => "all",
        OpenMode::Each => "each",
        OpenMode::One => "one",
    }
}

/// The open mode [`open_mode_name`] calls `name`.
pub fn open_mode_named(name: &str) -> Option<OpenMode> {
    [OpenMode::All, OpenMode::Each, OpenMode::One]
        .into_iter()
        .find(|mode| open_mode_name(*mode) == name)
}

/// What to profile and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileArgs {
    pub mode: OpenMode,
    pub stride: u64,
    /// `-e`, `-period`, `-pm`: resolved on the daemon's model once the
    /// device is open ([`crate::event::choose`]).
    pub event: EventRequest,
    pub kernel: bool,
    /// `-k` restricted to PROGRAM's tree (PCNTLOGSELECT) instead of LOGALL.
    pub select: bool,
    pub output: Option<PathBuf>,
    /// How and where the report goes.
    pub show: Show,
    /// `--device`; without it `$PFM_DEVICE`, else `/dev/pfcntr`.
    pub device: Option<PathBuf>,
    pub ptrace: bool,
    /// `-f`: follow the newest process of PROGRAM's tree.
    pub follow: bool,
    pub program: Vec<OsString>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    Profile(ProfileArgs),
    Report { file: PathBuf, show: Show },
    Help,
    Version,
}

/// A report's format (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
    Folded,
    Pprof,
    Svg,
}

impl std::str::FromStr for Format {
    type Err = ProfError;
    fn from_str(s: &str) -> Result<Format, ProfError> {
        Ok(match s {
            "text" => Format::Text,
            "json" => Format::Json,
            "folded" => Format::Folded,
            "pprof" => Format::Pprof,
            "svg" => Format::Svg,
            _ => {
                return Err(ProfError::Usage(format!(
                    "--format {s}: one of text, json, folded, pprof, svg"
                )));
            }
        })
    }
}

/// The report's format, and the file it goes to (else standard output).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Show {
    pub format: Format,
    pub to: Option<PathBuf>,
    /// `--annotate FUNC` (text and JSON reports).
    pub annotate: Option<String>,
}

/// Parses the arguments after the program name.
pub fn parse(args: &[OsString]) -> Result<Invocation, ProfError> {
    let mut mode = OpenMode::All;
    let mut stride = 4;
    let mut event = EventRequest::default();
    let mut kernel = false;
    let mut select = false;
    let mut output = None;
    let mut show = Show::default();
    let mut device = None;
    let mut ptrace = true;
    let mut follow = false;
    let mut report = None;
    let mut i = 0;
    let value = |i: &mut usize, opt: &str| -> Result<OsString, ProfError> {
        *i += 1;
        args.get(*i)
            .cloned()
            .ok_or_else(|| ProfError::Usage(format!("{opt} needs a value")))
    };
    let number = |text: OsString, opt: &str| -> Result<u64, ProfError> {
        let s = text.to_string_lossy();
        let parsed = match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        parsed.map_err(|_| ProfError::Usage(format!("{opt}: {s:?} is not a number")))
    };
    while i < args.len() {
        let Some(arg) = args[i].to_str() else { break };
        match arg {
            "-all" => mode = OpenMode::All,
            "-each" => mode = OpenMode::Each,
            "-one" => mode = OpenMode::One,
            "-stride" => stride = number(value(&mut i, arg)?, arg)?,
            "-e" => event.event = Some(value(&mut i, arg)?.to_string_lossy().into_owned()),
            "-period" => event.period = Some(number(value(&mut i, arg)?, arg)?),
            "-pm" => event.statistic = Some(value(&mut i, arg)?.to_string_lossy().into_owned()),
            "-k" => kernel = true,
            "-select" => select = true,
            "-o" => output = Some(PathBuf::from(value(&mut i, arg)?)),
            "--json" | "-json" => show.format = Format::Json,
            "--format" => show.format = value(&mut i, arg)?.to_string_lossy().parse()?,
            "--output" => show.to = Some(PathBuf::from(value(&mut i, arg)?)),
            "--device" => device = Some(PathBuf::from(value(&mut i, arg)?)),
            "--no-ptrace" => ptrace = false,
            "-f" | "--follow-exec" => follow = true,
            "--annotate" => {
                show.annotate = Some(value(&mut i, arg)?.to_string_lossy().into_owned());
            }
            "--report" => report = Some(PathBuf::from(value(&mut i, arg)?)),
            "-h" | "-help" | "--help" => return Ok(Invocation::Help),
            "-V" | "--version" => return Ok(Invocation::Version),
            "--" => {
                i += 1;
                break;
            }
            s if s.starts_with('-') => {
                return Err(ProfError::Usage(format!("unknown option {s}")));
            }
            _ => break,
        }
        i += 1;
    }
    let program: Vec<OsString> = args[i..].to_vec();
    if let Some(file) = report {
        if !program.is_empty() {
            return Err(ProfError::Usage(
                "--report FILE takes no program".to_string(),
            ));
        }
        return Ok(Invocation::Report { file, show });
    }
    if program.is_empty() {
        return Err(ProfError::Usage("no program to profile".to_string()));
    }
    if stride != 0 && !stride.is_power_of_two() {
        return Err(ProfError::Usage(format!(
            "-stride {stride}: must be 0 or a power of two"
        )));
    }
    if follow && kernel {
        return Err(ProfError::Usage(
            "-f follows user processes; -k profiles the kernel whoever runs".into(),
        ));
    }
    if show.annotate.is_some() && !matches!(show.format, Format::Text | Format::Json) {
        return Err(ProfError::Usage(
            "--annotate goes with the text or JSON report".into(),
        ));
    }
    if select && !kernel {
        return Err(ProfError::Usage(
            "-select only applies to -k (user profiling always follows PROGRAM alone)".into(),
        ));
    }
    Ok(Invocation::Profile(ProfileArgs {
        mode,
        stride,
        event,
        kernel,
        select,
        output,
        show,
        device,
        ptrace,
        follow,
        program,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn profile(words: &[&str]) -> ProfileArgs {
        match parse(&os(words)).unwrap() {
            Invocation::Profile(p) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_are_all_stride_4_and_the_models_default_event() {
        let p = profile(&["./prog", "-x", "y"]);
        assert_eq!(p.mode, OpenMode::All);
        assert_eq!(p.stride, 4);
        assert_eq!(p.event, EventRequest::default());
        assert_eq!(p.device, None);
        assert_eq!(p.program, os(&["./prog", "-x", "y"]));
        assert!(p.ptrace && !p.kernel && !p.follow && p.output.is_none());
        assert_eq!(p.show, Show::default());
    }

    #[test]
    fn options_stop_at_the_program() {
        let p = profile(&[
            "-each", "-stride", "0", "-e", "dcache", "-period", "256", "-pm", "retire", "-o", "f",
            "--json", "--device", "/d", "prog", "-each",
        ]);
        assert_eq!(p.mode, OpenMode::Each);
        assert_eq!(p.stride, 0);
        assert_eq!(
            p.event,
            EventRequest {
                event: Some("dcache".into()),
                period: Some(256),
                statistic: Some("retire".into()),
            }
        );
        assert_eq!(p.output, Some(PathBuf::from("f")));
        assert_eq!(p.device, Some(PathBuf::from("/d")));
        assert_eq!(p.program, os(&["prog", "-each"]));
        assert_eq!(profile(&["--", "-weird"]).program, os(&["-weird"]));
        let p = profile(&["-f", "--annotate", "hot", "sh", "-c", "./prog"]);
        assert!(p.follow);
        assert_eq!(p.show.annotate.as_deref(), Some("hot"));
        assert_eq!(p.program, os(&["sh", "-c", "./prog"]));
    }

    #[test]
    fn open_modes_by_name_round_trip() {
        for mode in [OpenMode::All, OpenMode::Each, OpenMode::One] {
            assert_eq!(open_mode_named(open_mode_name(mode)), Some(mode));
        }
        assert_eq!(open_mode_name(OpenMode::Each), "each");
        assert_eq!(open_mode_named("ALL"), None);
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        for words in [
            &["-stride", "3", "p"][..],
            &["-period", "many", "p"],
            &["-pm"],
            &["-stride"],
            &["-bogus", "p"],
            &[],
            &["-select", "p"],
            &["--report", "f", "p"],
            &["--format", "html", "p"],
            &["--output"],
            &["-f", "-k", "p"],
            &["--annotate", "f", "--format", "svg", "p"],
            &["--annotate"],
        ] {
            assert!(
                matches!(parse(&os(words)), Err(ProfError::Usage(_))),
                "{words:?}"
            );
        }
    }

    #[test]
    fn report_and_help() {
        assert_eq!(
            parse(&os(&["--report", "f", "--json"])).unwrap(),
            Invocation::Report {
                file: "f".into(),
                show: Show {
                    format: Format::Json,
                    to: None,
                    annotate: None,
                }
            }
        );
        assert_eq!(
            parse(&os(&[
                "--report", "f", "--format", "pprof", "--output", "p.pb"
            ]))
            .unwrap(),
            Invocation::Report {
                file: "f".into(),
                show: Show {
                    format: Format::Pprof,
                    to: Some("p.pb".into()),
                    annotate: None,
                }
            }
        );
        assert_eq!(parse(&os(&["-h"])).unwrap(), Invocation::Help);
        assert_eq!(parse(&os(&["--version"])).unwrap(), Invocation::Version);
        assert_eq!(version(), format!("pfmprof {}", env!("CARGO_PKG_VERSION")));
        assert!(synopsis().starts_with("usage: pfmprof") && !synopsis().contains("(4 bytes)"));
    }
}
