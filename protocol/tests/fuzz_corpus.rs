//! Replays the saved inputs of the binary wire-form fuzz targets (`push_body`, `txn_body`,
//! `pop_frames`, under fuzz/corpus/) through the same checks, so plain `cargo test` on stable
//! re-runs them; and checks that the seeds are saved and decode. docs/fuzzing.md lists them.

use std::path::PathBuf;

use bytes::Bytes;
use queenmq_protocol::binary::{fuzzing, pop_frames, push, txn};

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("the corpus directory exists") {
        let path = entry.expect("a corpus entry").path();
        check(&std::fs::read(&path).expect("a readable corpus file"));
        n += 1;
    }
    n
}

#[test]
fn push_body_corpus_replays() {
    assert!(replay("push_body", fuzzing::push_body) >= fuzzing::seeds_push().len());
}

#[test]
fn txn_body_corpus_replays() {
    assert!(replay("txn_body", fuzzing::txn_body_check) >= fuzzing::seeds_txn().len());
}

#[test]
fn pop_frames_corpus_replays() {
    assert!(replay("pop_frames", fuzzing::pop_frames_check) >= fuzzing::seeds_pop_frames().len());
}

#[test]
fn seeds_decode_as_what_they_are_for() {
    for s in fuzzing::seeds_push() {
        assert!(push::decode(&Bytes::from(s), fuzzing::LIMITS).is_ok());
    }
    for s in fuzzing::seeds_txn() {
        assert!(txn::decode(&Bytes::from(s), fuzzing::LIMITS).is_ok());
    }
    for s in fuzzing::seeds_pop_frames() {
        assert!(pop_frames::decode(&s).is_ok());
    }
}

/// Writes the seeds into `$QUEEN_FUZZ_SEEDS/<target>/seed-N`.
#[test]
#[ignore = "writes seed files for a fuzzing session; see docs/fuzzing.md"]
fn write_seeds() {
    let Some(out) = std::env::var_os("QUEEN_FUZZ_SEEDS") else {
        panic!("set QUEEN_FUZZ_SEEDS to the directory to write the seeds into");
    };
    for (target, seeds) in [
        ("push_body", fuzzing::seeds_push()),
        ("txn_body", fuzzing::seeds_txn()),
        ("pop_frames", fuzzing::seeds_pop_frames()),
    ] {
        let dir = PathBuf::from(&out).join(target);
        std::fs::create_dir_all(&dir).expect("create the seed dir");
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), s).expect("write a seed");
        }
    }
}
