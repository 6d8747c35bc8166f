//! H4 (docs/storage-format.md "The id files in the stream"): a follower caught up by a
//! snapshot finds the ids its leader had spilled to files, through the same `TxnSpill` the
//! planner asks.

use std::io::Read;
use std::sync::Arc;

use queenmq_engine::dedup_filter::FilterConfig;
use queenmq_engine::state::{TxnIds, TxnSpill};
use queenmq_storage::{
    finish_interrupted_install, stage_install, DiskDataDir, FileBackend, IoBackend, LogOptions,
    SegmentLog, SnapshotReceiver, SnapshotSource, StateStore,
};

use super::*;

const SEC: i64 = 1_000_000;
const KEEP: i64 = 3600 * SEC;
const NOW: i64 = 300 * SEC;

fn spill_at(dir: &Path) -> TxnSpill {
    let store = DiskIdStore::open(dir).expect("open the id files");
    let filter = FilterConfig {
        bytes: 64 << 10,
        ..FilterConfig::default()
    };
    TxnSpill::open(Box::new(store), 16, filter, KEEP, NOW)
}

fn opts() -> LogOptions {
    LogOptions {
        segment_bytes: 4096,
        ..LogOptions::default()
    }
}

fn log_at(dir: &Path, from: u64, to: u64, term: u64) -> SegmentLog {
    let (log, _) = SegmentLog::open(&dir.join("log"), opts()).expect("open the log");
    for i in from..=to {
        log.append(i, term, format!("entry {i}").as_bytes())
            .expect("append");
    }
    log.sync().expect("sync");
    log
}

/// Is id `h` of partition 1 (offset `h`) seen by a spill opened on `dir`?
fn seen(dir: &Path, h: u64) -> bool {
    spill_at(dir)
        .find(1, h, NOW, KEEP, &mut { usize::MAX }, &mut |off| off == h)
        .expect("no I/O error")
        .is_some()
}

/// The leader spilled most of 200 ids; the snapshot it sends carries its id files; the
/// follower that installs it answers "seen" for every spilled id, and no longer holds ids of
/// its own old files (replaced, not merged).
#[test]
fn a_follower_caught_up_by_a_snapshot_sees_the_ids_its_leader_spilled() {
    let leader = tempfile::tempdir().expect("tempdir");
    let mut spill = spill_at(leader.path());
    let mut ids = TxnIds::default();
    for i in 0..200u64 {
        let t = 10 * SEC + i as i64 * SEC;
        ids.record(t, 1, i, &[i]);
        spill.spill(&mut ids, KEEP, t);
        spill.settle(&mut ids, KEEP);
    }
    drop(spill);
    let spilled: Vec<u64> = (0..200).filter(|h| ids.get(1, *h).is_none()).collect();
    assert!(spilled.len() > 150, "{} spilled", spilled.len());
    let store = Arc::new(StateStore::open(&leader.path().join("state.redb")).expect("store"));
    let log = log_at(leader.path(), 1, 60, 2);
    store
        .save_checkpoint_with_floor(50, 2, 20, |sink| sink.write(b"leader state"))
        .expect("checkpoint");
    let ids_dir = FileBackend::new(&leader.path().join(IDS_DIR)).expect("ids dir");
    let mut src =
        SnapshotSource::open_with_ids(&store, &log, 50, Some(Arc::new(ids_dir))).expect("open");
    assert!(src.header().ids_files > 0);
    let mut stream = Vec::new();
    src.read_to_end(&mut stream).expect("read the stream");

    let follower = tempfile::tempdir().expect("tempdir");
    let root = follower.path();
    let mut own = spill_at(root);
    let mut own_ids = TxnIds::default();
    for i in 0..40u64 {
        let h = 10_000 + i;
        let t = 20 * SEC + i as i64 * SEC;
        own_ids.record(t, 1, h, &[h]);
        own.spill(&mut own_ids, KEEP, t);
        own.settle(&mut own_ids, KEEP);
    }
    drop(own);
    assert!(seen(root, 10_000), "the follower's own spilled id");
    assert!(!seen(root, spilled[0]));
    let fstore = StateStore::open(&root.join("state.redb")).expect("store");
    let flog = log_at(root, 1, 10, 1);
    fstore
        .save_checkpoint_with_floor(10, 1, 1, |sink| sink.write(b"old"))
        .expect("checkpoint");
    let files: Arc<dyn IoBackend> = Arc::new(FileBackend::new(root).expect("data dir"));
    let mut rx = SnapshotReceiver::create(files, 1 << 20, Box::new(|_| Ok(()))).expect("rx");
    for (i, chunk) in stream.chunks(3 << 10).enumerate() {
        rx.write_at(i as u64 * (3 << 10), chunk).expect("chunk");
    }
    rx.finish().expect("finish");
    let dir = DiskDataDir::new(root).expect("data dir");
    stage_install(&dir, &fstore, &flog, opts(), &[], (50, 2)).expect("stage");
    drop(flog);
    finish_interrupted_install(&dir, &fstore).expect("finish");

    for h in &spilled {
        assert!(seen(root, *h), "spilled id {h} is new to the follower");
    }
    assert!(
        !seen(root, 10_000),
        "the follower's old files were replaced"
    );
    assert!(!root.join(queenmq_storage::IDS_INCOMING).exists());
    assert!(!root.join(queenmq_storage::IDS_OLD).exists());
}
