//! `pfm-fuzz`: coverage-guided fuzzing of the device and the request path,
//! per model. Build it with coverage counters (`scripts/fuzz` does);
//! without them it runs unguided and says so.

use clap::Parser;
use pfm_abi::Implementation;
use pfm_fuzz::coverage::Coverage;
use pfm_fuzz::engine::{self, MAX_INPUT};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Fuzzes pfmd's request decoding, ioctl argument path and device state
/// machine (over the mock backend) for each model; exits 1 on a finding,
/// saving the input that shows it.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Inputs to run per model.
    #[arg(long, default_value_t = 1_000_000)]
    inputs: u64,
    /// Models to fuzz (default: all).
    #[arg(long, value_delimiter = ',')]
    model: Vec<Implementation>,
    /// The corpus: one directory per model; seeds are read from it.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/corpus"))]
    corpus: PathBuf,
    /// Also write the inputs that reached new coverage into the corpus.
    #[arg(long)]
    save: bool,
    /// Where a finding's input goes.
    #[arg(long, default_value = "target/fuzz-findings")]
    findings: PathBuf,
    /// Random seed (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Run one input file on each model and report (reproduce a finding).
    #[arg(long)]
    replay: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let models = if args.model.is_empty() {
        Implementation::ALL.to_vec()
    } else {
        args.model.clone()
    };
    std::panic::set_hook(Box::new(|_| {}));
    if let Some(path) = &args.replay {
        return replay(path, &models);
    }
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    if !Coverage::new().available() {
        eprintln!(
            "pfm-fuzz: built without coverage counters: the run is unguided (build it with scripts/fuzz)"
        );
    }
    println!(
        "pfm-fuzz: seed {seed}, {} inputs per model, inputs up to {MAX_INPUT} bytes",
        args.inputs
    );
    let mut rng = fastrand::Rng::with_seed(seed);
    for model in models {
        let dir = engine::corpus_dir(&args.corpus, model);
        let seeds = match engine::load(&dir) {
            Ok(seeds) => seeds,
            Err(e) => {
                eprintln!("pfm-fuzz: reading {}: {e}", dir.display());
                return ExitCode::FAILURE;
            }
        };
        let started = Instant::now();
        // Each model's coverage on its own: what its inputs reach.
        let mut coverage = Coverage::new();
        match engine::fuzz(model, &seeds, args.inputs, &mut rng, &mut coverage) {
            Ok(report) => {
                let secs = started.elapsed().as_secs_f64();
                let (total, reached) = report.edges;
                println!(
                    "pfm-fuzz {model}: {} inputs in {secs:.1} s ({:.0}/s), {} seeds, corpus {} (+{}), edges {reached}/{total} of the instrumented code, 0 findings",
                    report.inputs,
                    report.inputs as f64 / secs.max(1e-9),
                    seeds.len(),
                    report.corpus,
                    report.new_inputs.len(),
                );
                if args.save {
                    let kept = engine::distill(model, seeds.iter().chain(&report.new_inputs));
                    if let Err(e) = save(&dir, &kept) {
                        eprintln!("pfm-fuzz: saving to {}: {e}", dir.display());
                        return ExitCode::FAILURE;
                    }
                }
            }
            Err(failure) => {
                let _ = std::fs::create_dir_all(&args.findings);
                let path = args
                    .findings
                    .join(format!("{model}-{}", engine::name_of(&failure.input)));
                let _ = std::fs::write(&path, &failure.input);
                println!(
                    "pfm-fuzz {model}: FINDING: {}\n  input saved to {} (reproduce: pfm-fuzz --model {model} --replay {})",
                    failure.finding.0,
                    path.display(),
                    path.display()
                );
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Replaces the corpus in `dir` with `inputs`.
fn save(dir: &std::path::Path, inputs: &[Vec<u8>]) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    println!("  corpus: {} inputs in {}", inputs.len(), dir.display());
    for input in inputs {
        std::fs::write(dir.join(engine::name_of(input)), input)?;
    }
    Ok(())
}

fn replay(path: &std::path::Path, models: &[Implementation]) -> ExitCode {
    let input = match std::fs::read(path) {
        Ok(input) => input,
        Err(e) => {
            eprintln!("pfm-fuzz: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for &model in models {
        match engine::run_one(model, &input) {
            Ok(()) => println!("{model}: ok"),
            Err(finding) => {
                println!("{model}: FINDING: {}", finding.0);
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
