//! The fuzzing loop: pick an input of the corpus, mutate it, run it; keep
//! what reaches new coverage, stop at the first [`Finding`] or panic.

use crate::coverage::Coverage;
use crate::target::{self, Finding};
use pfm_abi::Implementation;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

/// The longest input the mutator makes.
pub const MAX_INPUT: usize = 1024;

/// What one model's run did.
#[derive(Debug, Default)]
pub struct Report {
    pub inputs: u64,
    pub corpus: usize,
    pub new_inputs: Vec<Vec<u8>>,
    pub edges: (usize, usize),
}

/// A finding and the input that shows it.
#[derive(Debug)]
pub struct Failure {
    pub finding: Finding,
    pub input: Vec<u8>,
}

/// Runs `input` on `model`, a panic anywhere being a finding too.
pub fn run_one(model: Implementation, input: &[u8]) -> Result<(), Finding> {
    match catch_unwind(AssertUnwindSafe(|| target::run(model, input))) {
        Ok(result) => result,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(Finding(format!("panic: {why}")))
        }
    }
}

/// Fuzzes `model` for `inputs` runs, starting from `seeds`.
pub fn fuzz(
    model: Implementation,
    seeds: &[Vec<u8>],
    inputs: u64,
    rng: &mut fastrand::Rng,
    coverage: &mut Coverage,
) -> Result<Report, Failure> {
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    let mut report = Report::default();
    let keep = |input: Vec<u8>, corpus: &mut Vec<Vec<u8>>, report: &mut Report, seed: bool| {
        if !seed {
            report.new_inputs.push(input.clone());
        }
        corpus.push(input);
    };
    crate::coverage::reset();
    for seed in seeds {
        report.inputs += 1;
        run_one(model, seed).map_err(|finding| Failure {
            finding,
            input: seed.clone(),
        })?;
        if coverage.take_new() || !coverage.available() {
            keep(seed.clone(), &mut corpus, &mut report, true);
        }
    }
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    while report.inputs < inputs {
        let parent = &corpus[rng.usize(..corpus.len())];
        let other = &corpus[rng.usize(..corpus.len())];
        let input = mutate(parent, other, rng);
        report.inputs += 1;
        run_one(model, &input).map_err(|finding| Failure {
            finding,
            input: input.clone(),
        })?;
        if coverage.take_new() {
            keep(input, &mut corpus, &mut report, false);
        }
    }
    report.corpus = corpus.len();
    report.edges = coverage.edges();
    Ok(report)
}

/// One to four of AFL's havoc steps on a copy of `parent`.
fn mutate(parent: &[u8], other: &[u8], rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut out = parent.to_vec();
    for _ in 0..rng.usize(1..=4) {
        let len = out.len();
        match rng.u8(0..9) {
            0 if len > 0 => {
                let i = rng.usize(..len);
                out[i] ^= 1 << rng.u8(0..8);
            }
            1 if len > 0 => {
                let i = rng.usize(..len);
                out[i] = rng.u8(..);
            }
            2 if len > 0 => {
                const INTERESTING: [u8; 8] = [0, 1, 0x7f, 0x80, 0xff, 16, 32, 64];
                let i = rng.usize(..len);
                out[i] = INTERESTING[rng.usize(..INTERESTING.len())];
            }
            3 if len > 1 => {
                let start = rng.usize(..len);
                let end = rng.usize(start..=len.min(start + 16));
                out.drain(start..end);
            }
            4 if len > 0 => {
                // Repeat a piece: a run of the same operation.
                let start = rng.usize(..len);
                let end = rng.usize(start..=len.min(start + 32));
                let piece = out[start..end].to_vec();
                let at = rng.usize(..=out.len());
                out.splice(at..at, piece);
            }
            5 if !other.is_empty() => {
                // Splice another input's tail on.
                let cut = rng.usize(..=out.len());
                let from = rng.usize(..other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            6 if len >= 8 => {
                let i = rng.usize(..=len - 8);
                let value = rng.u64(..).to_ne_bytes();
                out[i..i + 8].copy_from_slice(&value);
            }
            _ => {
                let at = rng.usize(..=out.len());
                let bytes: Vec<u8> = (0..rng.usize(1..=16)).map(|_| rng.u8(..)).collect();
                out.splice(at..at, bytes);
            }
        }
    }
    out.truncate(MAX_INPUT);
    out
}

/// Few of `inputs` that reach every edge all of them reach: the shortest
/// first, each kept only if it reaches a new edge.
pub fn distill<'a>(
    model: Implementation,
    inputs: impl Iterator<Item = &'a Vec<u8>>,
) -> Vec<Vec<u8>> {
    let mut sorted: Vec<&Vec<u8>> = inputs.collect();
    sorted.sort_by_key(|input| (input.len(), input.to_vec()));
    sorted.dedup();
    let mut coverage = Coverage::new();
    let mut kept = Vec::new();
    for input in sorted {
        if run_one(model, input).is_ok() && coverage.take_new_edges() {
            kept.push(input.clone());
        }
    }
    kept
}

/// The corpus directory of `model` under `root`.
pub fn corpus_dir(root: &std::path::Path, model: Implementation) -> PathBuf {
    root.join(model.to_string())
}

/// Every file of `dir`, sorted by name.
pub fn load(dir: &std::path::Path) -> std::io::Result<Vec<Vec<u8>>> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    paths.sort();
    paths.iter().map(std::fs::read).collect()
}

/// A name for `input` that stays the same for the same bytes (FNV-1a).
pub fn name_of(input: &[u8]) -> String {
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}
