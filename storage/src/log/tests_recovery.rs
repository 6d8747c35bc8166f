//! Recovery over real files: every way a tail can be torn is cut, reported, and leaves the
//! records before it readable; damage anywhere else refuses to open unless the loss is
//! accepted, and then the cut reports exactly what it dropped.

use std::fs;
use std::path::{Path, PathBuf};

use super::tests::{assert_records, fill, small};
use crate::format::{encode_header, encode_record, le_u32, segment_name, SEGMENT_HEADER_LEN};
use crate::{LogLoss, LogOptions, SegmentLog, StorageError, TornTail, HIGHEST_INDEX};

const RECORDS: u64 = 20;

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "qlog"))
        .collect();
    v.sort();
    v
}

/// A synced log of records 1..=RECORDS over several segments.
fn written() -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = SegmentLog::open(dir.path(), small()).unwrap();
    fill(&log, 1, RECORDS, 1);
    log.sync().unwrap();
    let segs = segments(dir.path());
    assert!(segs.len() >= 3);
    (dir, segs)
}

fn record_offsets(bytes: &[u8]) -> Vec<u64> {
    let mut offsets = Vec::new();
    let mut off = SEGMENT_HEADER_LEN as usize;
    while off < bytes.len() {
        offsets.push(off as u64);
        off += 4 + le_u32(&bytes[off..]) as usize;
    }
    offsets
}

/// Rewrites a segment and returns the offset of its last record and the file length.
fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>, usize)) -> (u64, u64) {
    let mut bytes = fs::read(path).unwrap();
    let last = *record_offsets(&bytes).last().unwrap();
    let len = bytes.len() as u64;
    f(&mut bytes, last as usize);
    fs::write(path, bytes).unwrap();
    (last, len)
}

fn reopen(dir: &Path) -> (SegmentLog, Option<TornTail>) {
    let (log, report) = SegmentLog::open(dir, small()).unwrap();
    assert_eq!(report.records, log.last().map_or(0, |l| l.0));
    (log, report.truncated)
}

fn assert_cut_of_last_record(dir: &Path, seg: &Path, offset: u64, cut: u64, reason: &str) {
    let (log, torn) = reopen(dir);
    let torn = torn.expect("a cut");
    assert_eq!(torn.segment, seg);
    assert_eq!(torn.offset, offset);
    assert_eq!(torn.cut_bytes, cut);
    assert!(torn.reason.contains(reason), "{}", torn.reason);
    assert_eq!(fs::metadata(seg).unwrap().len(), offset);
    assert_eq!(log.last(), Some((RECORDS - 1, 1)));
    assert_records(&log, 1, RECORDS - 1, 1);
    log.append(RECORDS, 5, b"rewritten").unwrap();
    assert_eq!(log.read(RECORDS).unwrap(), Some((5, b"rewritten".to_vec())));
    drop(log);
    assert_eq!(reopen(dir).1, None, "a second open finds nothing to cut");
}

#[test]
fn torn_tail_mid_record_is_cut_and_reported() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let (last, len) = edit(seg, |b, _| b.truncate(b.len() - 5));
    assert_cut_of_last_record(dir.path(), seg, last, len - 5 - last, "past the end");
}

#[test]
fn partial_length_prefix_is_cut() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let (last, _) = edit(seg, |b, at| b.truncate(at + 2));
    assert_cut_of_last_record(dir.path(), seg, last, 2, "only 2 of the 4 bytes");
}

#[test]
fn flipped_byte_in_the_last_record_is_cut() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let (last, len) = edit(seg, |b, _| {
        let end = b.len() - 1;
        b[end] ^= 0x01;
    });
    assert_cut_of_last_record(dir.path(), seg, last, len - last, "crc32c");
}

#[test]
fn undersize_length_prefix_on_disk_is_cut() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let (last, len) = edit(seg, |b, at| {
        b[at..at + 4].copy_from_slice(&3u32.to_le_bytes())
    });
    assert_cut_of_last_record(dir.path(), seg, last, len - last, "below the minimum");
}

#[test]
fn oversize_length_prefix_on_disk_is_cut() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let too_big = small().max_record_bytes + 20 + 1;
    let (last, len) = edit(seg, |b, at| {
        b[at..at + 4].copy_from_slice(&too_big.to_le_bytes())
    });
    assert_cut_of_last_record(dir.path(), seg, last, len - last, "max_record_bytes");
}

#[test]
fn length_prefix_past_eof_is_cut() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let (last, len) = edit(seg, |b, at| {
        let longer = le_u32(&b[at..]) + 50;
        b[at..at + 4].copy_from_slice(&longer.to_le_bytes());
    });
    assert_cut_of_last_record(dir.path(), seg, last, len - last, "past the end");
}

#[test]
fn record_out_of_sequence_is_cut() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let (last, len) = edit(seg, |b, at| {
        b[at + 8..at + 16].copy_from_slice(&999u64.to_le_bytes());
        let crc = crc32c::crc32c(&b[at + 8..]);
        b[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
    });
    assert_cut_of_last_record(dir.path(), seg, last, len - last, "index 999");
}

#[test]
fn zeroed_tail_is_cut() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let len = fs::metadata(seg).unwrap().len();
    edit(seg, |b, _| b.extend_from_slice(&[0; 100]));
    let (log, torn) = reopen(dir.path());
    let torn = torn.unwrap();
    assert_eq!((torn.offset, torn.cut_bytes), (len, 100));
    assert_records(&log, 1, RECORDS, 1);
}

fn accepting() -> LogOptions {
    LogOptions {
        accept_data_loss: true,
        ..small()
    }
}

/// Opening refuses with `DataLoss` and leaves every file as it was.
fn assert_refused(dir: &Path, opts: LogOptions) -> LogLoss {
    let before: Vec<(PathBuf, Vec<u8>)> = segments(dir)
        .into_iter()
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    let err = SegmentLog::open(dir, opts).err().expect("a refusal");
    let StorageError::DataLoss(loss) = err else {
        panic!("expected DataLoss, got {err}");
    };
    let after: Vec<(PathBuf, Vec<u8>)> = segments(dir)
        .into_iter()
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    assert!(before == after, "a refusal must not change the disk");
    *loss
}

#[test]
fn corruption_in_an_early_segment_refuses_then_cuts_every_later_one_if_accepted() {
    let (dir, segs) = written();
    let later: u64 = segs[1..]
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .sum();
    let (last, len) = edit(&segs[0], |b, at| b[at + 20] ^= 0xff);
    let loss = assert_refused(dir.path(), small());
    assert_eq!((loss.segment.clone(), loss.offset), (segs[0].clone(), last));
    assert_eq!(loss.bytes, len - last + later);
    assert_eq!(loss.last_index, RECORDS);
    assert!(
        loss.readable_records >= RECORDS - loss.first_index,
        "{loss}"
    );
    let message = StorageError::DataLoss(Box::new(loss.clone())).to_string();
    assert!(
        message.contains(&segs[0].display().to_string()),
        "{message}"
    );
    assert!(message.contains(&format!("offset {last}")), "{message}");
    assert!(message.contains("accept_data_loss"), "{message}");

    let (log, report) = SegmentLog::open(dir.path(), accepting()).unwrap();
    let torn = report.truncated.unwrap();
    assert_eq!(torn.segment, segs[0]);
    assert_eq!(torn.offset, last);
    assert_eq!(torn.cut_bytes, len - last + later);
    assert_eq!(torn.accepted_loss.as_ref(), Some(&loss));
    assert_eq!(segments(dir.path()), vec![segs[0].clone()]);
    let (kept, _) = log.last().unwrap();
    assert_eq!(kept + 1, loss.first_index);
    assert_records(&log, 1, kept, 1);
}

/// A byte flipped in each field of a record of a sealed segment, and in its header.
#[test]
fn a_flipped_byte_in_any_field_of_a_sealed_segment_refuses() {
    // (offset in the record, or None for the segment header byte, what it hits)
    let cases: [(Option<usize>, &str); 7] = [
        (Some(0), "length"),
        (Some(2), "length high byte"),
        (Some(5), "crc"),
        (Some(9), "index"),
        (Some(17), "term"),
        (Some(26), "payload"),
        (None, "header magic"),
    ];
    for (at, what) in cases {
        let (dir, segs) = written();
        let seg = &segs[1];
        let bytes = fs::read(seg).unwrap();
        let first = record_offsets(&bytes)[0];
        let (flip, offset) = match at {
            Some(k) => (first as usize + k, first),
            None => (0, 0),
        };
        let mut damaged = bytes.clone();
        damaged[flip] ^= 0x10;
        fs::write(seg, &damaged).unwrap();
        let loss = assert_refused(dir.path(), small());
        assert_eq!(
            (&loss.segment, loss.offset),
            (seg, offset),
            "{what}: {loss}"
        );
        let (log, report) = SegmentLog::open(dir.path(), accepting()).unwrap();
        assert!(report.truncated.unwrap().accepted_loss.is_some(), "{what}");
        assert_eq!(
            log.last().map(|l| l.0 + 1),
            Some(loss.first_index),
            "{what}"
        );
    }
}

#[test]
fn damage_in_the_middle_of_the_last_segment_refuses_only_at_or_below_the_durable_index() {
    let opts = LogOptions {
        segment_bytes: 1 << 20,
        ..small()
    };
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = SegmentLog::open(dir.path(), opts).unwrap();
    fill(&log, 1, RECORDS, 1);
    log.sync().unwrap();
    drop(log);
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = fs::read(&seg).unwrap();
    let at = record_offsets(&bytes)[5] as usize;
    bytes[at + 30] ^= 1;
    fs::write(&seg, &bytes).unwrap();
    // Acknowledged as durable: valid records after the damage do not make it a torn write.
    let durable = LogOptions {
        durable_through: 6,
        ..opts
    };
    let loss = assert_refused(dir.path(), durable);
    assert_eq!((loss.offset, loss.first_index), (at as u64, 6));
    assert_eq!(
        (loss.readable_records, loss.last_index),
        (RECORDS - 6, RECORDS)
    );
    // Past the durable point, unsynced pages of the last segment may reach the disk out of
    // order after a power cut: cut there, even with valid records behind the damage.
    let durable = LogOptions {
        durable_through: 5,
        ..opts
    };
    let (log, torn) = SegmentLog::open(dir.path(), durable).unwrap();
    assert_eq!(torn.truncated.map(|t| t.offset), Some(at as u64));
    assert_eq!(log.last().map(|l| l.0), Some(5));
}

#[test]
fn a_torn_tail_at_or_below_the_durable_index_refuses() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let (last, len) = edit(seg, |b, _| b.truncate(b.len() - 5));
    let durable = LogOptions {
        durable_through: RECORDS,
        ..small()
    };
    let loss = assert_refused(dir.path(), durable);
    assert_eq!(
        (&loss.segment, loss.offset, loss.first_index),
        (seg, last, RECORDS)
    );
    assert_eq!(loss.bytes, len - 5 - last);
    // Just below the damaged record it is an ordinary torn tail again.
    let below = LogOptions {
        durable_through: RECORDS - 1,
        ..small()
    };
    let (log, report) = SegmentLog::open(dir.path(), below).unwrap();
    assert_eq!(report.truncated.unwrap().accepted_loss, None);
    assert_eq!(log.last(), Some((RECORDS - 1, 1)));
}

#[test]
fn a_log_ending_below_the_durable_index_refuses() {
    let (dir, segs) = written();
    fs::remove_file(segs.last().unwrap()).unwrap();
    let durable = LogOptions {
        durable_through: RECORDS,
        ..small()
    };
    let loss = assert_refused(dir.path(), durable);
    assert_eq!(loss.last_index, RECORDS);
    assert!(loss.reason.contains("missing"), "{loss}");
    let accepted = LogOptions {
        accept_data_loss: true,
        ..durable
    };
    let (log, report) = SegmentLog::open(dir.path(), accepted).unwrap();
    assert_eq!(report.truncated, None);
    assert_eq!(log.last().map(|l| l.0 + 1), Some(loss.first_index));
}

#[test]
fn torn_segment_header_is_removed() {
    let (dir, segs) = written();
    let torn_seg = dir.path().join(crate::format::segment_name(RECORDS + 1));
    fs::write(&torn_seg, b"QSEG\x01\0\0").unwrap();
    let (log, torn) = reopen(dir.path());
    let torn = torn.unwrap();
    assert_eq!(
        (torn.segment, torn.offset, torn.cut_bytes),
        (torn_seg.clone(), 0, 7)
    );
    assert!(!torn_seg.exists());
    assert_eq!(segments(dir.path()), segs);
    assert_records(&log, 1, RECORDS, 1);
}

#[test]
fn a_missing_middle_segment_refuses_then_cuts_the_log_there_if_accepted() {
    let (dir, segs) = written();
    fs::remove_file(&segs[1]).unwrap();
    let loss = assert_refused(dir.path(), small());
    assert_eq!((loss.segment.clone(), loss.offset), (segs[2].clone(), 0));
    assert!(loss.reason.contains("previous one"), "{}", loss.reason);
    let (log, report) = SegmentLog::open(dir.path(), accepting()).unwrap();
    assert!(report.truncated.unwrap().accepted_loss.is_some());
    assert_eq!(segments(dir.path()), vec![segs[0].clone()]);
    let (kept, _) = log.last().unwrap();
    assert_records(&log, 1, kept, 1);
}

#[test]
fn unsupported_version_is_an_error_not_a_cut() {
    let (dir, segs) = written();
    let seg = segs.last().unwrap();
    let (_, len) = edit(seg, |b, _| b[4] = 2);
    let err = SegmentLog::open(dir.path(), small()).err().unwrap();
    assert!(
        matches!(&err, StorageError::UnsupportedVersion { version: 2, path, .. } if path == seg),
        "{err}"
    );
    assert_eq!(fs::metadata(seg).unwrap().len(), len);
}

#[test]
fn foreign_files_are_left_alone() {
    let (dir, _) = written();
    fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
    let (log, torn) = reopen(dir.path());
    assert_eq!(torn, None);
    assert_records(&log, 1, RECORDS, 1);
    assert!(dir.path().join("notes.txt").exists());
}

#[test]
fn bytes_after_the_record_holding_the_highest_index_are_a_tail_not_a_wrapped_index() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = SegmentLog::open(dir.path(), small()).unwrap();
    log.append(HIGHEST_INDEX, 1, b"last").unwrap();
    log.sync().unwrap();
    drop(log);
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = fs::read(&seg).unwrap();
    let whole = bytes.len() as u64;
    // A copy of the record after it: the scan used to wrap and expect index 0 next.
    let record = bytes[SEGMENT_HEADER_LEN as usize..].to_vec();
    bytes.extend_from_slice(&record);
    fs::write(&seg, bytes).unwrap();
    let (log, report) = SegmentLog::open(dir.path(), small()).unwrap();
    assert_eq!(log.last(), Some((HIGHEST_INDEX, 1)));
    let torn = report.truncated.expect("the bytes after it are cut");
    assert!(torn.reason.contains("highest index"), "{}", torn.reason);
    assert_eq!(fs::metadata(&seg).unwrap().len(), whole);
}

/// Review s16 storage L4: the contiguity check computed `last + 1` on the record of the highest
/// index (a panic in a debug build, a refusal naming the wrong range in a release one).
#[test]
fn a_segment_file_after_the_highest_index_refuses_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = encode_header(HIGHEST_INDEX).to_vec();
    encode_record(&mut first, HIGHEST_INDEX, 1, b"last");
    fs::write(dir.path().join(segment_name(HIGHEST_INDEX)), first).unwrap();
    let mut after = encode_header(u64::MAX).to_vec();
    encode_record(&mut after, u64::MAX, 1, b"after last");
    let after_path = dir.path().join(segment_name(u64::MAX));
    fs::write(&after_path, after).unwrap();

    let loss = assert_refused(dir.path(), small());
    assert_eq!((loss.segment.clone(), loss.offset), (after_path.clone(), 0));
    assert!(
        loss.reason.contains("highest index") && loss.reason.contains(&segment_name(u64::MAX)),
        "{}",
        loss.reason
    );
    let (log, report) = SegmentLog::open(dir.path(), accepting()).unwrap();
    assert!(report.truncated.unwrap().accepted_loss.is_some());
    assert!(
        !after_path.exists(),
        "the file after the highest index is cut"
    );
    assert_eq!(log.last(), Some((HIGHEST_INDEX, 1)));
}

/// Review s17 S1: the test above is refused by the file-name rule (seg-MAX claims the reserved
/// index) before the contiguity check matters. Here the file after the highest record is named
/// within range (seg-HIGHEST after a segment ending at HIGHEST), so only the checked contiguity
/// check can name it: `last + 1` said "segment starts at index …".
#[test]
fn a_file_named_in_range_after_the_highest_record_refuses_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = encode_header(HIGHEST_INDEX - 1).to_vec();
    encode_record(&mut first, HIGHEST_INDEX - 1, 1, b"next to last");
    encode_record(&mut first, HIGHEST_INDEX, 1, b"last");
    fs::write(dir.path().join(segment_name(HIGHEST_INDEX - 1)), first).unwrap();
    let mut after = encode_header(HIGHEST_INDEX).to_vec();
    encode_record(&mut after, HIGHEST_INDEX, 1, b"after last");
    let after_path = dir.path().join(segment_name(HIGHEST_INDEX));
    fs::write(&after_path, after).unwrap();

    let loss = assert_refused(dir.path(), small());
    assert_eq!((loss.segment.clone(), loss.offset), (after_path.clone(), 0));
    let expected = format!(
        "segment file {} follows the record of index {HIGHEST_INDEX}",
        after_path.display()
    );
    assert!(loss.reason.contains(&expected), "{}", loss.reason);
    let (log, report) = SegmentLog::open(dir.path(), accepting()).unwrap();
    assert!(report.truncated.unwrap().accepted_loss.is_some());
    assert!(
        !after_path.exists(),
        "the file after the highest record is cut"
    );
    assert_eq!(log.last(), Some((HIGHEST_INDEX, 1)));
}

/// Review s16 storage L5: a stored record claiming the reserved index u64::MAX is damage like any
/// record out of the run: cut at the end of the log, refused when valid records follow it.
#[test]
fn a_record_claiming_the_reserved_index_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = encode_header(HIGHEST_INDEX).to_vec();
    encode_record(&mut bytes, HIGHEST_INDEX, 1, b"last");
    let whole = bytes.len() as u64;
    encode_record(&mut bytes, u64::MAX, 1, b"reserved");
    let seg = dir.path().join(segment_name(HIGHEST_INDEX));
    fs::write(&seg, &bytes).unwrap();
    let (log, report) = SegmentLog::open(dir.path(), small()).unwrap();
    assert_eq!(log.last(), Some((HIGHEST_INDEX, 1)));
    let torn = report.truncated.expect("the reserved record is cut");
    assert!(torn.reason.contains("reserved"), "{}", torn.reason);
    assert_eq!(fs::metadata(&seg).unwrap().len(), whole);
    drop(log);

    // The same record with a later file after it, named after the reserved index: no write of
    // this log made that file (its record is no more valid than the one cut above), so the
    // start is refused at the reserved record.
    fs::write(&seg, &bytes).unwrap();
    let mut later = encode_header(u64::MAX).to_vec();
    encode_record(&mut later, u64::MAX, 1, b"after");
    fs::write(dir.path().join(segment_name(u64::MAX)), later).unwrap();
    let loss = assert_refused(dir.path(), small());
    assert_eq!((loss.segment, loss.offset), (seg, whole));
    assert!(loss.reason.contains("reserved"), "{}", loss.reason);
}
