//! Records written out as uncompressed record batches v2 (magic 2), by hand.
//!
//! Not `kafka-protocol`'s `RecordBatchEncoder`: its records hold their headers in a map, so a
//! record with the same header key twice would come back with one of them. Kafka keeps a
//! record's headers as the list the producer sent, duplicates and order included.

use bytes::{BufMut, Bytes, BytesMut};

use crate::records::Record;

/// A batch's fixed part before its records: base offset .. record count.
const HEADER_LEN: usize = 61;
/// The bytes of the header the batch length does not count (base offset, the length itself).
const LENGTH_EXCLUDES: usize = 12;
/// Where the CRC-covered part starts (the attributes), and where the CRC sits.
const CRC_FROM: usize = 21;
const CRC_AT: usize = 17;

pub(crate) fn zigzag(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

pub(crate) fn nullable(out: &mut BytesMut, v: Option<&[u8]>) {
    match v {
        None => zigzag(out, -1),
        Some(v) => {
            zigzag(out, v.len() as i64);
            out.put_slice(v);
        }
    }
}

/// One record, its deltas taken from the batch's base offset and base timestamp.
fn record(out: &mut BytesMut, rec: &Record, offset_delta: i64, base_ts: i64) {
    let mut body = BytesMut::new();
    body.put_i8(0);
    zigzag(&mut body, rec.timestamp.wrapping_sub(base_ts));
    zigzag(&mut body, offset_delta);
    nullable(&mut body, rec.key.as_deref());
    nullable(&mut body, rec.value.as_deref());
    zigzag(&mut body, rec.headers.len() as i64);
    for (name, value) in &rec.headers {
        nullable(&mut body, Some(name.as_bytes()));
        nullable(&mut body, value.as_deref());
    }
    zigzag(out, body.len() as i64);
    out.put_slice(&body);
}

/// One batch of `records` (offset, record), their offsets consecutive.
fn batch(out: &mut BytesMut, records: &[(i64, Record)]) {
    let Some((base_offset, first)) = records.first() else {
        return;
    };
    let base_ts = first.timestamp;
    let max_ts = records
        .iter()
        .map(|(_, r)| r.timestamp)
        .max()
        .unwrap_or(base_ts);
    let last_delta = records.last().map_or(0, |(o, _)| o - base_offset);
    let start = out.len();
    out.put_i64(*base_offset);
    out.put_i32(0); // the batch length, set below
    out.put_i32(0); // partition leader epoch
    out.put_u8(2);
    out.put_u32(0); // the CRC, set below
    out.put_i16(0); // attributes: no compression, create time, not transactional
    out.put_i32(i32::try_from(last_delta).unwrap_or(i32::MAX));
    out.put_i64(base_ts);
    out.put_i64(max_ts);
    out.put_i64(-1); // producer id
    out.put_i16(-1); // producer epoch
    out.put_i32(-1); // base sequence
    out.put_i32(i32::try_from(records.len()).unwrap_or(i32::MAX));
    debug_assert_eq!(out.len() - start, HEADER_LEN);
    for (offset, rec) in records {
        record(out, rec, offset - base_offset, base_ts);
    }
    let length = i32::try_from(out.len() - start - LENGTH_EXCLUDES).unwrap_or(i32::MAX);
    (&mut out[start + 8..start + 12]).put_i32(length);
    let crc = crc32c::crc32c(&out[start + CRC_FROM..]);
    (&mut out[start + CRC_AT..start + CRC_AT + 4]).put_u32(crc);
}

/// `records` (offset, record) as batches: a new batch wherever an offset is not the one
/// after the last (a batch's offsets are its base plus the record's index).
pub fn encode(records: &[(i64, Record)]) -> Bytes {
    let mut out = BytesMut::new();
    let mut from = 0;
    for i in 1..=records.len() {
        let ends = records
            .get(i)
            .is_none_or(|(o, _)| Some(*o) != records[i - 1].0.checked_add(1));
        if ends {
            batch(&mut out, &records[from..i]);
            from = i;
        }
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{decode_batches, Budget};

    fn rec(ts: i64, headers: &[(&str, Option<&[u8]>)]) -> Record {
        Record {
            timestamp: ts,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(Bytes::copy_from_slice)))
                .collect(),
        }
    }

    #[test]
    fn duplicate_header_keys_and_their_order_come_back() {
        let headers: &[(&str, Option<&[u8]>)] = &[
            ("a", Some(b"1")),
            ("b", None),
            ("a", Some(b"2")),
            ("a", Some(b"")),
        ];
        let out = encode(&[(7, rec(100, headers)), (8, rec(90, &[]))]);
        let batches = decode_batches(out, &mut Budget::new(1 << 20, 100)).unwrap();
        assert_eq!(batches.len(), 1);
        let got = &batches[0].records;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], rec(100, headers));
        assert_eq!(got[1], rec(90, &[]));
    }

    #[test]
    fn offsets_that_do_not_follow_start_a_new_batch() {
        let out = encode(&[
            (5, rec(1, &[])),
            (6, rec(2, &[])),
            (9, rec(3, &[])),
            (3, rec(4, &[])),
        ]);
        let batches = decode_batches(out.clone(), &mut Budget::new(1 << 20, 100)).unwrap();
        let counts: Vec<_> = batches.iter().map(|b| b.records.len()).collect();
        assert_eq!(counts, [2, 1, 1]);
        assert_eq!(bytes::Buf::get_i64(&mut &out[..8]), 5);
    }

    #[test]
    fn nothing_is_no_bytes() {
        assert!(encode(&[]).is_empty());
    }
}
