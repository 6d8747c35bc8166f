//! The install (stage: steps 2-3; the reopen's finish: steps 4-5) and the start-up that
//! finishes or discards it, against crash images taken after every durable step
//! (docs/storage-format.md "A crash, or a file that no longer verifies").

use std::io::Read;

use redb::ReadableTable;
use std::sync::Arc;

use crate::log::tests::{assert_records, fill, small};
use crate::{
    finish_interrupted_install, stage_install, IoBackend, MemBackend, SegmentLog, SnapshotReceiver,
    SnapshotSource, StateStore, StorageError, INSTALLING_KEY, LOG_DIR, LOG_INCOMING, LOG_OLD,
    SNAPSHOT_HEADER_LEN, SNAPSHOT_INCOMING,
};

const PURGED: &str = "raft/purged";

fn new_state() -> Vec<u8> {
    (0..3000u32).map(|i| (i * 7) as u8).collect()
}

/// The leader's stream: records 1..=60 in term 2, a checkpoint at 50 with run floor 20.
fn leader_stream() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(StateStore::open(&dir.path().join("state.redb")).unwrap());
    let log = SegmentLog::open_with_backend(Arc::new(MemBackend::new()), small())
        .unwrap()
        .0;
    fill(&log, 1, 60, 2);
    let state = new_state();
    store
        .save_checkpoint_with_floor(50, 2, 20, |sink| sink.write(&state))
        .unwrap();
    let mut src = SnapshotSource::open(&store, &log, 50).unwrap();
    let mut bytes = Vec::new();
    src.read_to_end(&mut bytes).unwrap();
    bytes
}

struct Follower {
    data: MemBackend,
    store: StateStore,
    log: SegmentLog,
}

/// A follower whose log holds `1..=last` in `term`, with a checkpoint at 10, and the leader's
/// stream received whole into `snapshot-incoming`.
fn follower(last: u64, term: u64) -> Follower {
    follower_from(1, last, term)
}

/// [`follower`] with a log that starts at `first`.
fn follower_from(first: u64, last: u64, term: u64) -> Follower {
    let data = MemBackend::new();
    let log_dir = data.mkdir(LOG_DIR).unwrap();
    data.sync_dir().unwrap();
    let log = SegmentLog::open_with_backend(Arc::new(log_dir), small())
        .unwrap()
        .0;
    fill(&log, first, last, term);
    log.sync().unwrap();
    let store = StateStore::open_in(&data, "state.redb").unwrap();
    store
        .save_checkpoint_with_floor(10, term, 1, |sink| sink.write(b"old state"))
        .unwrap();
    receive(&data);
    Follower { data, store, log }
}

/// The leader's stream, received whole into `snapshot-incoming` of `data`.
fn receive(data: &MemBackend) {
    let files: Arc<dyn IoBackend> = Arc::new(data.clone());
    let mut rx = SnapshotReceiver::create(files, 1024, Box::new(|_| Ok(()))).unwrap();
    let stream = leader_stream();
    for (i, chunk) in stream.chunks(1000).enumerate() {
        rx.write_at(i as u64 * 1000, chunk).unwrap();
    }
    rx.finish().unwrap();
}

fn stage(f: &Follower) -> Result<crate::Installed, StorageError> {
    stage_install(
        &f.data,
        &f.store,
        &f.log,
        small(),
        &[
            (PURGED, b"(2, 50)"),
            (crate::MEMBERSHIP_KEY, b"the leader's"),
        ],
        (50, 2),
    )
}

/// The reopen that follows a stage: the log closed first, then the start-up step.
fn reopen(f: Follower) -> (MemBackend, StateStore) {
    let Follower { data, store, log } = f;
    drop(log);
    finish_interrupted_install(&data, &store).unwrap();
    (data, store)
}

/// What a node finds on `image` after the start-up step: "old" or "new", never a mix, and
/// nothing of an install left behind.
fn restart(image: &MemBackend, old_last: u64, old_term: u64, kept_log: bool) -> &'static str {
    let store = StateStore::open_in(image, "state.redb").unwrap();
    finish_interrupted_install(image, &store).unwrap();
    assert_eq!(store.get_meta(INSTALLING_KEY).unwrap(), None);
    for gone in [LOG_INCOMING, LOG_OLD] {
        assert!(image.dir(gone).is_none(), "{gone} is left");
    }
    let left: Vec<String> = image
        .list()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(SNAPSHOT_INCOMING))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let log = SegmentLog::open_with_backend(Arc::new(image.dir(LOG_DIR).unwrap()), small())
        .unwrap()
        .0;
    let gens = store.load_generations().unwrap();
    let newest = gens[0].checkpoint.as_ref().unwrap();
    if newest.applied_index == 10 {
        assert_eq!(newest.state, b"old state");
        assert_eq!(store.get_meta(PURGED).unwrap(), None);
        assert_eq!(
            (log.first_index(), log.last()),
            (Some(1), Some((old_last, old_term)))
        );
        assert_records(&log, 1, old_last, old_term);
        return "old";
    }
    assert_eq!(gens.len(), 2);
    // Both generations name the snapshot's membership, so this node can send it on.
    let store = Arc::new(store);
    let src = crate::SnapshotSource::open(&store, &log, 50).unwrap();
    assert_eq!(src.membership(), Some(&b"the leader's"[..]));
    drop(src);
    for g in &gens {
        let cp = g.checkpoint.as_ref().unwrap();
        assert_eq!((cp.applied_index, cp.applied_term), (50, 2));
        assert_eq!(cp.state, new_state());
    }
    assert_eq!(
        store.get_meta(PURGED).unwrap().as_deref(),
        Some(&b"(2, 50)"[..])
    );
    if kept_log {
        assert_eq!(
            (log.first_index(), log.last()),
            (Some(1), Some((old_last, 2)))
        );
        assert_records(&log, 1, old_last, 2);
    } else {
        assert_eq!((log.first_index(), log.last()), (Some(20), Some((50, 2))));
        assert_records(&log, 20, 50, 2);
    }
    "new"
}

#[test]
fn a_crash_after_any_step_restarts_into_the_old_node_or_the_new_one() {
    let f = follower(10, 1);
    f.data.record_steps();
    let done = stage(&f).unwrap();
    assert!(done.switched);
    assert_eq!(done.header.first_record, 20);
    let (data, _store) = reopen(f);
    let images = data.take_steps();
    assert!(images.len() > 10, "{} steps", images.len());
    let seen: Vec<&str> = images.iter().map(|i| restart(i, 10, 1, false)).collect();
    // Old up to the commit of step 3, new from it on.
    let flip = seen.iter().position(|s| *s == "new").unwrap();
    assert!(seen[..flip].iter().all(|s| *s == "old"));
    assert!(seen[flip..].iter().all(|s| *s == "new"), "{seen:?}");
    assert_eq!(restart(&data.crash(), 10, 1, false), "new");
}

/// Step 2's other branch: a log holding A in the snapshot's term (and records after it,
/// which may have been acknowledged) is kept whole; no `log-incoming` is built.
#[test]
fn a_log_holding_a_in_the_same_term_is_kept() {
    let f = follower(55, 2);
    f.data.record_steps();
    let done = stage(&f).unwrap();
    assert!(!done.switched);
    let (data, _store) = reopen(f);
    for image in &data.take_steps() {
        assert!(image.dir(LOG_INCOMING).is_none());
        restart(image, 55, 2, true);
    }
    assert_eq!(restart(&data.crash(), 55, 2, true), "new");
}

/// Review s21 M4: a log holding A in the same term that starts above F can neither be kept
/// (the runs name records F.. it lacks) nor replaced (its records after A may be
/// acknowledged): refused, costing the file only.
#[test]
fn a_log_holding_a_but_starting_above_f_is_refused_not_replaced() {
    let f = follower_from(30, 55, 2);
    let err = stage(&f).unwrap_err();
    assert!(
        matches!(&err, StorageError::SnapshotRefused { reason, .. } if reason.contains("above the snapshot's first record 20")),
        "{err}"
    );
    assert!(f.data.file_bytes(SNAPSHOT_INCOMING).is_none());
    assert!(f.data.dir(LOG_INCOMING).is_none());
    assert_eq!(f.store.installing().unwrap(), None);
    assert_records(&f.log, 30, 55, 2);
    assert_eq!(
        f.store.load_checkpoint().unwrap().unwrap().state,
        b"old state"
    );
}

/// Review s21 M1 and M3: between the stage and the reopen that finishes it, no checkpoint is
/// saved over the installed state and no second install deletes the first one's
/// `log-incoming`; after the reopen both work again.
#[test]
fn a_staged_install_holds_off_saves_and_installs_until_the_reopen() {
    let f = follower(10, 1);
    stage(&f).unwrap();
    let err = f
        .store
        .save_checkpoint_with_floor(11, 1, 1, |sink| sink.write(b"stale engine"))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::InstallPending {
                applied_index: 50,
                ..
            }
        ),
        "{err}"
    );
    let first_log = f.data.dir(LOG_INCOMING).unwrap();
    first_log.create("marker").unwrap();
    receive(&f.data);
    let err = stage(&f).unwrap_err();
    assert!(matches!(err, StorageError::InstallPending { .. }), "{err}");
    let kept = f.data.dir(LOG_INCOMING).unwrap();
    let names = kept.list().unwrap();
    assert!(
        names.iter().any(|n| n == "marker"),
        "the first install's log went"
    );
    kept.remove("marker").unwrap();
    let (data, store) = reopen(f);
    assert_eq!(restart(&data.crash(), 10, 1, false), "new");
    store
        .save_checkpoint_with_floor(51, 2, 20, |sink| sink.write(b"next"))
        .unwrap();
}

/// Before step 3 a file that no longer verifies costs the file: the node keeps its state and
/// log, and nothing of the install is left.
#[test]
fn a_flipped_byte_in_the_file_costs_the_file_not_the_node() {
    let stream_len = leader_stream().len();
    for at in [20, SNAPSHOT_HEADER_LEN + 100, stream_len - 7] {
        let f = follower(10, 1);
        let mut bytes = f.data.file_bytes(SNAPSHOT_INCOMING).unwrap();
        bytes[at] ^= 0x01;
        f.data.set_file_bytes(SNAPSHOT_INCOMING, bytes);
        let err = stage(&f).unwrap_err();
        assert!(
            matches!(err, StorageError::SnapshotRefused { .. }),
            "byte {at}: {err}"
        );
        assert!(f.data.file_bytes(SNAPSHOT_INCOMING).is_none());
        assert!(f.data.dir(LOG_INCOMING).is_none());
        assert_records(&f.log, 1, 10, 1);
        assert_eq!(restart(&f.data.crash(), 10, 1, false), "old", "byte {at}");
    }
}

/// The same on a real directory: the leftovers of an unfinished stream go at start-up, and an
/// install switches `log` for the snapshot's records.
#[test]
fn on_disk_leftovers_go_and_an_install_switches_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let dir = crate::DiskDataDir::new(root).unwrap();
    let store = StateStore::open(&root.join("state.redb")).unwrap();
    let (log, _) = SegmentLog::open(&root.join(LOG_DIR), small()).unwrap();
    fill(&log, 1, 10, 1);
    log.sync().unwrap();
    std::fs::write(root.join("snapshot-incoming.7.part"), b"half").unwrap();
    std::fs::create_dir(root.join(LOG_INCOMING)).unwrap();
    std::fs::write(root.join(LOG_INCOMING).join("x"), b"x").unwrap();
    assert_eq!(finish_interrupted_install(&dir, &store).unwrap(), None);
    assert!(!root.join("snapshot-incoming.7.part").exists());
    assert!(!root.join(LOG_INCOMING).exists());

    let files: Arc<dyn IoBackend> = Arc::new(crate::FileBackend::new(root).unwrap());
    let mut rx = SnapshotReceiver::create(files, 1024, Box::new(|_| Ok(()))).unwrap();
    rx.write_at(0, &leader_stream()).unwrap();
    rx.finish().unwrap();
    let done = stage_install(&dir, &store, &log, small(), &[], (50, 2)).unwrap();
    assert!(done.switched);
    drop(log);
    let finished = finish_interrupted_install(&dir, &store).unwrap().unwrap();
    assert_eq!((finished.applied_index, finished.switch), (50, true));
    assert!(!root.join(SNAPSHOT_INCOMING).exists() && !root.join(LOG_OLD).exists());
    let (log, _) = SegmentLog::open(&root.join(LOG_DIR), small()).unwrap();
    assert_records(&log, 20, 50, 2);
    assert_eq!(store.load_checkpoint().unwrap().unwrap().state, new_state());
}

/// The file must cover the position the Raft layer was told the snapshot covers: another one
/// is refused before anything is written, costing the file.
#[test]
fn a_file_covering_another_position_is_refused() {
    let f = follower(10, 1);
    let err = stage_install(&f.data, &f.store, &f.log, small(), &[], (50, 3)).unwrap_err();
    assert!(
        matches!(&err, StorageError::SnapshotRefused { reason, .. } if reason.contains("(50, 2)")),
        "{err}"
    );
    assert!(f.data.file_bytes(SNAPSHOT_INCOMING).is_none());
    assert_eq!(f.store.installing().unwrap(), None);
    assert_eq!(restart(&f.data.crash(), 10, 1, false), "old");
}

/// Review s22 H1: a follower whose log was reclaimed past A would find no term at A and take
/// the replace branch, deleting entries after A that may be acknowledged: refused, costing
/// the file only.
#[test]
fn a_log_starting_above_a_is_refused_not_replaced() {
    let f = follower_from(60, 70, 2);
    let err = stage(&f).unwrap_err();
    assert!(
        matches!(&err, StorageError::SnapshotRefused { reason, .. } if reason.contains("starts at index 60, above the snapshot's last index 50")),
        "{err}"
    );
    assert!(f.data.file_bytes(SNAPSHOT_INCOMING).is_none());
    assert!(f.data.dir(LOG_INCOMING).is_none());
    assert_eq!(f.store.installing().unwrap(), None);
    assert_records(&f.log, 60, 70, 2);
}

/// Review s22 H1: a checkpoint at or past A would be set back to A under a log and a
/// committed index ahead of it: refused, the checkpoint as it was.
#[test]
fn a_checkpoint_at_or_past_a_refuses_the_snapshot() {
    for at in [50, 51] {
        let f = follower(10, 1);
        f.store
            .save_checkpoint_with_floor(at, 1, 1, |sink| sink.write(b"newer state"))
            .unwrap();
        let err = stage(&f).unwrap_err();
        assert!(
            matches!(&err, StorageError::SnapshotRefused { reason, .. } if reason.contains(&format!("checkpoint is at index {at}, at or past"))),
            "{err}"
        );
        assert!(f.data.file_bytes(SNAPSHOT_INCOMING).is_none());
        assert_eq!(f.store.installing().unwrap(), None);
        let cp = f.store.load_checkpoint().unwrap().unwrap();
        assert_eq!((cp.applied_index, cp.state), (at, b"newer state".to_vec()));
        assert_records(&f.log, 1, 10, 1);
    }
}

/// Review s22 M2: a stage waits for one already running (here: the lock held) instead of
/// building its `log-incoming` beside it.
#[test]
fn stages_run_one_at_a_time() {
    let f = follower(10, 1);
    let held = f.store.stage_lock();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let f = &f;
        s.spawn(move || tx.send(stage(f).map(|i| i.switched)));
        // Cannot pass falsely: a stage that ignored the lock would have answered by now.
        let early = rx.recv_timeout(std::time::Duration::from_millis(300));
        assert!(
            matches!(early, Err(std::sync::mpsc::RecvTimeoutError::Timeout)),
            "{early:?}"
        );
        drop(held);
        assert!(matches!(rx.recv().unwrap(), Ok(true)));
    });
    assert!(f.data.dir(LOG_INCOMING).is_some());
}

/// Damages the state of the generation at `at` (a byte of its first chunk).
fn damage_generation(store: &StateStore, at: u64) {
    let gens = store.load_generations().unwrap();
    let slot = gens
        .iter()
        .find(|g| g.applied_index == Some(at))
        .unwrap()
        .slot;
    let table = crate::state::generations::SLOTS[slot].chunks;
    store
        .write_raw(|txn| {
            let mut t = txn.open_table(table)?;
            let mut chunk = t.get(0)?.map(|v| v.value().to_vec()).unwrap_or_default();
            chunk[0] ^= 0x40;
            t.insert(0, chunk.as_slice())?;
            Ok(())
        })
        .unwrap();
}

/// Review s23 L3: a generation at or past A whose state does not verify is not where the node
/// runs from (it falls back to the older one): it does not refuse the snapshot.
#[test]
fn an_unusable_generation_past_a_does_not_refuse_the_snapshot() {
    let f = follower(10, 1);
    f.store
        .save_checkpoint_with_floor(55, 1, 1, |sink| sink.write(b"newer state"))
        .unwrap();
    assert_eq!(f.store.usable_checkpoint_at_or_past(11).unwrap(), Some(55));
    assert_eq!(f.store.usable_checkpoint_at_or_past(56).unwrap(), None);
    damage_generation(&f.store, 55);
    assert_eq!(f.store.usable_checkpoint_at_or_past(11).unwrap(), None);
    assert_eq!(f.store.usable_checkpoint_at_or_past(10).unwrap(), Some(10));
    assert!(stage(&f).unwrap().switched);
}

/// Review s23 M3: a save that commits at or past A after the stage's checks is caught in step
/// 3's own transaction, and the newer checkpoint stays.
#[test]
fn a_save_past_a_after_the_checks_refuses_the_commit() {
    let f = follower(10, 1);
    f.store
        .save_checkpoint_with_floor(50, 1, 1, |sink| sink.write(b"newer state"))
        .unwrap();
    let install = crate::Installing {
        applied_index: 50,
        applied_term: 2,
        first_record: 20,
        switch: true,
    };
    let state = new_state();
    let mut fill = |sink: &mut crate::StateSink<'_>| {
        sink.write(&state);
        Ok::<(), StorageError>(())
    };
    let crc = crc32c::crc32c(&state);
    let err = f
        .store
        .commit_install(&install, state.len() as u64, crc, &mut fill, &[])
        .unwrap_err();
    assert!(
        matches!(&err, StorageError::SnapshotRefused { reason, .. } if reason.contains("checkpoint is at index 50")),
        "{err}"
    );
    assert_eq!(f.store.installing().unwrap(), None);
    let cp = f.store.load_checkpoint().unwrap().unwrap();
    assert_eq!((cp.applied_index, cp.state), (50, b"newer state".to_vec()));
    // Once that generation no longer verifies it no longer refuses.
    damage_generation(&f.store, 50);
    f.store
        .commit_install(&install, state.len() as u64, crc, &mut fill, &[])
        .unwrap();
}

/// Review s23 M2/M3: the checks that read no record refuse before anything is held, and the
/// stream's file goes with the refusal; a stream that passes them is left for the stage.
#[test]
fn the_precheck_refuses_a_node_past_a_and_deletes_the_stream() {
    let f = follower(10, 1);
    crate::precheck_install(&f.data, &f.store, &f.log, (50, 2)).unwrap();
    assert!(f.data.file_bytes(SNAPSHOT_INCOMING).is_some());
    let err = crate::precheck_install(&f.data, &f.store, &f.log, (51, 2)).unwrap_err();
    assert!(
        matches!(&err, StorageError::SnapshotRefused { reason, .. } if reason.contains("covers (50, 2)")),
        "{err}"
    );
    assert!(f.data.file_bytes(SNAPSHOT_INCOMING).is_none());
    assert_records(&f.log, 1, 10, 1);
}
