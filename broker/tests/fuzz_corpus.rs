//! Replays every saved fuzz input (`fuzz/corpus/<target>/`) through the check its fuzz target
//! runs, so plain `cargo test` on stable re-runs what the fuzzer once found, regressions
//! included, without nightly or cargo-fuzz. docs/fuzzing.md describes the targets.

use queenmq_broker::fuzzing;
use queenmq_storage::fuzzing::replay_corpus;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn entry_corpus_replays() {
    replay_corpus(DIR, "entry", fuzzing::entry);
}

#[test]
fn state_corpus_replays() {
    replay_corpus(DIR, "state", fuzzing::state);
}

#[test]
fn frames_corpus_replays() {
    replay_corpus(DIR, "frames", fuzzing::frames);
}

/// Writes the seeds every corpus was grown from into `$QUEEN_FUZZ_SEEDS/<target>/seed-N`.
#[test]
#[ignore = "writes seed files for a fuzzing session; see docs/fuzzing.md"]
fn write_seeds() {
    let Some(out) = std::env::var_os("QUEEN_FUZZ_SEEDS") else {
        panic!("set QUEEN_FUZZ_SEEDS to the directory to write the seeds into");
    };
    let mut seeds = fuzzing::seeds();
    let app = seeds
        .iter()
        .rev()
        .find(|(t, _)| *t == "entry")
        .map(|(_, b)| b.clone())
        .unwrap_or_default();
    let records = queenmq_raft::fuzzing::seeds(&app);
    let payload = records.get(1).map_or(&[][..], |r| &r[16..]);
    seeds.extend(queenmq_storage::fuzzing::seeds(payload));
    seeds.extend(records.iter().map(|r| ("raft_entry", r.clone())));
    for (i, (target, bytes)) in seeds.iter().enumerate() {
        let dir = std::path::Path::new(&out).join(target);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let path = dir.join(format!("seed-{i}"));
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}
