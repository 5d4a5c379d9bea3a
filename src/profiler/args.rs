//! The `pfmprof` command line, Tru64 style (`-all`, `-stride 4`, ...): options
//! end at the first word that is not one, which is the program to run.

use super::ProfError;
use crate::ev4::EVENTS;
use std::ffi::OsString;
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: pfmprof [-all|-each|-one] [-stride N] [-e EVENT] [-period N] [-k] [-select]
               [-o FILE] [--json] [--device PATH] [--no-ptrace] PROGRAM [ARGS...]
       pfmprof --report FILE [--json]

  -all, -each, -one  open mode (default -all); -one binds pfmprof and PROGRAM
                     to the CPU pfmprof is running on
  -stride N          instructions (4 bytes) per bucket: 0 or a power of two (default 4)
  -e EVENT           EV4 event, e.g. PF_CYCLES (default), PF_ISSUES, PF_DCACHE
  -period N          events per interrupt: 4096 or 65536 for counter 0 events
                     (default 4096), 256 or 4096 for counter 1 events (default 4096)
  -k                 kprofile: profile kernel text (_stext.._etext) system-wide
                     until PROGRAM exits or SIGINT (needs root or CAP_PERFMON)
  -select            with -k: only kernel time of PROGRAM and its children
  -o FILE            also write the raw buckets and header; --report FILE prints
                     the same report again
  --json             the report as JSON
  --device PATH      the device (default $PFM_DEVICE, else /dev/pfcntr)
  --no-ptrace        learn PROGRAM's load address without stopping it at exec
                     (samples before the range is set are lost)
";

/// Open mode of the device (contract §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    All,
    Each,
    One,
}

impl OpenMode {
    pub fn name(self) -> &'static str {
        match self {
            OpenMode::All => "all",
            OpenMode::Each => "each",
            OpenMode::One => "one",
        }
    }
    pub fn parse(text: &str) -> Option<OpenMode> {
        match text {
            "all" => Some(OpenMode::All),
            "each" => Some(OpenMode::Each),
            "one" => Some(OpenMode::One),
            _ => None,
        }
    }
}

/// The EV4 event a profile samples: its counter, mux code and period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventChoice {
    pub name: &'static str,
    pub counter: usize,
    pub code: u64,
    pub period: u64,
}

impl EventChoice {
    /// `PF_CYCLES`, `cycles`, `pf_dcache` (any case, `PF_` optional).
    pub fn parse(text: &str, period: Option<u64>) -> Result<EventChoice, ProfError> {
        let wanted = text.to_ascii_uppercase();
        let wanted = if wanted.starts_with("PF_") {
            wanted
        } else {
            format!("PF_{wanted}")
        };
        let event = EVENTS
            .iter()
            .flat_map(|table| table.iter())
            .find(|e| e.name == wanted)
            .ok_or_else(|| {
                let names: Vec<&str> = EVENTS
                    .iter()
                    .flat_map(|t| t.iter())
                    .map(|e| e.name)
                    .collect();
                ProfError::Usage(format!(
                    "unknown EV4 event {text:?}; one of {}",
                    names.join(", ")
                ))
            })?;
        let counter = event.counter as usize;
        let allowed: &[u64] = if counter == 0 {
            &[4096, 65536]
        } else {
            &[256, 4096]
        };
        let period = period.unwrap_or(4096);
        if !allowed.contains(&period) {
            return Err(ProfError::Usage(format!(
                "{}: counter {counter} interrupts every {} events, not {period}",
                event.name,
                allowed
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" or ")
            )));
        }
        Ok(EventChoice {
            name: event.name,
            counter,
            code: event.code,
            period,
        })
    }

    /// The ICCSR image selecting this event with the other counter off.
    pub fn iccsr(&self) -> crate::ioctl::abi::Iccsr {
        use crate::ev4::{PF_C0_INT_EVERY_4096, PF_C0_INT_EVERY_65536};
        use crate::ev4::{PF_C1_INT_EVERY_256, PF_C1_INT_EVERY_4096};
        const PF_CYCLES: u64 = 0xa;
        if self.counter == 0 {
            let pc0 = if self.period == 4096 {
                PF_C0_INT_EVERY_4096
            } else {
                PF_C0_INT_EVERY_65536
            };
            crate::ioctl::abi::Iccsr::new(self.code, 0, pc0, 0, 2)
        } else {
            let pc1 = if self.period == 256 {
                PF_C1_INT_EVERY_256
            } else {
                PF_C1_INT_EVERY_4096
            };
            // Counter 0 is disabled; its mux code must still be a valid one.
            crate::ioctl::abi::Iccsr::new(PF_CYCLES, self.code, 0, pc1, 1)
        }
    }
}

/// What to profile and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileArgs {
    pub mode: OpenMode,
    pub stride: u64,
    pub event: EventChoice,
    pub kernel: bool,
    /// `-k` restricted to PROGRAM's tree (PCNTLOGSELECT) instead of LOGALL.
    pub select: bool,
    pub output: Option<PathBuf>,
    pub json: bool,
    pub device: PathBuf,
    pub ptrace: bool,
    pub program: Vec<OsString>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    Profile(ProfileArgs),
    Report { file: PathBuf, json: bool },
    Help,
}

/// Parses the arguments after the program name. `env_device` is `$PFM_DEVICE`.
pub fn parse(args: &[OsString], env_device: Option<OsString>) -> Result<Invocation, ProfError> {
    let mut mode = OpenMode::All;
    let mut stride = 4;
    let mut event_name = "PF_CYCLES".to_string();
    let mut period = None;
    let mut kernel = false;
    let mut select = false;
    let mut output = None;
    let mut json = false;
    let mut device = None;
    let mut ptrace = true;
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
            "-e" => event_name = value(&mut i, arg)?.to_string_lossy().into_owned(),
            "-period" => period = Some(number(value(&mut i, arg)?, arg)?),
            "-k" => kernel = true,
            "-select" => select = true,
            "-o" => output = Some(PathBuf::from(value(&mut i, arg)?)),
            "--json" | "-json" => json = true,
            "--device" => device = Some(PathBuf::from(value(&mut i, arg)?)),
            "--no-ptrace" => ptrace = false,
            "--report" => report = Some(PathBuf::from(value(&mut i, arg)?)),
            "-h" | "-help" | "--help" => return Ok(Invocation::Help),
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
        return Ok(Invocation::Report { file, json });
    }
    if program.is_empty() {
        return Err(ProfError::Usage("no program to profile".to_string()));
    }
    if stride != 0 && !stride.is_power_of_two() {
        return Err(ProfError::Usage(format!(
            "-stride {stride}: must be 0 or a power of two"
        )));
    }
    if select && !kernel {
        return Err(ProfError::Usage(
            "-select only applies to -k (user profiling always follows PROGRAM alone)".into(),
        ));
    }
    let event = EventChoice::parse(&event_name, period)?;
    let device = device
        .or_else(|| env_device.filter(|d| !d.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/dev/pfcntr"));
    Ok(Invocation::Profile(ProfileArgs {
        mode,
        stride,
        event,
        kernel,
        select,
        output,
        json,
        device,
        ptrace,
        program,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn profile(words: &[&str]) -> ProfileArgs {
        match parse(&os(words), None).unwrap() {
            Invocation::Profile(p) => p,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults_are_all_stride_4_cycles_every_4096() {
        let p = profile(&["./prog", "-x", "y"]);
        assert_eq!(p.mode, OpenMode::All);
        assert_eq!(p.stride, 4);
        assert_eq!(p.event.name, "PF_CYCLES");
        assert_eq!(
            (p.event.counter, p.event.code, p.event.period),
            (0, 0xa, 4096)
        );
        assert_eq!(p.device, PathBuf::from("/dev/pfcntr"));
        assert_eq!(p.program, os(&["./prog", "-x", "y"]));
        assert!(p.ptrace && !p.kernel && !p.json && p.output.is_none());
        let iccsr = p.event.iccsr();
        assert_eq!((iccsr.mux0(), iccsr.pc0(), iccsr.disable()), (0xa, 1, 2));
    }

    #[test]
    fn options_stop_at_the_program() {
        let p = profile(&[
            "-each", "-stride", "0", "-e", "dcache", "-period", "256", "-o", "f", "--json",
            "--device", "/d", "prog", "-each",
        ]);
        assert_eq!(p.mode, OpenMode::Each);
        assert_eq!(p.stride, 0);
        assert_eq!(
            (p.event.name, p.event.counter, p.event.period),
            ("PF_DCACHE", 1, 256)
        );
        let iccsr = p.event.iccsr();
        assert_eq!((iccsr.mux1(), iccsr.pc1(), iccsr.disable()), (0, 1, 1));
        assert_eq!(p.output, Some(PathBuf::from("f")));
        assert_eq!(p.device, PathBuf::from("/d"));
        assert_eq!(p.program, os(&["prog", "-each"]));
        assert_eq!(profile(&["--", "-weird"]).program, os(&["-weird"]));
    }

    #[test]
    fn device_comes_from_the_environment_unless_given() {
        let from_env = parse(&os(&["p"]), Some("/env/dev".into())).unwrap();
        assert!(matches!(from_env, Invocation::Profile(p) if p.device == Path::new("/env/dev")));
        let given = parse(&os(&["--device", "/x", "p"]), Some("/env/dev".into())).unwrap();
        assert!(matches!(given, Invocation::Profile(p) if p.device == Path::new("/x")));
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        for words in [
            &["-stride", "3", "p"][..],
            &["-e", "PF_NOSUCH", "p"],
            &["-period", "256", "p"],
            &["-e", "PF_DCACHE", "-period", "65536", "p"],
            &["-stride"],
            &["-bogus", "p"],
            &[],
            &["-select", "p"],
            &["--report", "f", "p"],
        ] {
            assert!(
                matches!(parse(&os(words), None), Err(ProfError::Usage(_))),
                "{words:?}"
            );
        }
    }

    #[test]
    fn report_and_help() {
        assert_eq!(
            parse(&os(&["--report", "f", "--json"]), None).unwrap(),
            Invocation::Report {
                file: "f".into(),
                json: true
            }
        );
        assert_eq!(parse(&os(&["-h"]), None).unwrap(), Invocation::Help);
    }
}
