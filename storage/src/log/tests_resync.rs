//! Resync past damage stays cheap on a large file: CRCs are computed for real records, not for
//! every byte offset whose bytes happen to look like a length and an index.

use std::io::Write;

use super::resync::CANDIDATE_CRCS;
use super::scan::WINDOW_READS;
use crate::format::{encode_header, encode_record, segment_name, SEGMENT_HEADER_LEN};
use crate::{LogOptions, SegmentLog, StorageError};

/// Payloads of little-endian u64 counters, like the ids and offsets of engine entries: at
/// almost every 8-byte step their bytes read as a length prefix of a few kilobytes followed
/// by an index in range, which made the old resync CRC kilobytes at each of them.
fn counters(record: u64, words: u64) -> Vec<u8> {
    (0..words)
        .flat_map(|w| (record % 7 + w).to_le_bytes())
        .collect()
}

#[test]
fn a_256_mib_damaged_segment_resyncs_with_one_crc_per_record() {
    const FILE_BYTES: u64 = 256 << 20;
    const WORDS: u64 = 8 * 1024; // 64 KiB payloads
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(segment_name(1));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    out.write_all(&encode_header(1)).unwrap();
    let mut written = SEGMENT_HEADER_LEN;
    let mut offsets = Vec::new();
    let mut buf = Vec::new();
    let mut index = 1;
    while written < FILE_BYTES {
        buf.clear();
        encode_record(&mut buf, index, 3, &counters(index, WORDS));
        out.write_all(&buf).unwrap();
        offsets.push(written);
        written += buf.len() as u64;
        index += 1;
    }
    out.flush().unwrap();
    drop(out);
    let records = index - 1;
    let damaged = records / 2;
    let mut bytes = std::fs::read(&path).unwrap();
    // A flipped byte in the payload of one record in the middle.
    bytes[offsets[damaged as usize - 1] as usize + 5000] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    drop(bytes);

    CANDIDATE_CRCS.with(|c| c.set(0));
    let opts = LogOptions {
        durable_through: records,
        ..LogOptions::default()
    };
    let Err(StorageError::DataLoss(loss)) = SegmentLog::open(dir.path(), opts) else {
        panic!("damage below the durable point must refuse");
    };
    let crcs = CANDIDATE_CRCS.with(|c| c.get());
    let past = records - damaged;
    assert_eq!(loss.first_index, damaged);
    assert_eq!(loss.readable_records, past, "{loss}");
    assert_eq!(loss.last_index, records);
    // Every record past the damage is CRC'd once; a few look-alikes may cost one more each.
    assert!(
        crcs <= past + 16,
        "{crcs} candidate CRCs for {past} records past the damage"
    );
}

/// Zeroed blocks after a power cut are the usual look of damage: no offset in them is a
/// plausible header, and the scan over them must read the file a window at a time, not issue
/// one small read per byte offset (that took minutes on a large segment).
#[test]
fn a_zeroed_stretch_is_scanned_a_window_at_a_time() {
    const FILE_BYTES: usize = 32 << 20;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(segment_name(1));
    let mut bytes = encode_header(1).to_vec();
    let mut index = 1;
    while bytes.len() < 64 * 1024 {
        encode_record(&mut bytes, index, 1, &counters(index, 64));
        index += 1;
    }
    let records = index - 1;
    let damage_at = bytes.len();
    // A later record is written past the zeroes (record `records + 1` is lost in them), so
    // the scan must cross them to find it.
    bytes.resize(FILE_BYTES, 0);
    let mut tail = Vec::new();
    encode_record(&mut tail, records + 2, 1, &counters(records + 2, 64));
    bytes.extend_from_slice(&tail);
    std::fs::write(&path, &bytes).unwrap();

    WINDOW_READS.with(|c| c.set(0));
    let opts = LogOptions {
        durable_through: records + 2,
        ..LogOptions::default()
    };
    let Err(StorageError::DataLoss(loss)) = SegmentLog::open(dir.path(), opts) else {
        panic!("damage below the durable point must refuse");
    };
    let reads = WINDOW_READS.with(|c| c.get());
    assert_eq!(loss.first_index, records + 1, "{loss}");
    assert_eq!(loss.readable_records, 1, "{loss}");
    assert!(damage_at < FILE_BYTES);
    // 32 MiB in 1 MiB windows, plus a few look-aheads and the head of the file.
    assert!(reads <= 64, "{reads} reads to scan {FILE_BYTES} bytes");
}
