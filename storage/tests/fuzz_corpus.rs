//! Replays every saved fuzz input (`fuzz/corpus/<target>/`) through the check its fuzz target
//! runs, so plain `cargo test` on stable re-runs what the fuzzer once found, regressions
//! included, without nightly or cargo-fuzz. docs/fuzzing.md describes the targets.

use queenmq_storage::fuzzing::{self, replay_corpus};

const DIR: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn checkpoint_head_corpus_replays() {
    replay_corpus(DIR, "checkpoint_head", fuzzing::checkpoint_head);
}

#[test]
fn segment_record_corpus_replays() {
    replay_corpus(DIR, "segment_record", fuzzing::segment_record);
}

#[test]
fn segment_log_corpus_replays() {
    replay_corpus(DIR, "segment_log", fuzzing::segment_log);
}

#[test]
fn id_file_corpus_replays() {
    replay_corpus(DIR, "id_file", fuzzing::id_file);
}

#[test]
fn snapshot_stream_corpus_replays() {
    replay_corpus(DIR, "snapshot_stream", fuzzing::snapshot_stream);
}
