//! Crash images from `MemBackend`: what survives a power cut at awkward moments.

use std::sync::Arc;

use super::tests::{assert_records, fill, payload, small};
use crate::format::record_len;
use crate::{IoBackend, MemBackend, SegmentLog, StorageError};

fn open(backend: &MemBackend) -> (SegmentLog, crate::RecoveryReport) {
    SegmentLog::open_with_backend(Arc::new(backend.clone()), small()).unwrap()
}

#[test]
fn unsynced_appends_are_lost_and_synced_ones_kept() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    fill(&log, 1, 20, 1);
    log.sync().unwrap();
    // Enough to roll into new segments that were never synced.
    fill(&log, 21, 40, 1);
    let after = backend.crash();
    let (log, report) = open(&after);
    // A rolled-away segment is synced before its successor is created, but no new segment's
    // name was made durable: what survives is the first segment, synced records and all.
    let (last, _) = log.last().unwrap();
    assert!((20..40).contains(&last), "last {last}");
    assert_eq!(report.records, last);
    assert_records(&log, 1, last, 1);
    fill(&log, last + 1, last + 5, 2);
    assert_records(&log, last + 1, last + 5, 2);
}

#[test]
fn a_write_torn_at_any_byte_recovers_to_the_last_whole_record() {
    let backend = MemBackend::new();
    // One segment, so the batch below is a single write into an already durable file.
    let opts = crate::LogOptions::default();
    let (log, _) = SegmentLog::open_with_backend(Arc::new(backend.clone()), opts).unwrap();
    fill(&log, 1, 5, 1);
    log.sync().unwrap();
    let batch: Vec<Vec<u8>> = (6..=8).map(payload).collect();
    let refs: Vec<(u64, u64, &[u8])> = (6..=8)
        .zip(&batch)
        .map(|(i, p)| (i, 1, p.as_slice()))
        .collect();
    log.append_batch(&refs).unwrap();
    let mut boundaries = vec![0u64];
    for p in &batch {
        boundaries.push(boundaries[boundaries.len() - 1] + record_len(p.len()));
    }
    for keep in 0..=boundaries[3] {
        let crashed = backend.crash_tearing_last_write(keep as usize);
        let (log, report) = SegmentLog::open_with_backend(Arc::new(crashed), opts).unwrap();
        let whole = boundaries.iter().filter(|&&b| b > 0 && b <= keep).count() as u64;
        assert_eq!(log.last(), Some((5 + whole, 1)), "keep {keep}");
        assert_records(&log, 1, 5 + whole, 1);
        let on_boundary = boundaries.contains(&keep);
        assert_eq!(report.truncated.is_some(), !on_boundary, "keep {keep}");
        if let Some(torn) = report.truncated {
            assert_eq!(
                torn.cut_bytes,
                keep - boundaries[whole as usize],
                "keep {keep}"
            );
        }
    }
}

#[test]
fn truncate_from_is_durable_on_return() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    fill(&log, 1, 30, 1);
    log.sync().unwrap();
    log.truncate_from(8).unwrap();
    let (log, _) = open(&backend.crash());
    assert_eq!(log.last(), Some((7, 1)));
}

#[test]
fn a_failed_fsync_poisons_the_log() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    fill(&log, 1, 3, 1);
    backend.set_fail_sync(true);
    assert!(matches!(log.sync(), Err(StorageError::Io { .. })));
    backend.set_fail_sync(false);
    assert!(matches!(
        log.append(4, 1, b"x"),
        Err(StorageError::Poisoned)
    ));
    assert!(matches!(log.sync(), Err(StorageError::Poisoned)));
    assert_records(&log, 1, 3, 1);
}

/// What an in-process rebuild relies on (broker group/supervisor.rs): `synced_through` names
/// the last record a successful sync vouched for; reopening over the same (page-cache) files
/// and cutting after it leaves exactly what a power cut would have kept.
#[test]
fn synced_through_is_what_a_reopen_after_a_failed_fsync_keeps() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    assert_eq!(log.synced_through(), None);
    fill(&log, 1, 10, 1);
    assert_eq!(log.synced_through(), None, "appended is not synced");
    log.sync().unwrap();
    assert_eq!(log.synced_through(), Some(10));
    fill(&log, 11, 25, 1);
    backend.set_fail_sync(true);
    assert!(log.sync().is_err());
    backend.set_fail_sync(false);
    assert_eq!(
        log.synced_through(),
        Some(10),
        "a failed sync vouches for nothing"
    );
    let synced = log.synced_through();
    drop(log);

    // The same files (not a crash image): the page cache still shows records 11..=25.
    let (reopened, _) = open(&backend);
    assert_eq!(reopened.last(), Some((25, 1)));
    assert_eq!(
        reopened.synced_through(),
        Some(25),
        "recovery vouches for what it found"
    );
    reopened.truncate_from(synced.unwrap() + 1).unwrap();
    assert_eq!(reopened.synced_through(), Some(10));
    assert_eq!(reopened.last(), Some((10, 1)));
    let (after_cut, _) = open(&backend.crash());
    assert_eq!(after_cut.last(), Some((10, 1)));
    assert_records(&after_cut, 1, 10, 1);
}

/// A roll fsyncs the segment it leaves: when that fails, a later `sync` must not return Ok
/// (Linux reports a writeback error once; the next fsync of the file succeeds) and must not
/// move `synced_through` over records that may not be on disk.
#[test]
fn a_failed_fsync_at_a_roll_poisons_the_log() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    fill(&log, 1, 3, 1);
    log.sync().unwrap();
    backend.set_fail_sync(true);
    let mut failed = false;
    for i in 4..200 {
        if log.append(i, 1, &payload(i)).is_err() {
            failed = true;
            break;
        }
    }
    backend.set_fail_sync(false);
    assert!(failed, "no roll happened: the test needs smaller segments");
    assert!(
        log.sync().is_err(),
        "a sync after the failed roll fsync must fail"
    );
    assert_eq!(log.synced_through(), Some(3));
}

#[test]
fn sync_covers_segments_rolled_since_the_last_sync() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    fill(&log, 1, 40, 1);
    assert!(log.segment_count() > 3);
    log.sync().unwrap();
    let (log, report) = open(&backend.crash());
    assert_eq!(report.truncated, None);
    assert_eq!(log.last(), Some((40, 1)));
    assert_records(&log, 1, 40, 1);
}

#[test]
fn concurrent_syncs_each_return_after_their_appends_are_durable() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    let log = Arc::new(log);
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let log = log.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    log.sync().unwrap();
                }
            })
        })
        .collect();
    fill(&log, 1, 100, 1);
    for w in workers {
        w.join().unwrap();
    }
    log.sync().unwrap();
    let (log, _) = open(&backend.crash());
    assert_eq!(log.last(), Some((100, 1)));
}

/// Opens every crash image and checks that it recovers without a refusal and holds every
/// record acknowledged (synced) before that moment, with `durable_through` set to it, as the
/// persisted committed index would be.
fn check_images(images: Vec<MemBackend>, acked: &[(usize, u64)], first_kept: u64) {
    assert!(!images.is_empty());
    for (i, image) in images.into_iter().enumerate() {
        let acked_here = acked
            .iter()
            .filter(|(step, _)| *step <= i + 1)
            .map(|(_, last)| *last)
            .max()
            .unwrap_or(0);
        let opts = crate::LogOptions {
            durable_through: acked_here,
            ..super::tests::small()
        };
        let (log, _) = SegmentLog::open_with_backend(Arc::new(image), opts)
            .unwrap_or_else(|e| panic!("step {i}: {e}"));
        let last = log.last().map_or(0, |l| l.0);
        assert!(
            last >= acked_here,
            "step {i}: last {last} < acked {acked_here}"
        );
        let from = log.first_index().unwrap_or(1).max(first_kept);
        for index in from..=acked_here {
            let (_, bytes) = log.read(index).unwrap().unwrap();
            assert_eq!(bytes, payload(index), "step {i} index {index}");
        }
    }
}

#[test]
fn a_crash_after_any_step_of_appending_rolling_truncating_and_purging_keeps_what_was_acked() {
    let backend = MemBackend::new();
    backend.record_steps();
    let (log, _) = open(&backend);
    let mut acked = Vec::new();
    for i in 1..=30 {
        log.append(i, 1, &payload(i)).unwrap();
        if i % 3 == 0 {
            log.sync().unwrap();
            acked.push((backend.steps_recorded(), i));
        }
    }
    assert!(log.segment_count() > 3);
    // A Raft conflict: nothing truncated was ever committed, so the acked mark drops too.
    log.truncate_from(25).unwrap();
    acked.retain(|(_, last)| *last < 25);
    let after_truncate = backend.steps_recorded();
    acked.push((after_truncate, 24));
    for i in 25..=40 {
        log.append(i, 1, &payload(i)).unwrap();
        if i % 4 == 0 {
            log.sync().unwrap();
            acked.push((backend.steps_recorded(), i));
        }
    }
    let images = backend.take_steps();
    // Images before the truncate returned may still hold the first 25..=30; they are checked
    // against the marks of their time.
    let before: Vec<(usize, u64)> = acked
        .iter()
        .copied()
        .filter(|(s, _)| *s < after_truncate)
        .collect();
    let (early, late): (Vec<_>, Vec<_>) = images
        .into_iter()
        .enumerate()
        .partition(|(i, _)| *i + 1 < after_truncate);
    check_images(early.into_iter().map(|(_, b)| b).collect(), &before, 1);
    let shifted: Vec<(usize, u64)> = acked
        .iter()
        .filter(|(s, _)| *s >= after_truncate)
        .map(|(s, l)| (s - after_truncate + 1, *l))
        .collect();
    let late: Vec<MemBackend> = late.into_iter().map(|(_, b)| b).collect();
    check_images(late, &[&[(0usize, 24u64)][..], &shifted].concat(), 1);

    // Retention: a crash at any step of a purge leaves a contiguous suffix holding the rest.
    log.purge_upto(10).unwrap();
    let images = backend.take_steps();
    assert!(images.len() >= 2, "one durable step per removed segment");
    check_images(images, &[(0, 40)], 11);
}

#[test]
fn a_crash_after_any_step_of_cutting_a_torn_tail_recovers_the_same_log() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    fill(&log, 1, 30, 1);
    log.sync().unwrap();
    log.append(31, 1, &payload(31)).unwrap();
    let torn = backend.crash_tearing_last_write(10);
    torn.record_steps();
    let (log, report) = open(&torn);
    assert!(report.truncated.is_some());
    assert_eq!(log.last(), Some((30, 1)));
    let images = torn.take_steps();
    assert!(!images.is_empty());
    check_images(images, &[(0, 30)], 1);
}

#[test]
fn an_unsynced_new_segment_name_is_gone_after_a_crash() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    fill(&log, 1, 3, 1);
    log.sync().unwrap();
    let before = backend.list().unwrap().len();
    fill(&log, 4, 30, 1);
    assert!(backend.list().unwrap().len() > before);
    // Data synced file by file but no directory fsync: the names are not durable.
    let after = backend.crash();
    assert_eq!(after.list().unwrap().len(), before);
}

/// ENOSPC is not an fsync failure: nothing reached the disk, so the log is not poisoned, the
/// failed record is not published, and the same index is appended once space is back.
#[test]
fn an_append_on_a_full_disk_fails_without_poisoning_the_log() {
    let backend = MemBackend::new();
    let (log, _) = open(&backend);
    fill(&log, 1, 3, 1);
    log.sync().unwrap();
    backend.set_full(true);
    let e = log.append(4, 1, b"x").expect_err("no space");
    assert!(matches!(e, StorageError::Io { .. }), "{e}");
    assert_eq!(
        log.last(),
        Some((3, 1)),
        "nothing of the failed append is published"
    );
    log.sync()
        .expect("a full disk is not a failed fsync: the log is not poisoned");
    backend.set_full(false);
    log.append(4, 1, b"x").unwrap();
    log.sync().unwrap();
    let (log, _) = open(&backend.crash());
    assert_records(&log, 1, 3, 1);
    assert_eq!(log.last(), Some((4, 1)));
}
