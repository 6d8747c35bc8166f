//! Crash images from `MemBackend`: what survives a power cut at awkward moments.

use std::sync::Arc;

use super::tests::{assert_records, fill, payload, small};
use crate::format::record_len;
use crate::{MemBackend, SegmentLog, StorageError};

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
    assert_eq!(log.last(), Some((20, 1)));
    assert_eq!(report.records, 20);
    assert_records(&log, 1, 20, 1);
    fill(&log, 21, 25, 2);
    assert_records(&log, 21, 25, 2);
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
