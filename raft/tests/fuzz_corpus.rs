//! Replays every saved fuzz input (`fuzz/corpus/raft_entry/`) through the check the fuzz target
//! runs, so plain `cargo test` on stable re-runs what the fuzzer once found, regressions
//! included, without nightly or cargo-fuzz. docs/fuzzing.md describes the target.

use queenmq_storage::fuzzing::replay_corpus;

#[test]
fn raft_entry_corpus_replays() {
    replay_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "raft_entry",
        queenmq_raft::fuzzing::raft_entry,
    );
}
