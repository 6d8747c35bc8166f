//! A broker's first start on a strict in-memory tree, step for step as broker/src/server.rs
//! does it (`lock_data_dir`, `open_store`, `SegmentLog::open`), then the first acknowledged
//! writes: a power cut after any single mkdir, create, write or fsync leaves either a tree a
//! fresh start accepts (nothing acknowledged yet) or one holding everything acknowledged.

use std::path::Path;
use std::sync::Arc;

use crate::backend::create_dir_durable_with;
use crate::log::tests::{payload, small};
use crate::{Checkpoint, IoBackend, LogOptions, MemBackend, SegmentLog, StateStore};

const DATA: &str = "srv/queen";

/// What the broker has told a client is durable by the time the steps were taken.
#[derive(Default, Clone, Copy)]
struct Acked {
    vote: bool,
    last: u64,
    checkpoint: Option<u64>,
}

/// The start-up sequence. Returns the store and the log.
fn start(root: &MemBackend, opts: LogOptions) -> (StateStore, SegmentLog) {
    create_dir_durable_with(root, Path::new(DATA)).unwrap();
    let data = root.dir(DATA).unwrap();
    // `lock_data_dir`: create LOCK, fsync the data directory.
    if data.open("LOCK").is_err() {
        data.create("LOCK").unwrap();
    }
    data.sync_dir().unwrap();
    let store = StateStore::open_in(&data, "state.redb").unwrap();
    // `FileBackend::new`: the log directory, durably.
    let log_path = format!("{DATA}/log");
    create_dir_durable_with(root, Path::new(&log_path)).unwrap();
    let log_dir = root.dir(&log_path).unwrap();
    let (log, _) = SegmentLog::open_with_backend(Arc::new(log_dir), opts).unwrap();
    (store, log)
}

/// Restarts on `image` as the broker would, and checks it holds everything in `acked`.
fn restart_holds(image: &MemBackend, acked: Acked, step: usize) {
    let data_present = image.dir(DATA).is_some();
    assert!(
        data_present || (!acked.vote && acked.last == 0),
        "step {step}: the data directory is gone after an acknowledgement"
    );
    let opts = LogOptions {
        durable_through: acked.last,
        ..small()
    };
    let (store, log) = start(image, opts);
    if acked.vote {
        assert_eq!(
            store.get_meta("raft/vote").unwrap(),
            Some(b"vote".to_vec()),
            "step {step}"
        );
    }
    let cp = store.load_checkpoint().unwrap();
    if let Some(index) = acked.checkpoint {
        assert_eq!(cp.map(|c| c.applied_index), Some(index), "step {step}");
    }
    let last = log.last().map_or(0, |l| l.0);
    assert!(
        last >= acked.last,
        "step {step}: log ends at {last} < {}",
        acked.last
    );
    for i in 1..=acked.last {
        assert_eq!(
            log.read(i).unwrap().map(|r| r.1),
            Some(payload(i)),
            "step {step} index {i}"
        );
    }
}

#[test]
fn a_crash_after_any_step_of_a_first_start_keeps_everything_acknowledged() {
    let root = MemBackend::new();
    // The parent of the data directory exists and is durable; `queen` below it does not.
    root.mkdir("srv").unwrap();
    root.sync_dir().unwrap();
    root.record_steps();

    let mut marks: Vec<(usize, Acked)> = Vec::new();
    let mut acked = Acked::default();
    let (store, log) = start(&root, small());
    store.put_meta("raft/vote", b"vote").unwrap();
    acked.vote = true;
    marks.push((root.steps_recorded(), acked));
    // Enough records to roll several segments, acknowledged in a few group commits.
    for batch in 0..4u64 {
        for i in batch * 10 + 1..=batch * 10 + 10 {
            log.append(i, 1, &payload(i)).unwrap();
        }
        log.sync().unwrap();
        acked.last = batch * 10 + 10;
        marks.push((root.steps_recorded(), acked));
        if batch == 1 {
            store
                .save_checkpoint(&Checkpoint {
                    applied_index: acked.last,
                    applied_term: 1,
                    state: vec![7; 1000],
                })
                .unwrap();
            acked.checkpoint = Some(acked.last);
            marks.push((root.steps_recorded(), acked));
        }
    }
    assert!(log.segment_count() > 2);
    drop((store, log));

    let images = root.take_steps();
    assert!(images.len() > 40, "only {} steps", images.len());
    for (i, image) in images.iter().enumerate() {
        let acked_here = marks
            .iter()
            .filter(|(at, _)| *at <= i + 1)
            .map(|(_, a)| *a)
            .next_back()
            .unwrap_or_default();
        restart_holds(image, acked_here, i);
    }
}

#[test]
fn without_the_fsync_of_its_parent_a_new_data_directory_is_gone_after_a_crash() {
    let root = MemBackend::new();
    root.mkdir("srv").unwrap();
    root.sync_dir().unwrap();
    let srv = root.dir("srv").unwrap();
    let data = srv.mkdir("queen").unwrap();
    data.create("LOCK").unwrap();
    data.sync_dir().unwrap();
    // The strict model: the file's name is durable in `queen`, but `queen` is not in `srv`.
    assert!(root.crash().dir(DATA).is_none());
    srv.sync_dir().unwrap();
    let after = root.crash();
    assert_eq!(
        after.dir(DATA).unwrap().list().unwrap(),
        vec!["LOCK".to_owned()]
    );
}
