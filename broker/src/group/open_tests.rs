//! Which checkpoint generation a start loads: the newest usable one, the older one when the
//! newest does not verify or decode (the log is never reclaimed past what the older needs),
//! a rebuild from a whole log when none is usable, and a refusal when the log's start is gone.

use std::path::Path;
use std::sync::Arc;

use queenmq_storage::{Checkpoint, LogOptions, MemBackend, SegmentLog, StateStore, StorageError};

use super::open::load_state;
use crate::state::{encode_state, State};

/// A log holding records `first..=last`, as after reclamation deleted the ones before.
fn log_from(first: u64, last: u64) -> SegmentLog {
    let (log, _) =
        SegmentLog::open_with_backend(Arc::new(MemBackend::new()), LogOptions::default()).unwrap();
    for i in first..=last {
        log.append(i, 1, b"entry").unwrap();
    }
    log
}

fn checkpoint(index: u64, state: Vec<u8>) -> Checkpoint {
    Checkpoint {
        applied_index: index,
        applied_term: 1,
        state,
    }
}

/// A store holding two generations: applied 5 (older) and 9 (newest).
fn two_generations(dir: &Path) -> StateStore {
    let store = StateStore::open(&dir.join("state.redb")).unwrap();
    let blob = encode_state(&State::default());
    store.save_checkpoint(&checkpoint(5, blob.clone())).unwrap();
    store.save_checkpoint(&checkpoint(9, blob)).unwrap();
    store
}

#[test]
fn a_newest_checkpoint_failing_its_checksum_falls_back_to_the_older_one_after_reclamation() {
    let dir = tempfile::tempdir().unwrap();
    let store = two_generations(dir.path());
    let mut gens = store.load_generations().unwrap();
    assert_eq!(gens[0].applied_index, Some(9));
    // What a flipped byte gives (storage's own test flips one in the file).
    gens[0].checkpoint = Err(StorageError::CorruptCheckpoint {
        reason: "crc32c 0x1 does not match the stored 0x2".into(),
    });
    // Reclamation deleted records 1..=5, the most the older generation lets go.
    let log = log_from(6, 20);
    let st = load_state(Ok(gens), &store, &log, Path::new("log"), false, None).unwrap();
    assert_eq!(
        st.applied,
        Some((5, 1)),
        "the older generation, replayed from 6"
    );
    // The next save goes over the damaged newest, never over the one loaded.
    store
        .save_checkpoint(&checkpoint(12, encode_state(&State::default())))
        .unwrap();
    let gens = store.load_generations().unwrap();
    let kept: Vec<_> = gens.iter().map(|g| g.applied_index).collect();
    assert_eq!(kept, [Some(12), Some(5)]);
    assert!(gens.iter().all(|g| g.checkpoint.is_ok()));
}

#[test]
fn a_checkpoint_this_build_does_not_decode_over_a_whole_log_is_rebuilt_not_refused() {
    // An upgrade: the data directory of an older build, whose log was never reclaimed.
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&dir.path().join("state.redb")).unwrap();
    store
        .save_checkpoint(&checkpoint(9, b"not a state this build decodes".to_vec()))
        .unwrap();
    let log = log_from(1, 20);
    let gens = store.load_generations();
    let st = load_state(gens, &store, &log, Path::new("log"), false, None).unwrap();
    assert_eq!(st.applied, None, "rebuilt from the whole log");
}

#[test]
fn a_newest_checkpoint_that_does_not_decode_falls_back_and_none_usable_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&dir.path().join("state.redb")).unwrap();
    let blob = encode_state(&State::default());
    store.save_checkpoint(&checkpoint(5, blob)).unwrap();
    store
        .save_checkpoint(&checkpoint(9, b"garbage".to_vec()))
        .unwrap();
    let log = log_from(6, 20);
    let st = load_state(
        store.load_generations(),
        &store,
        &log,
        Path::new("log"),
        false,
        None,
    )
    .unwrap();
    assert_eq!(st.applied, Some((5, 1)));

    let mut gens = store.load_generations().unwrap();
    gens.truncate(1);
    let Err(err) = load_state(Ok(gens), &store, &log, Path::new("log"), false, None) else {
        panic!("no usable checkpoint and the log's start is gone: a refusal");
    };
    assert!(err.to_string().contains("no checkpoint"), "{err}");
}

/// Review s29 snap H2: a snapshot whose state names no log record carries none, so its install
/// leaves an empty log starting past A. The checkpoint and the Raft horizon cover every
/// acknowledged index: the open goes on from the checkpoint instead of refusing for ever.
#[test]
fn an_install_that_carried_no_records_opens_on_its_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&dir.path().join(super::open::STATE_FILE)).unwrap();
    store
        .save_checkpoint(&checkpoint(9, encode_state(&State::default())))
        .unwrap();
    // What the install's commit writes: the horizon at A = 9.
    queenmq_raft::accept_missing_log_start(&store, 10, 1).unwrap();
    drop(store);
    let cfg = with_empty_log(dir.path());
    let opened = match super::open::open_storage(&cfg, None, 1 << 20) {
        Ok(o) => o,
        Err(e) => panic!("the installed directory was refused: {e:#}"),
    };
    assert_eq!(opened.state.applied, Some((9, 1)));
}

/// The same empty log under a checkpoint that does not reach the horizon is still refused:
/// the records between them were acknowledged and are gone.
#[test]
fn an_empty_log_below_the_acknowledged_index_is_still_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&dir.path().join(super::open::STATE_FILE)).unwrap();
    store
        .save_checkpoint(&checkpoint(9, encode_state(&State::default())))
        .unwrap();
    drop(store);
    let cfg = with_empty_log(dir.path());
    let refused = super::open::open_storage(&cfg, None, 1 << 20);
    assert!(refused.is_err(), "no horizon: the log must hold index 9");
}

/// A configuration on `dir`, whose `log/` is created empty.
fn with_empty_log(dir: &Path) -> crate::config::Config {
    std::fs::create_dir(dir.join("log")).unwrap();
    crate::config::Config {
        data_dir: dir.to_path_buf(),
        ..crate::config::Config::default()
    }
}

/// Session 35: a start reads the headers first and the states newest first, the older one
/// only when the newer fails; what it loads is what reading both gave.
#[test]
fn a_start_reads_the_newest_state_and_falls_back_to_the_older_only_when_it_fails() {
    let dir = tempfile::tempdir().unwrap();
    let store = two_generations(dir.path());
    let heads = store.generation_heads().unwrap();
    let order: Vec<_> = heads.iter().map(|h| h.applied_index).collect();
    assert_eq!(order, [Some(9), Some(5)]);
    assert!(heads.iter().all(|h| h.current_version));
    let blob_len = encode_state(&State::default()).len() as u64;
    assert!(heads.iter().all(|h| h.state_len == Some(blob_len)));
    assert_eq!(super::open::chosen_index(&store), (Some(9), vec![]));

    // The newest does not decode: the older one is read and loaded, the reason kept.
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&dir.path().join("state.redb")).unwrap();
    store
        .save_checkpoint(&checkpoint(5, encode_state(&State::default())))
        .unwrap();
    store
        .save_checkpoint(&checkpoint(9, b"garbage".to_vec()))
        .unwrap();
    let (index, passed) = super::open::chosen_index(&store);
    assert_eq!(index, Some(5));
    assert_eq!(passed.len(), 1, "{passed:?}");
    assert!(passed[0].contains("index 9"), "{passed:?}");

    // Neither decodes: nothing is chosen and both reasons are given.
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&dir.path().join("state.redb")).unwrap();
    store
        .save_checkpoint(&checkpoint(5, b"junk".to_vec()))
        .unwrap();
    store
        .save_checkpoint(&checkpoint(9, b"garbage".to_vec()))
        .unwrap();
    let (index, passed) = super::open::chosen_index(&store);
    assert_eq!(index, None);
    assert_eq!(passed.len(), 2, "{passed:?}");
}
