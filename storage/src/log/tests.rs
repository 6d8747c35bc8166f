//! The segment log's own contract suite: appends, reads, rolls, refusals, trims, reopen.

use std::sync::Arc;

use crate::backend::IoBackend;
use crate::{LogOptions, MemBackend, SegmentLog, StorageError, HIGHEST_INDEX};

pub(crate) fn small() -> LogOptions {
    LogOptions {
        segment_bytes: 256,
        max_record_bytes: 1024,
        ..LogOptions::default()
    }
}

pub(crate) fn payload(i: u64) -> Vec<u8> {
    format!("payload-{i}-{}", "x".repeat((i % 7) as usize * 9)).into_bytes()
}

pub(crate) fn fill(log: &SegmentLog, from: u64, to: u64, term: u64) {
    for i in from..=to {
        log.append(i, term, &payload(i)).unwrap();
    }
}

pub(crate) fn assert_records(log: &SegmentLog, from: u64, to: u64, term: u64) {
    for i in from..=to {
        assert_eq!(log.read(i).unwrap(), Some((term, payload(i))), "index {i}");
        assert_eq!(log.term_of(i), Some(term));
    }
}

fn mem_log(backend: &MemBackend) -> SegmentLog {
    SegmentLog::open_with_backend(Arc::new(backend.clone()), small())
        .unwrap()
        .0
}

#[test]
fn is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<SegmentLog>();
    check::<crate::StateStore>();
}

#[test]
fn round_trip_across_segment_rolls_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, report) = SegmentLog::open(dir.path(), small()).unwrap();
        assert_eq!(report.records, 0);
        assert_eq!(log.first_index(), None);
        assert_eq!(log.last(), None);
        fill(&log, 1, 60, 3);
        assert!(log.segment_count() >= 5, "got {}", log.segment_count());
        assert_eq!(log.first_index(), Some(1));
        assert_eq!(log.last(), Some((60, 3)));
        assert_records(&log, 1, 60, 3);
        assert_eq!(log.read(0).unwrap(), None);
        assert_eq!(log.read(61).unwrap(), None);
        log.sync().unwrap();
    }
    let (log, report) = SegmentLog::open(dir.path(), small()).unwrap();
    assert_eq!(report.records, 60);
    assert_eq!(report.segments, log.segment_count());
    assert_eq!(report.truncated, None);
    assert_records(&log, 1, 60, 3);
    let on_disk: u64 = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert_eq!(log.disk_bytes(), on_disk);
}

#[test]
fn segments_respect_segment_bytes_unless_one_record_is_larger() {
    let backend = MemBackend::new();
    let log = mem_log(&backend);
    log.append(1, 1, &[7; 600]).unwrap();
    log.append(2, 1, b"small").unwrap();
    log.append(3, 1, b"small").unwrap();
    assert_eq!(log.segment_count(), 2);
    assert_eq!(log.read(1).unwrap(), Some((1, vec![7; 600])));
    for name in crate::IoBackend::list(&backend).unwrap() {
        if name != crate::format::segment_name(1) {
            assert!(backend.file_bytes(&name).unwrap().len() as u64 <= small().segment_bytes);
        }
    }
}

#[test]
fn append_batch_spans_rolls_and_reads_back() {
    let backend = MemBackend::new();
    let log = mem_log(&backend);
    let payloads: Vec<Vec<u8>> = (10..40).map(payload).collect();
    let batch: Vec<(u64, u64, &[u8])> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| (10 + i as u64, 2, p.as_slice()))
        .collect();
    log.append_batch(&batch).unwrap();
    assert!(log.segment_count() > 2);
    assert_eq!(log.first_index(), Some(10));
    assert_records(&log, 10, 39, 2);
}

#[test]
fn append_with_a_wrong_index_is_refused_and_changes_nothing() {
    let log = mem_log(&MemBackend::new());
    fill(&log, 1, 3, 1);
    let bytes = log.disk_bytes();
    let err = log.append(5, 1, b"gap").unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::NonContiguous {
                expected: 4,
                got: 5
            }
        ),
        "{err}"
    );
    let err = log.append(3, 1, b"again").unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::NonContiguous {
                expected: 4,
                got: 3
            }
        ),
        "{err}"
    );
    let err = log
        .append_batch(&[(4, 1, b"ok"), (6, 1, b"gap inside the batch")])
        .unwrap_err();
    assert!(
        matches!(
            err,
            StorageError::NonContiguous {
                expected: 5,
                got: 6
            }
        ),
        "{err}"
    );
    assert_eq!(log.last(), Some((3, 1)));
    assert_eq!(log.disk_bytes(), bytes);
    assert_eq!(log.read(4).unwrap(), None);
}

#[test]
fn nothing_follows_the_record_of_the_highest_index() {
    let log = mem_log(&MemBackend::new());
    let err = log
        .append_batch(&[(HIGHEST_INDEX, 1, b"last"), (u64::MAX, 1, b"reserved")])
        .unwrap_err();
    assert!(
        matches!(err, StorageError::IndexSpaceExhausted { got: u64::MAX }),
        "{err}"
    );
    assert_eq!(log.last(), None, "the refused batch changed nothing");
    log.append(HIGHEST_INDEX, 1, b"last").unwrap();
    assert_eq!(log.last(), Some((HIGHEST_INDEX, 1)));
    for got in [u64::MAX, 0] {
        let err = log.append(got, 1, b"after").unwrap_err();
        assert!(
            matches!(err, StorageError::IndexSpaceExhausted { got: g } if g == got),
            "{err}"
        );
    }
    assert_eq!(log.last(), Some((HIGHEST_INDEX, 1)));
}

/// Review s16 storage L5: u64::MAX is reserved (the raft log store's exclusive range end and
/// the supervisor's cut compute `index + 1`), so a log never takes it, even as its first record.
#[test]
fn the_reserved_index_is_refused_and_changes_nothing() {
    let backend = MemBackend::new();
    let log = mem_log(&backend);
    let err = log.append(u64::MAX, 1, b"reserved").unwrap_err();
    assert!(
        matches!(err, StorageError::IndexSpaceExhausted { got: u64::MAX }),
        "{err}"
    );
    assert!(err.to_string().contains("reserved"), "{err}");
    assert_eq!(log.last(), None);
    assert_eq!(log.disk_bytes(), 0);
    assert_eq!(
        backend.list().unwrap(),
        Vec::<String>::new(),
        "no segment was created"
    );
}

#[test]
fn oversize_record_is_refused_and_changes_nothing() {
    let log = mem_log(&MemBackend::new());
    let limit = small().max_record_bytes as usize;
    let err = log.append(1, 1, &vec![0; limit + 1]).unwrap_err();
    assert!(
        matches!(err, StorageError::RecordTooLarge { have, max } if have == limit + 1 && max == 1024)
    );
    assert_eq!(log.last(), None);
    assert_eq!(log.segment_count(), 0);
    log.append(1, 1, &vec![0; limit]).unwrap();
    assert_eq!(log.last(), Some((1, 1)));
}

#[test]
fn invalid_options_are_refused() {
    let opts = LogOptions {
        segment_bytes: 0,
        ..LogOptions::default()
    };
    let err = SegmentLog::open_with_backend(Arc::new(MemBackend::new()), opts).err();
    assert!(matches!(err, Some(StorageError::InvalidOptions { .. })));
}

#[test]
fn truncate_from_then_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (log, _) = SegmentLog::open(dir.path(), small()).unwrap();
        fill(&log, 1, 40, 1);
        let before = log.segment_count();
        log.truncate_from(12).unwrap();
        assert_eq!(log.last(), Some((11, 1)));
        assert_eq!(log.read(12).unwrap(), None);
        assert_eq!(log.term_of(12), None);
        assert!(log.segment_count() < before);
        log.truncate_from(100).unwrap();
        assert_eq!(log.last(), Some((11, 1)));
        fill(&log, 12, 20, 2);
        log.sync().unwrap();
    }
    let (log, report) = SegmentLog::open(dir.path(), small()).unwrap();
    assert_eq!(report.truncated, None);
    assert_eq!(report.records, 20);
    assert_records(&log, 1, 11, 1);
    assert_records(&log, 12, 20, 2);
}

#[test]
fn truncate_from_the_first_index_empties_the_log() {
    let backend = MemBackend::new();
    let log = mem_log(&backend);
    fill(&log, 5, 30, 1);
    log.truncate_from(5).unwrap();
    assert_eq!(log.first_index(), None);
    assert_eq!(log.last(), None);
    assert_eq!(log.segment_count(), 0);
    assert!(crate::IoBackend::list(&backend).unwrap().is_empty());
    log.append(77, 4, b"fresh start").unwrap();
    assert_eq!(log.first_index(), Some(77));
}

#[test]
fn purge_upto_removes_only_whole_segments_then_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let first_after;
    {
        let (log, _) = SegmentLog::open(dir.path(), small()).unwrap();
        fill(&log, 1, 60, 1);
        let segments = log.segment_count();
        log.purge_upto(0).unwrap();
        assert_eq!(log.first_index(), Some(1));
        log.purge_upto(30).unwrap();
        first_after = log.first_index().unwrap();
        assert!(first_after <= 31, "a partial segment was purged");
        assert!(first_after > 1);
        assert!(log.segment_count() < segments);
        assert_eq!(log.read(first_after - 1).unwrap(), None);
        assert_records(&log, first_after, 60, 1);
        log.sync().unwrap();
    }
    let (log, report) = SegmentLog::open(dir.path(), small()).unwrap();
    assert_eq!(report.truncated, None);
    assert_eq!(log.first_index(), Some(first_after));
    assert_records(&log, first_after, 60, 1);
    log.purge_upto(60).unwrap();
    assert_eq!(log.segment_count(), 1, "the segment appends go to stays");
    assert_records(&log, log.first_index().unwrap(), 60, 1);
    log.append(61, 2, b"after a full purge").unwrap();
    assert_eq!(log.last(), Some((61, 2)));
}

/// Three or more sealed segments, all records synced.
fn sealed_log(backend: &MemBackend) -> (SegmentLog, u64) {
    let log = mem_log(backend);
    fill(&log, 1, 60, 1);
    log.sync().unwrap();
    let upto = log.sealed_through(u64::MAX).unwrap();
    assert!(log.segment_count() >= 4, "{}", log.segment_count());
    (log, upto)
}

fn reopened(backend: &MemBackend) -> SegmentLog {
    SegmentLog::open_with_backend(Arc::new(backend.crash()), small())
        .expect("the log reopens contiguous")
        .0
}

#[test]
fn a_failed_unlink_leaves_every_segment_indexed_and_the_next_purge_retries_it() {
    let backend = MemBackend::new();
    let (log, upto) = sealed_log(&backend);
    let segments = log.segment_count();
    backend.set_fail_remove(true);
    assert!(log.purge_upto(upto).is_err());
    assert_eq!(log.segment_count(), segments, "nothing left the index");
    assert_records(&log, 1, 60, 1);
    // Appends go on (the log is not poisoned), and the log still opens whole.
    log.append(61, 1, &payload(61)).unwrap();
    log.sync().unwrap();
    let again = reopened(&backend);
    assert_eq!(again.first_index(), Some(1));
    assert_records(&again, 1, 61, 1);
    backend.set_fail_remove(false);
    assert_eq!(log.purge_upto(upto).unwrap(), segments - 1);
    assert_eq!(log.first_index(), Some(upto + 1));
    let again = reopened(&backend);
    assert_eq!(again.first_index(), Some(upto + 1));
    assert_records(&again, upto + 1, 61, 1);
}

#[test]
fn a_failed_directory_fsync_during_a_purge_poisons_the_log_and_leaves_a_contiguous_suffix() {
    let backend = MemBackend::new();
    let (log, upto) = sealed_log(&backend);
    backend.set_fail_sync(true);
    assert!(log.purge_upto(upto).is_err());
    backend.set_fail_sync(false);
    assert!(matches!(log.purge_upto(upto), Err(StorageError::Poisoned)));
    assert!(matches!(
        log.append(61, 1, &payload(61)),
        Err(StorageError::Poisoned)
    ));
    // The one unlink whose fsync failed may or may not have survived: either way the log
    // reopens contiguous and holds the rest.
    let again = reopened(&backend);
    let first = again.first_index().unwrap();
    assert!(first <= upto, "only the first segment went: {first}");
    assert_records(&again, first, 60, 1);
}

#[test]
fn appends_do_not_wait_for_a_purge_stuck_in_an_unlink_fsync() {
    let backend = MemBackend::new();
    let (log, upto) = sealed_log(&backend);
    let log = Arc::new(log);
    backend.set_hang_sync_dir(true);
    let purging = {
        let log = log.clone();
        std::thread::spawn(move || log.purge_upto(upto))
    };
    // The purge is parked in its first directory fsync (or about to be): appends go on, rolls
    // included (a new segment's name is fsynced by the next `sync`, not by the append).
    fill(&log, 61, 80, 1);
    assert_eq!(log.last(), Some((80, 1)));
    backend.set_hang_sync_dir(false);
    let deleted = purging.join().unwrap().unwrap();
    assert!(deleted >= 3, "{deleted}");
    log.sync().unwrap();
    assert_records(&log, upto + 1, 80, 1);
}

#[test]
fn sealed_through_names_whole_segments_and_never_the_one_appends_go_to() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = SegmentLog::open(dir.path(), small()).unwrap();
    assert_eq!(log.sealed_through(u64::MAX), None);
    fill(&log, 1, 60, 1);
    let segments = log.segment_count();
    assert!(segments >= 3, "{segments}");
    assert_eq!(log.sealed_through(0), None);
    let (last, _) = log.last().unwrap();
    let upto = log.sealed_through(u64::MAX).expect("sealed segments");
    assert!(upto < last, "the last segment is never offered");
    let mid = log
        .sealed_through(30)
        .expect("a sealed segment ends at or below 30");
    assert!((1..=30).contains(&mid));
    assert!(log.purge_upto(mid).unwrap() > 0);
    assert_eq!(log.first_index(), Some(mid + 1));
    let left = log.segment_count();
    assert_eq!(log.purge_upto(upto).unwrap(), left - 1);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.first_index(), Some(upto + 1));
    assert_eq!(log.sealed_through(u64::MAX), None);
}

#[test]
fn sealed_segment_of_names_the_sealed_segment_holding_an_index_and_never_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = SegmentLog::open(dir.path(), small()).unwrap();
    assert_eq!(log.sealed_segment_of(1), None);
    fill(&log, 1, 60, 1);
    let (first, last, bytes) = log
        .sealed_segment_of(1)
        .expect("the first segment is sealed");
    assert_eq!(first, 1);
    assert_eq!(log.sealed_through(last), Some(last), "a whole segment");
    assert_eq!(log.sealed_segment_of(last), Some((first, last, bytes)));
    assert_eq!(bytes, log.sealed_bytes_through(last));
    let next = log.sealed_segment_of(last + 1).map(|s| s.0);
    assert!(next.is_none_or(|n| n == last + 1));
    let (end, _) = log.last().unwrap();
    assert_eq!(log.sealed_segment_of(end), None, "appends go there");
    assert_eq!(log.sealed_segment_of(end + 1), None);
}

#[test]
fn read_verifies_the_crc_of_records_on_disk() {
    let backend = MemBackend::new();
    let log = mem_log(&backend);
    fill(&log, 1, 3, 1);
    let name = crate::format::segment_name(1);
    let mut bytes = backend.file_bytes(&name).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    backend.set_file_bytes(&name, bytes);
    let err = log.read(3).unwrap_err();
    assert!(matches!(err, StorageError::CorruptRecord { .. }), "{err}");
    assert!(err.to_string().contains("crc32c"), "{err}");
}

#[test]
fn readers_see_records_while_a_writer_appends() {
    let log = Arc::new(mem_log(&MemBackend::new()));
    log.append(1, 1, &payload(1)).unwrap();
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut seen = 0;
            while seen < 500 {
                let (_, last) = (0, log.last().map_or(0, |l| l.0));
                for i in 1..=last {
                    assert_eq!(log.read(i).unwrap(), Some((1, payload(i))));
                }
                seen = last;
            }
        })
    };
    for i in 2..=500 {
        log.append(i, 1, &payload(i)).unwrap();
        if i % 50 == 0 {
            log.sync().unwrap();
        }
    }
    reader.join().unwrap();
}
