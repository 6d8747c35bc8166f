//! Record batches (v2, uncompressed): written with `kafka-protocol`'s encoder, read here with
//! every length checked against the bytes that are really there and the CRC-32C verified.

use anyhow::{bail, Context};
use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::reader::Reader;

/// Bytes of a batch before its records: base offset (8), length (4), leader epoch (4), magic
/// (1), CRC (4), attributes (2), last offset delta (4), two timestamps (16), producer id (8),
/// producer epoch (2), base sequence (4), record count (4).
const BATCH_HEAD: usize = 61;
/// Bytes of the head counted by the batch length (all but base offset and length).
const AFTER_LENGTH: usize = BATCH_HEAD - 12;
/// The fewest bytes one record takes: length, attributes, timestamp and offset deltas, key
/// and value lengths, header count (one byte each).
const MIN_RECORD: usize = 7;
/// Attribute bits: compression codec (0..=2), control batch (5).
const CODEC_BITS: i16 = 0x7;
const CONTROL_BIT: i16 = 0x20;

/// One record of a fetched batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub offset: i64,
    /// The offset after the batch that held this record.
    pub batch_end: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

/// What one fetched partition's records hold: the records a consumer sees, and the offset
/// after the last batch read (control and empty batches included), where the next fetch
/// starts; `None` when no whole batch was read.
#[derive(Debug, Default)]
pub struct Decoded {
    pub records: Vec<Fetched>,
    pub next_offset: Option<i64>,
}

/// One uncompressed v2 batch of `(key, value)` records stamped `timestamp_ms`.
pub fn encode_batch(
    records: impl Iterator<Item = (Bytes, Bytes)>,
    timestamp_ms: i64,
) -> anyhow::Result<Bytes> {
    let records: Vec<Record> = records
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch wherever `offset - sequence` changes; no
            // sequence (-1) at the first record keeps the difference, so one batch.
            sequence: i as i32 - 1,
            timestamp: timestamp_ms,
            key: Some(key),
            value: Some(value),
            headers: IndexMap::new(),
        })
        .collect();
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut buf, &records, &options).context("encoding a record batch")?;
    Ok(buf.freeze())
}

/// Every record of the batches in a fetched partition's `records`. A last batch cut short is
/// dropped (a broker may cut the last batch at the byte limit; the next fetch reads it
/// again); anything else malformed is an error.
pub fn decode_batches(records: Bytes) -> anyhow::Result<Decoded> {
    let mut r = Reader::new(records);
    let mut out = Decoded::default();
    while r.remaining() >= 12 {
        let base_offset = r.i64()?;
        let len = r.i32()?;
        let Ok(len) = usize::try_from(len) else {
            bail!("negative record batch length {len}");
        };
        if len < AFTER_LENGTH {
            bail!("record batch length {len} is below its own head");
        }
        if len > r.remaining() {
            break;
        }
        let batch = Reader::new(r.take(len, "record batch")?);
        let end = decode_batch(base_offset, batch, &mut out.records)?;
        out.next_offset = Some(out.next_offset.map_or(end, |n| n.max(end)));
    }
    Ok(out)
}

/// Reads one batch's records into `out`; answers the offset after the batch.
fn decode_batch(base_offset: i64, mut b: Reader, out: &mut Vec<Fetched>) -> anyhow::Result<i64> {
    let _leader_epoch = b.i32()?;
    let magic = b.i8()?;
    if magic != 2 {
        bail!("record batch magic {magic}: only v2 is read");
    }
    let crc = b.u32()?;
    let rest = b.take(b.remaining(), "record batch body")?;
    let actual = crc32c::crc32c(&rest);
    if actual != crc {
        bail!("record batch CRC {crc:#010x}, computed {actual:#010x}");
    }
    let mut b = Reader::new(rest);
    let attributes = b.i16()?;
    let last_offset_delta = b.i32()?;
    // A control or empty batch still moves the position past it: else the same bytes come
    // back on every fetch and the partition stalls.
    let end = base_offset
        .checked_add(i64::from(last_offset_delta))
        .and_then(|o| o.checked_add(1))
        .filter(|&end| end > base_offset)
        .context("record batch end offset out of range")?;
    let _base_timestamp = b.i64()?;
    let _max_timestamp = b.i64()?;
    let _producer_id = b.i64()?;
    let _producer_epoch = b.i16()?;
    let _base_sequence = b.i32()?;
    let count = b.count(MIN_RECORD)?;
    if attributes & CONTROL_BIT != 0 {
        // Transaction markers: not records a consumer sees.
        return Ok(end);
    }
    if attributes & CODEC_BITS != 0 {
        bail!(
            "compressed record batch (codec {}): this tool writes none",
            attributes & CODEC_BITS
        );
    }
    for _ in 0..count {
        let len = b.varint()?;
        let Ok(len) = usize::try_from(len) else {
            bail!("negative record length {len}");
        };
        let mut rec = Reader::new(b.take(len, "record")?);
        let _attributes = rec.i8()?;
        let _timestamp_delta = rec.varlong()?;
        let offset_delta = rec.varint()?;
        let key = varint_bytes(&mut rec)?;
        let value = varint_bytes(&mut rec)?;
        let headers = rec.varint()?;
        for _ in 0..headers.max(0) {
            let _key = varint_bytes(&mut rec)?;
            let _value = varint_bytes(&mut rec)?;
        }
        out.push(Fetched {
            offset: base_offset
                .checked_add(i64::from(offset_delta))
                .context("record offset overflows")?,
            batch_end: end,
            key,
            value,
        });
    }
    Ok(end)
}

/// Bytes with a varint length, -1 = null.
fn varint_bytes(r: &mut Reader) -> anyhow::Result<Option<Bytes>> {
    let len = r.varint()?;
    if len == -1 {
        return Ok(None);
    }
    let Ok(len) = usize::try_from(len) else {
        bail!("negative length {len} in a record");
    };
    Ok(Some(r.take(len, "record field")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Buf, BufMut};
    use kafka_protocol::records::RecordBatchDecoder;

    fn sample() -> anyhow::Result<Bytes> {
        let items = (0..3u8).map(|i| (Bytes::from(vec![b'k', i]), Bytes::from(vec![i; 40])));
        encode_batch(items, 1_700_000_000_000)
    }

    #[test]
    fn the_tool_reads_what_kafka_protocol_writes_and_the_other_way() -> anyhow::Result<()> {
        let batch = sample()?;
        // kafka-protocol's own decoder accepts the batch (CRC, layout).
        let set = RecordBatchDecoder::decode(&mut batch.clone())?;
        assert_eq!(set.records.len(), 3);
        // One batch: the broker refuses a produce carrying several for one partition.
        let info = RecordBatchDecoder::decode_batch_info(&mut batch.clone())?;
        assert_eq!(info.len(), 1);
        assert_eq!((info[0].record_count, info[0].base_sequence), (3, -1));
        assert_eq!(info[0].producer_id, -1);
        // A broker stores it at base offset 40; two batches back to back.
        let mut two = BytesMut::from(&batch[..]);
        (&mut two[..8]).put_i64(40);
        two.extend_from_slice(&batch);
        let got = decode_batches(two.freeze())?;
        assert_eq!(got.next_offset, Some(43));
        let got = got.records;
        let offsets: Vec<i64> = got.iter().map(|f| f.offset).collect();
        assert_eq!(offsets, vec![40, 41, 42, 0, 1, 2]);
        assert_eq!(got[1].key.as_deref(), Some(&b"k\x01"[..]));
        assert_eq!(got[2].value.as_deref(), Some(&[2u8; 40][..]));
        Ok(())
    }

    #[test]
    fn a_last_batch_cut_short_is_dropped_not_read() -> anyhow::Result<()> {
        let batch = sample()?;
        let mut two = BytesMut::from(&batch[..]);
        two.extend_from_slice(&batch[..batch.len() - 5]);
        assert_eq!(decode_batches(two.freeze())?.records.len(), 3);
        assert!(decode_batches(batch.slice(..7))?.records.is_empty());
        Ok(())
    }

    #[test]
    fn damaged_batches_are_errors_not_panics() -> anyhow::Result<()> {
        let batch = sample()?;
        // A flipped value byte fails the CRC.
        let mut bad = BytesMut::from(&batch[..]);
        let at = bad.len() - 3;
        bad[at] ^= 1;
        assert!(decode_batches(bad.freeze()).is_err());
        // A record count of two billion, CRC made good again.
        let mut huge = BytesMut::from(&batch[..]);
        (&mut huge[57..61]).put_i32(i32::MAX);
        let crc = crc32c::crc32c(&huge[21..]);
        (&mut huge[17..21]).put_u32(crc);
        assert!(decode_batches(huge.freeze()).is_err());
        // Every cut and every single-byte change either decodes or fails cleanly.
        for cut in 0..batch.len() {
            let _ = decode_batches(batch.slice(..cut));
            let mut changed = BytesMut::from(&batch[..]);
            changed[cut] = changed[cut].wrapping_add(0x41);
            let _ = decode_batches(changed.freeze());
        }
        let mut negative = BytesMut::from(&batch[..]);
        (&mut negative[8..12]).put_i32(-5);
        assert!(decode_batches(negative.freeze()).is_err());
        Ok(())
    }

    /// K5: a control batch (a transaction marker) at 5 then data at 6: the data is read and
    /// the next fetch starts at 7, past both.
    #[test]
    fn a_control_batch_moves_the_position() -> anyhow::Result<()> {
        let one = |key: &'static [u8]| {
            encode_batch(
                std::iter::once((Bytes::from_static(key), Bytes::from_static(b"v"))),
                1,
            )
        };
        let mut control = BytesMut::from(&one(b"marker")?[..]);
        (&mut control[..8]).put_i64(5);
        let attributes = (&control[21..23]).get_i16() | CONTROL_BIT;
        (&mut control[21..23]).put_i16(attributes);
        let crc = crc32c::crc32c(&control[21..]);
        (&mut control[17..21]).put_u32(crc);
        let only_control = decode_batches(control.clone().freeze())?;
        assert!(only_control.records.is_empty());
        assert_eq!(only_control.next_offset, Some(6));
        let mut data = BytesMut::from(&one(b"k")?[..]);
        (&mut data[..8]).put_i64(6);
        control.extend_from_slice(&data);
        let got = decode_batches(control.freeze())?;
        let offsets: Vec<i64> = got.records.iter().map(|f| f.offset).collect();
        assert_eq!(offsets, vec![6]);
        assert_eq!(got.next_offset, Some(7));
        Ok(())
    }

    /// K4: each record knows where its batch ends, so a fetch can tell the first batch's
    /// earlier records (allowed) from a whole batch below the asked offset (a door bug).
    #[test]
    fn records_know_their_batch_end() -> anyhow::Result<()> {
        let batch = sample()?;
        let mut two = BytesMut::from(&batch[..]);
        (&mut two[..8]).put_i64(40);
        two.extend_from_slice(&batch);
        let ends: Vec<i64> = decode_batches(two.freeze())?
            .records
            .iter()
            .map(|f| f.batch_end)
            .collect();
        assert_eq!(ends, vec![43, 43, 43, 3, 3, 3]);
        Ok(())
    }
}
