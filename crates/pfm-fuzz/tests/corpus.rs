//! Every input of the kept corpus (`corpus/<model>/`) still runs clean on
//! its model: what the fuzzer once reached stays covered by `cargo test`,
//! instrumented or not.

use pfm_abi::Implementation;
use pfm_fuzz::engine;
use std::path::Path;

#[test]
fn the_corpus_replays_without_findings() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut ran = 0;
    for model in Implementation::ALL {
        let inputs = engine::load(&engine::corpus_dir(&root, model)).unwrap();
        assert!(
            !inputs.is_empty(),
            "no corpus for {model} in {}",
            root.display()
        );
        for input in &inputs {
            if let Err(finding) = engine::run_one(model, input) {
                panic!("{model}: {} (input {})", finding.0, engine::name_of(input));
            }
        }
        ran += inputs.len();
    }
    println!("replayed {ran} corpus inputs");
}
