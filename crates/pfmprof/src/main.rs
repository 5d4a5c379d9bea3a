//! pfmprof — uprofile/kprofile over /dev/pfcntr: run a program and report
//! where its time went, by function, on any Alpha model pfmd emulates. See
//! `pfmprof -h`, pfmprof(1) and the library's module docs.

use pfmprof::args::{self, Invocation};
use pfmprof::{ProfError, export, profile_file, run};
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PFMPROF_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let argv: Vec<_> = std::env::args_os().skip(1).collect();
    match go(&argv) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("pfmprof: {e}");
            match e {
                ProfError::Usage(_) => {
                    eprintln!(
                        "{}\nFor more information, try 'pfmprof --help'.",
                        args::synopsis()
                    );
                    ExitCode::from(args::EXIT_USAGE)
                }
                ProfError::Event(_) => ExitCode::from(args::EXIT_USAGE),
                _ => ExitCode::from(1),
            }
        }
    }
}

fn go(argv: &[std::ffi::OsString]) -> Result<i32, ProfError> {
    match args::parse(argv)? {
        Invocation::Help => {
            print!("{}", args::USAGE);
            Ok(0)
        }
        Invocation::Version => {
            println!("{}", args::version());
            Ok(0)
        }
        Invocation::Report { file, show } => {
            refuse_same_file(("--report", &file), ("--output", show.to.as_deref()))?;
            let report = profile_file::read(&file)?.report_annotating(show.annotate.as_deref());
            export::show(&report, &show)?;
            Ok(0)
        }
        Invocation::Profile(args) => {
            if let Some(profile) = &args.output {
                refuse_same_file(("-o", profile), ("--output", args.show.to.as_deref()))?;
            }
            if let Some(path) = &args.output {
                ProfError::check_output("-o", path)?;
            }
            if let Some(path) = &args.show.to {
                ProfError::check_output("--output", path)?;
            }
            let outcome = run::profile(&args)?;
            if let Some(path) = &args.output {
                profile_file::write(path, &outcome.profile)?;
            }
            if outcome.late_start {
                eprintln!(
                    "pfmprof: profiling began after exec (no ptrace): the first samples of the dynamic loader are not in the profile"
                );
            }
            let report = outcome
                .profile
                .report_annotating(args.show.annotate.as_deref());
            export::show(&report, &args.show)?;
            Ok(outcome.exit.status())
        }
    }
}

/// The report written over the profile it comes from would lose the
/// profile: two options naming one file are refused.
fn refuse_same_file(
    (kept, profile): (&str, &Path),
    (written, report): (&str, Option<&Path>),
) -> Result<(), ProfError> {
    let Some(report) = report else {
        return Ok(());
    };
    use std::os::unix::fs::MetadataExt;
    let same = match (std::fs::metadata(profile), std::fs::metadata(report)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => profile == report,
    };
    if same {
        return Err(ProfError::Usage(format!(
            "{kept} and {written} name the same file ({}): the report would replace the profile",
            profile.display()
        )));
    }
    Ok(())
}
