//! Replays the saved inputs of the `kafka_request` fuzz target (fuzz/corpus/kafka_request/)
//! through the same check, so plain `cargo test` on stable re-runs them; and checks that the
//! seeds decode as what they claim to be. docs/fuzzing.md describes the target.

use std::path::PathBuf;

use queenmq_kafka_port::fuzzing;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/kafka_request")
}

#[test]
fn kafka_request_corpus_replays() {
    let mut n = 0;
    for entry in std::fs::read_dir(corpus()).expect("the corpus directory exists") {
        let path = entry.expect("a corpus entry").path();
        let data = std::fs::read(&path).expect("a readable corpus file");
        fuzzing::request(&data);
        n += 1;
    }
    assert!(
        n >= fuzzing::seeds().len(),
        "the seeds are saved in the corpus"
    );
}

#[test]
fn seeds_reach_the_decoders_they_are_for() {
    use bytes::Bytes;
    use queenmq_kafka_port::{header, produce};
    let seeds = fuzzing::seeds();
    let produces = seeds
        .iter()
        .filter_map(|s| header::decode(Bytes::copy_from_slice(s)).ok())
        .filter(|(h, _)| h.api_key == 0)
        .filter_map(|(_, r)| r.and_then(|mut r| produce::decode(&mut r).ok()))
        .count();
    assert_eq!(produces, 2, "both produce seeds decode");
}

/// Writes the seeds into `$QUEEN_FUZZ_SEEDS/kafka_request/seed-N`.
#[test]
#[ignore = "writes seed files for a fuzzing session; see docs/fuzzing.md"]
fn write_seeds() {
    let Some(out) = std::env::var_os("QUEEN_FUZZ_SEEDS") else {
        panic!("set QUEEN_FUZZ_SEEDS to the directory to write the seeds into");
    };
    let dir = PathBuf::from(out).join("kafka_request");
    std::fs::create_dir_all(&dir).expect("create the seed dir");
    for (i, s) in fuzzing::seeds().iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i}")), s).expect("write a seed");
    }
}
