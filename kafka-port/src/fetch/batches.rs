//! Records written out as uncompressed record batches v2 (magic 2), by hand.
//!
//! Not `kafka-protocol`'s `RecordBatchEncoder`: its records hold their headers in a map, so a
//! record with the same header key twice would come back with one of them. Kafka keeps a
//! record's headers as the list the producer sent, duplicates and order included.

use bytes::{BufMut, Bytes, BytesMut};

use crate::records::Record;

/// What a batch says of its records' producer: a run of records with the same framing shares
/// a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    pub producer_id: i64,
    pub epoch: i16,
    /// Records of a Kafka transaction (attribute bit 4).
    pub transactional: bool,
    /// A transaction's commit or abort marker (attribute bit 5), one to a batch as Kafka
    /// writes them.
    pub control: bool,
}

impl Framing {
    /// Records of no producer: plain queue messages, and a committed transaction's.
    pub const PLAIN: Framing = Framing {
        producer_id: -1,
        epoch: -1,
        transactional: false,
        control: false,
    };

    fn attributes(self) -> i16 {
        // No compression, create time.
        (if self.transactional { 0x10 } else { 0 }) | (if self.control { 0x20 } else { 0 })
    }
}

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

/// One batch of `records` (offset, framing, record), their offsets ascending within an int32
/// of the first, all of the first one's framing.
fn batch(out: &mut BytesMut, records: &[(i64, Framing, Record)]) {
    let Some((base_offset, framing, first)) = records.first() else {
        return;
    };
    let base_ts = first.timestamp;
    let max_ts = records
        .iter()
        .map(|(_, _, r)| r.timestamp)
        .max()
        .unwrap_or(base_ts);
    let last_delta = records.last().map_or(0, |(o, _, _)| o - base_offset);
    let start = out.len();
    out.put_i64(*base_offset);
    out.put_i32(0); // the batch length, set below
    out.put_i32(0); // partition leader epoch
    out.put_u8(2);
    out.put_u32(0); // the CRC, set below
    out.put_i16(framing.attributes());
    out.put_i32(i32::try_from(last_delta).unwrap_or(i32::MAX));
    out.put_i64(base_ts);
    out.put_i64(max_ts);
    out.put_i64(framing.producer_id);
    out.put_i16(framing.epoch);
    // Sequences are not kept past the produce that checked them; consumers do not read them.
    out.put_i32(-1);
    out.put_i32(i32::try_from(records.len()).unwrap_or(i32::MAX));
    debug_assert_eq!(out.len() - start, HEADER_LEN);
    for (offset, _, rec) in records {
        record(out, rec, offset - base_offset, base_ts);
    }
    let length = i32::try_from(out.len() - start - LENGTH_EXCLUDES).unwrap_or(i32::MAX);
    (&mut out[start + 8..start + 12]).put_i32(length);
    let crc = crc32c::crc32c(&out[start + CRC_FROM..]);
    (&mut out[start + CRC_AT..start + CRC_AT + 4]).put_u32(crc);
}

/// `records` (offset, framing, record) as batches. A record's offset is its batch's base offset plus
/// its own offset delta, so ascending offsets with gaps between them (records deleted or
/// expired) share one batch, as Kafka writes a compacted log's: a fresh 61-byte header at
/// every gap would make a fetch of sparse offsets overshoot its `max_bytes` by far more than
/// Kafka's one batch. A new batch starts only where an offset does not ascend, or where its
/// delta from the base would not fit the int32 the format holds it in, where the framing
/// changes, and around every control record.
pub fn encode(records: &[(i64, Framing, Record)]) -> Bytes {
    let mut out = BytesMut::new();
    let mut from = 0;
    for i in 1..=records.len() {
        let (_, before, _) = records[i - 1];
        let ends = records.get(i).is_none_or(|(o, framing, _)| {
            *o <= records[i - 1].0
                || *framing != before
                || before.control
                || o.checked_sub(records[from].0)
                    .is_none_or(|delta| delta > i64::from(i32::MAX))
        });
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

    fn plain(records: &[(i64, Record)]) -> Bytes {
        let framed: Vec<_> = records
            .iter()
            .map(|(o, r)| (*o, Framing::PLAIN, r.clone()))
            .collect();
        encode(&framed)
    }

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
        let out = plain(&[(7, rec(100, headers)), (8, rec(90, &[]))]);
        let batches = decode_batches(out, &mut Budget::new(1 << 20, 100)).unwrap();
        assert_eq!(batches.len(), 1);
        let got = &batches[0].records;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], rec(100, headers));
        assert_eq!(got[1], rec(90, &[]));
    }

    #[test]
    fn offsets_that_do_not_ascend_start_a_new_batch() {
        let out = plain(&[
            (5, rec(1, &[])),
            (6, rec(2, &[])),
            (9, rec(3, &[])),
            (3, rec(4, &[])),
            (3, rec(5, &[])),
        ]);
        // Our own decoder reads produced batches, whose offsets Kafka requires consecutive.
        assert_eq!(
            read_back(out.clone()),
            [vec![(5, 1), (6, 2), (9, 3)], vec![(3, 4)], vec![(3, 5)]]
        );
        assert_eq!(bytes::Buf::get_i64(&mut &out[..8]), 5);
    }

    /// Offsets and timestamps as an independent reader (kafka-protocol's decoder) sees them.
    fn read_back(out: Bytes) -> Vec<Vec<(i64, i64)>> {
        let mut buf = out;
        let mut batches = Vec::new();
        while bytes::Buf::has_remaining(&buf) {
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).unwrap();
            batches.push(
                set.records
                    .iter()
                    .map(|r| (r.offset, r.timestamp))
                    .collect(),
            );
        }
        batches
    }

    #[test]
    fn offsets_with_gaps_share_one_batch_with_their_deltas() {
        let out = plain(&[(5, rec(10, &[])), (7, rec(30, &[])), (9, rec(20, &[]))]);
        assert_eq!(read_back(out.clone()), [vec![(5, 10), (7, 30), (9, 20)]]);
        // lastOffsetDelta = 9 - 5, maxTimestamp = 30, three records, in the one header.
        assert_eq!(bytes::Buf::get_i32(&mut &out[23..27]), 4);
        assert_eq!(bytes::Buf::get_i64(&mut &out[35..43]), 30);
        assert_eq!(bytes::Buf::get_i32(&mut &out[57..61]), 3);
    }

    #[test]
    fn timestamp_deltas_wrap_as_kafka_reads_them() {
        // i64::MAX - i64::MIN does not fit an i64: the delta wraps, and readers wrap it back.
        let records = [(0, rec(i64::MIN, &[])), (1, rec(i64::MAX, &[]))];
        let batches = decode_batches(plain(&records), &mut Budget::new(1 << 20, 100)).unwrap();
        let got: Vec<_> = batches[0].records.iter().map(|r| r.timestamp).collect();
        assert_eq!(got, [i64::MIN, i64::MAX]);
    }

    #[test]
    fn a_delta_beyond_int32_starts_a_new_batch() {
        let far = 5 + i64::from(i32::MAX) + 1;
        let out = plain(&[(5, rec(1, &[])), (far, rec(2, &[])), (far + 1, rec(3, &[]))]);
        assert_eq!(read_back(out), [vec![(5, 1)], vec![(far, 2), (far + 1, 3)]]);
    }

    #[test]
    fn nothing_is_no_bytes() {
        assert!(plain(&[]).is_empty());
    }
}
