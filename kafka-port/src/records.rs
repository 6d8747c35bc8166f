//! Record batches (magic v2) as a Produce request carries them, decoded with every count and
//! length checked against the bytes that are really there.
//!
//! Not `kafka-protocol`'s `RecordBatchDecoder`: it reserves room for the batch's claimed
//! record count and header counts before reading them, and decompresses without a bound.

use bytes::Bytes;

use crate::codecs::{self, Codec, CodecError};
use crate::wire::{Malformed, Reader};

/// The fixed part of a v2 batch after `baseOffset` and `batchLength`.
const HEADER_AFTER_LENGTH: usize = 4 + 1 + 4 + 2 + 4 + 8 + 8 + 8 + 2 + 4 + 4;
/// The fewest bytes one record takes: length, attributes, timestamp and offset deltas, key
/// and value lengths, header count (one byte each).
const MIN_RECORD_BYTES: usize = 7;

/// One record, as the engine will keep it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Milliseconds since the epoch (CreateTime, or the batch's LogAppendTime).
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// One decoded batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    /// The last record's offset delta: the batch's sequences are `base_sequence` plus up to it.
    pub last_offset_delta: i32,
    pub transactional: bool,
    pub control: bool,
    /// The batch's size on the wire, its offset and length fields included (Kafka's
    /// `sizeInBytes`, compressed as sent): what a topic's `max.message.bytes` bounds.
    pub wire_bytes: usize,
    pub records: Vec<Record>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("record batch magic {0} is not supported (only v2)")]
    Magic(i8),
    #[error("record batch CRC mismatch")]
    Crc,
    #[error("unknown compression codec in attributes {0:#x}")]
    Codec(i16),
    #[error(transparent)]
    Decompress(#[from] CodecError),
    #[error("more records than one request may carry (max_push_items)")]
    TooManyRecords,
    /// Kafka's LogValidator: "Inconsistent batch offset range" (INVALID_RECORD). The last
    /// offset delta sets the batch's sequence range, so it must agree with the records.
    #[error("last offset delta {delta} does not match {count} records")]
    OffsetRange { delta: i32, count: usize },
}

/// What the rest of a request may still produce: decompressed bytes and records. Charged
/// from each batch's header before its records are decoded, so a batch of two million empty
/// records is refused before two million records are built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub bytes: usize,
    pub records: usize,
}

impl Budget {
    pub fn new(bytes: usize, records: usize) -> Budget {
        Budget { bytes, records }
    }
}

/// Every batch of a partition's `records` bytes. `budget` is what decompression may still
/// produce for the whole request; it shrinks by each batch's decompressed size.
pub fn decode_batches(data: Bytes, budget: &mut Budget) -> Result<Vec<Batch>, BatchError> {
    let mut r = Reader::new(data, false);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        out.push(decode_batch(&mut r, budget)?);
    }
    Ok(out)
}

fn decode_batch(r: &mut Reader, budget: &mut Budget) -> Result<Batch, BatchError> {
    let _base_offset = r.i64()?;
    let len = r.i32()?;
    let len = usize::try_from(len).map_err(|_| Malformed("negative batch length"))?;
    if len < HEADER_AFTER_LENGTH {
        return Err(Malformed("batch shorter than its header").into());
    }
    // The base offset and the length field come before what the length counts.
    let wire_bytes = len.saturating_add(12);
    let mut b = Reader::new(r.take(len)?, false);
    let _leader_epoch = b.i32()?;
    let magic = b.i8()?;
    if magic != 2 {
        return Err(BatchError::Magic(magic));
    }
    let crc = b.i32()? as u32;
    let rest = b.take(b.remaining())?;
    if crc32c::crc32c(&rest) != crc {
        return Err(BatchError::Crc);
    }
    let mut b = Reader::new(rest, false);
    let attributes = b.i16()?;
    let codec = Codec::from_attributes(attributes).ok_or(BatchError::Codec(attributes))?;
    let log_append_time = attributes & (1 << 3) != 0;
    let transactional = attributes & (1 << 4) != 0;
    let control = attributes & (1 << 5) != 0;
    let last_offset_delta = b.i32()?;
    let base_timestamp = b.i64()?;
    let max_timestamp = b.i64()?;
    let producer_id = b.i64()?;
    let producer_epoch = b.i16()?;
    let base_sequence = b.i32()?;
    let count = b.i32()?;
    let count = usize::try_from(count).map_err(|_| Malformed("negative record count"))?;
    if count > budget.records {
        return Err(BatchError::TooManyRecords);
    }
    budget.records -= count;
    let body = b.take(b.remaining())?;
    let body = codecs::decompress(codec, body, budget.bytes)?;
    budget.bytes = budget.bytes.saturating_sub(body.len());
    if count > body.len() / MIN_RECORD_BYTES {
        return Err(Malformed("record count larger than the batch can hold").into());
    }
    let mut rr = Reader::new(body, false);
    let mut records = Vec::new();
    for _ in 0..count {
        let mut rec = decode_record(&mut rr, base_timestamp)?;
        if log_append_time {
            rec.timestamp = max_timestamp;
        }
        records.push(rec);
    }
    // As Kafka's own batch reader: bytes past the declared records mean the count or a
    // length lied, and what they would have held is not known.
    if rr.remaining() > 0 {
        return Err(Malformed("bytes left after the batch's records").into());
    }
    if count == 0 || i64::from(last_offset_delta) != count as i64 - 1 {
        return Err(BatchError::OffsetRange {
            delta: last_offset_delta,
            count,
        });
    }
    Ok(Batch {
        producer_id,
        producer_epoch,
        base_sequence,
        last_offset_delta,
        transactional,
        control,
        wire_bytes,
        records,
    })
}

fn decode_record(r: &mut Reader, base_timestamp: i64) -> Result<Record, Malformed> {
    let len = r.varint()?;
    let len = usize::try_from(len).map_err(|_| Malformed("negative record length"))?;
    let mut rec = Reader::new(r.take(len)?, false);
    let _attributes = rec.i8()?;
    let delta = rec.varlong()?;
    let _offset_delta = rec.varint()?;
    let key = nullable(&mut rec)?;
    let value = nullable(&mut rec)?;
    let n = rec.varint()?;
    let n = usize::try_from(n).map_err(|_| Malformed("negative header count"))?;
    if n > rec.remaining() {
        return Err(Malformed("header count larger than the record"));
    }
    let mut headers = Vec::new();
    for _ in 0..n {
        let name = nullable(&mut rec)?.ok_or(Malformed("null header key"))?;
        let name =
            String::from_utf8(name.to_vec()).map_err(|_| Malformed("header key is not UTF-8"))?;
        headers.push((name, nullable(&mut rec)?));
    }
    if rec.remaining() > 0 {
        return Err(Malformed("bytes left after the record's headers"));
    }
    Ok(Record {
        // The writer's delta may have wrapped (Java and librdkafka write and read it so).
        timestamp: base_timestamp.wrapping_add(delta),
        key,
        value,
        headers,
    })
}

fn nullable(r: &mut Reader) -> Result<Option<Bytes>, Malformed> {
    match r.varint()? {
        -1 => Ok(None),
        n if n < 0 => Err(Malformed("negative length")),
        n => r.take(n as usize).map(Some),
    }
}

/// A small uncompressed batch (a key, a JSON value, a header) for the fuzz seeds.
#[doc(hidden)]
pub fn seed_batch() -> Vec<u8> {
    // offset delta, timestamp delta 0; key "k"; value "1"; header "h" = "v".
    use bytes::BufMut;
    let record: &[u8] = &[0, 0, 0, 2, b'k', 2, b'1', 2, 2, b'h', 2, b'v'];
    let mut after_crc = Vec::new();
    after_crc.put_i16(0);
    after_crc.put_i32(0);
    after_crc.put_i64(1_700_000_000_000);
    after_crc.put_i64(1_700_000_000_000);
    after_crc.put_i64(-1);
    after_crc.put_i16(-1);
    after_crc.put_i32(-1);
    after_crc.put_i32(1);
    // The record's length as a zigzag varint (one byte below 64).
    after_crc.put_u8(u8::try_from(record.len() * 2).unwrap_or(0));
    after_crc.put_slice(record);
    let mut out = Vec::new();
    out.put_i64(0);
    out.put_i32(i32::try_from(4 + 1 + 4 + after_crc.len()).unwrap_or(0));
    out.put_i32(-1);
    out.put_u8(2);
    out.put_u32(crc32c::crc32c(&after_crc));
    out.put_slice(&after_crc);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fetch::batches::{nullable as put_nullable, zigzag};
    use bytes::{BufMut, BytesMut};

    /// A test record: timestamp, key, value, headers.
    pub type TestRecord<'a> = (
        i64,
        Option<&'a [u8]>,
        Option<&'a [u8]>,
        &'a [(&'a str, Option<&'a [u8]>)],
    );

    /// An uncompressed v2 batch of `records`.
    pub fn batch(producer_id: i64, base_ts: i64, records: &[TestRecord<'_>]) -> Bytes {
        let (epoch, seq) = if producer_id >= 0 { (0, 0) } else { (-1, -1) };
        batch_seq(producer_id, epoch, seq, base_ts, records)
    }

    /// A batch of an idempotent producer at `epoch`, its first record numbered `seq`.
    pub fn batch_seq(
        producer_id: i64,
        epoch: i16,
        seq: i32,
        base_ts: i64,
        records: &[TestRecord<'_>],
    ) -> Bytes {
        let mut body = BytesMut::new();
        for (i, (ts, key, value, headers)) in records.iter().enumerate() {
            let mut rec = BytesMut::new();
            rec.put_i8(0);
            zigzag(&mut rec, ts - base_ts);
            zigzag(&mut rec, i as i64);
            put_nullable(&mut rec, *key);
            put_nullable(&mut rec, *value);
            zigzag(&mut rec, headers.len() as i64);
            for (k, v) in *headers {
                put_nullable(&mut rec, Some(k.as_bytes()));
                put_nullable(&mut rec, *v);
            }
            zigzag(&mut body, rec.len() as i64);
            body.put_slice(&rec);
        }
        let mut after_crc = BytesMut::new();
        after_crc.put_i16(0);
        after_crc.put_i32(records.len() as i32 - 1);
        after_crc.put_i64(base_ts);
        after_crc.put_i64(base_ts);
        after_crc.put_i64(producer_id);
        after_crc.put_i16(epoch);
        after_crc.put_i32(seq);
        after_crc.put_i32(records.len() as i32);
        after_crc.put_slice(&body);
        let mut out = BytesMut::new();
        out.put_i64(0);
        out.put_i32((4 + 1 + 4 + after_crc.len()) as i32);
        out.put_i32(-1);
        out.put_i8(2);
        out.put_u32(crc32c::crc32c(&after_crc));
        out.put_slice(&after_crc);
        out.freeze()
    }

    #[test]
    fn a_batch_decodes_to_its_records() {
        let data = batch(
            -1,
            1_000,
            &[
                (1_000, Some(b"k"), Some(b"{\"a\":1}"), &[("h", Some(b"v"))]),
                (1_005, None, None, &[]),
            ],
        );
        let sent = data.len();
        let mut budget = Budget::new(1 << 20, usize::MAX);
        let batches = decode_batches(data, &mut budget).expect("decodes");
        assert_eq!(batches.len(), 1);
        let b = &batches[0];
        assert_eq!(
            (b.producer_id, b.transactional, b.control),
            (-1, false, false)
        );
        assert_eq!(b.wire_bytes, sent, "the whole batch, as sent");
        assert_eq!(b.records.len(), 2);
        assert_eq!(b.records[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(b.records[0].headers[0].0, "h");
        assert_eq!(b.records[1].timestamp, 1_005);
        assert_eq!(b.records[1].value, None);
    }

    #[test]
    fn a_record_longer_than_its_fields_is_refused() {
        // attributes, timestamp delta, offset delta, null key, value "1", no headers, and one
        // byte the fields do not account for; the length (zigzag 8*2) claims all of it.
        let rec: &[u8] = &[16, 0, 0, 0, 1, 2, b'1', 0, 9];
        let mut r = Reader::new(Bytes::from_static(rec), false);
        assert_eq!(
            decode_record(&mut r, 0),
            Err(Malformed("bytes left after the record's headers"))
        );
        let mut r = Reader::new(Bytes::from_static(&[14, 0, 0, 0, 1, 2, b'1', 0]), false);
        assert!(decode_record(&mut r, 0).is_ok());
    }

    #[test]
    fn the_seed_batch_decodes() {
        let mut budget = Budget::new(1 << 20, usize::MAX);
        let b = decode_batches(Bytes::from(seed_batch()), &mut budget).expect("decodes");
        assert_eq!(b[0].records[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(b[0].records[0].headers.len(), 1);
    }

    #[test]
    fn damaged_batches_are_refused_not_trusted() {
        let good = batch(-1, 0, &[(0, None, Some(b"1"), &[])]);
        let mut budget = Budget::new(1 << 20, usize::MAX);
        let mut flipped = good.to_vec();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        assert_eq!(
            decode_batches(Bytes::from(flipped), &mut budget),
            Err(BatchError::Crc)
        );
        // A record count of 2^31-1 in a tiny batch: refused before anything is sized by it.
        let mut lying = good.to_vec();
        let count_at = 12 + 4 + 1 + 4 + 2 + 4 + 8 + 8 + 8 + 2 + 4;
        (&mut lying[count_at..count_at + 4]).put_i32(i32::MAX);
        let crc = crc32c::crc32c(&lying[21..]);
        (&mut lying[17..21]).put_u32(crc);
        assert!(matches!(
            decode_batches(Bytes::from(lying), &mut budget),
            Err(BatchError::Malformed(_))
        ));
        let mut old = good.to_vec();
        old[16] = 1;
        assert_eq!(
            decode_batches(Bytes::from(old), &mut budget),
            Err(BatchError::Magic(1))
        );
        assert!(decode_batches(good.slice(..20), &mut budget).is_err());
        // One record claiming six sequences (lastOffsetDelta 5): a range that disagrees
        // with the records would let a different batch pass for a repeat.
        let mut narrow = good.to_vec();
        let delta_at = 12 + 4 + 1 + 4 + 2;
        (&mut narrow[delta_at..delta_at + 4]).put_i32(5);
        let crc = crc32c::crc32c(&narrow[21..]);
        (&mut narrow[17..21]).put_u32(crc);
        assert!(matches!(
            decode_batches(Bytes::from(narrow), &mut budget),
            Err(BatchError::OffsetRange { delta: 5, .. })
        ));
        // One byte more after the last record, inside the batch and its CRC: the count or a
        // length lied, so the batch is refused rather than read short.
        let mut trailing = good.to_vec();
        trailing.push(0);
        let len = bytes::Buf::get_i32(&mut &trailing[8..12]);
        (&mut trailing[8..12]).put_i32(len + 1);
        let crc = crc32c::crc32c(&trailing[21..]);
        (&mut trailing[17..21]).put_u32(crc);
        assert_eq!(
            decode_batches(Bytes::from(trailing), &mut budget),
            Err(BatchError::Malformed(Malformed(
                "bytes left after the batch's records"
            )))
        );
    }
}
