//! The QPF1 framed pop answer (version 1, codec 0 as this broker writes it):
//! `"QPF1" | u8 version | [u32 len + own keys JSON, version 1] | u16 queue | u16 leaseId |
//! u16 consumerGroup | u32 claims`, per claim `u64 partitionId | u16 partition | u64 start |
//! u64 end | u32 deliveryAttempt | u32 records`, per record `u64 base_offset |
//! i64 created_at_us | u32 count | u8 codec | u32 len + count stored frames`.

use super::frames::{write_frame, Frame};
use super::reader::{bounded, Reader};
use super::BinaryError;
use crate::PopResult;

pub const MAGIC: &[u8; 4] = b"QPF1";
pub const CODEC_RAW: u8 = 0;
pub const CODEC_ZSTD: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FramedPop {
    pub version: u8,
    /// Version 1: the JSON object of the answer's own keys, merged into the decoded answer.
    pub own: Vec<u8>,
    pub queue: String,
    pub lease_id: String,
    pub consumer_group: String,
    pub claims: Vec<Claim>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Claim {
    pub partition_id: u64,
    pub partition: String,
    /// The inclusive offset range delivered under this claim.
    pub start: u64,
    pub end: u64,
    pub delivery_attempt: u32,
    pub records: Vec<Record>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    pub base_offset: u64,
    pub created_at_us: i64,
    pub count: u32,
    pub codec: u8,
    /// `count` stored frames, zstd-compressed when `codec` is 1.
    pub bytes: Vec<u8>,
}

fn put_text16(out: &mut Vec<u8>, s: &str) -> Option<()> {
    out.extend_from_slice(&u16::try_from(s.len()).ok()?.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Some(())
}

fn put_bytes32(out: &mut Vec<u8>, b: &[u8]) -> Option<()> {
    out.extend_from_slice(&u32::try_from(b.len()).ok()?.to_le_bytes());
    out.extend_from_slice(b);
    Some(())
}

impl FramedPop {
    /// The answer's bytes; `None` when a text or a length does not fit its field.
    pub fn write(&self) -> Option<Vec<u8>> {
        let body: usize = self
            .claims
            .iter()
            .flat_map(|c| &c.records)
            .map(|r| r.bytes.len() + 32)
            .sum();
        let mut out = Vec::with_capacity(64 + self.own.len() + body);
        out.extend_from_slice(MAGIC);
        out.push(self.version);
        if self.version == 1 {
            put_bytes32(&mut out, &self.own)?;
        }
        put_text16(&mut out, &self.queue)?;
        put_text16(&mut out, &self.lease_id)?;
        put_text16(&mut out, &self.consumer_group)?;
        out.extend_from_slice(&u32::try_from(self.claims.len()).ok()?.to_le_bytes());
        for c in &self.claims {
            out.extend_from_slice(&c.partition_id.to_le_bytes());
            put_text16(&mut out, &c.partition)?;
            out.extend_from_slice(&c.start.to_le_bytes());
            out.extend_from_slice(&c.end.to_le_bytes());
            out.extend_from_slice(&c.delivery_attempt.to_le_bytes());
            out.extend_from_slice(&u32::try_from(c.records.len()).ok()?.to_le_bytes());
            for r in &c.records {
                out.extend_from_slice(&r.base_offset.to_le_bytes());
                out.extend_from_slice(&r.created_at_us.to_le_bytes());
                out.extend_from_slice(&r.count.to_le_bytes());
                out.push(r.codec);
                put_bytes32(&mut out, &r.bytes)?;
            }
        }
        Some(out)
    }
}

/// Reads a framed pop answer (the records' frames are left as bytes: [`super::frames`]).
pub fn decode(data: &[u8]) -> Result<FramedPop, BinaryError> {
    let mut r = Reader::new(data);
    if r.take(4, "magic")? != MAGIC {
        return Err(BinaryError::malformed(
            "the answer does not start with QPF1",
        ));
    }
    let version = r.u8("version")?;
    let own = match version {
        0 => Vec::new(),
        1 => r.bytes32("own keys")?.to_vec(),
        v => return Err(BinaryError::malformed(format!("unknown version {v}"))),
    };
    let queue = r.text16("queue")?.to_string();
    let lease_id = r.text16("leaseId")?.to_string();
    let consumer_group = r.text16("consumerGroup")?.to_string();
    // The fixed part of a claim is 34 bytes, of a record 25: counts past what is left are lies.
    let claims = bounded(r.u32("claims")?, r.remaining() / 34, "claims")?;
    let mut out = FramedPop {
        version,
        own,
        queue,
        lease_id,
        consumer_group,
        claims: Vec::with_capacity(claims),
    };
    for _ in 0..claims {
        let partition_id = r.u64("partitionId")?;
        let partition = r.text16("partition")?.to_string();
        let start = r.u64("start")?;
        let end = r.u64("end")?;
        let delivery_attempt = r.u32("deliveryAttempt")?;
        let records = bounded(r.u32("records")?, r.remaining() / 25, "records")?;
        let mut claim = Claim {
            partition_id,
            partition,
            start,
            end,
            delivery_attempt,
            records: Vec::with_capacity(records),
        };
        for _ in 0..records {
            let base_offset = r.u64("base_offset")?;
            let created_at_us = r.i64("created_at_us")?;
            let count = r.u32("count")?;
            let codec = r.u8("codec")?;
            if codec > CODEC_ZSTD {
                return Err(BinaryError::malformed(format!("unknown codec {codec}")));
            }
            let bytes = r.bytes32("record bytes")?.to_vec();
            claim.records.push(Record {
                base_offset,
                created_at_us,
                count,
                codec,
                bytes,
            });
        }
        out.claims.push(claim);
    }
    super::push::at_end(&r)?;
    Ok(out)
}

/// A claim being written: where its `end` and its record count go once known.
struct OpenClaim {
    partition_id: u64,
    delivery_attempt: u32,
    end: u64,
    end_at: usize,
    records: u32,
    records_at: usize,
}

/// A record being written: where its frame count and its byte length go once known.
struct OpenRecord {
    base_offset: u64,
    created_at_us: i64,
    count: u32,
    count_at: usize,
    len_at: usize,
}

fn patch(out: &mut [u8], at: usize, bytes: &[u8]) -> Option<()> {
    out.get_mut(at..at + bytes.len())?.copy_from_slice(bytes);
    Some(())
}

fn close_record(out: &mut [u8], rec: Option<OpenRecord>) -> Option<()> {
    let Some(rec) = rec else { return Some(()) };
    let len = u32::try_from(out.len() - (rec.len_at + 4)).ok()?;
    patch(out, rec.count_at, &rec.count.to_le_bytes())?;
    patch(out, rec.len_at, &len.to_le_bytes())
}

fn close_claim(out: &mut [u8], claim: Option<OpenClaim>) -> Option<()> {
    let Some(c) = claim else { return Some(()) };
    patch(out, c.end_at, &c.end.to_le_bytes())?;
    patch(out, c.records_at, &c.records.to_le_bytes())
}

/// A pop's messages as a framed answer: one claim per run of one partition's messages with
/// one delivery attempt, one raw record per run of consecutive offsets created together.
/// `own` is the JSON object of the keys the JSON answer has beside its messages. `None` when a
/// message cannot travel in frames (an id or trace id that is not a UUID, an over-long text):
/// the caller then answers JSON, which the client reads as well.
///
/// The frames go straight into the answer and each count and length is filled in once its
/// run ends, so the payloads are copied once (not into records first, then into the answer).
pub fn encode(r: &PopResult, own: &str) -> Option<Vec<u8>> {
    // A frame is at most 4 + 1 + 16 + 16 + 2 + 2 bytes besides its texts and payload; a claim
    // and a record head at most 34 + partition and 29.
    let size: usize = r
        .messages
        .iter()
        .map(|m| {
            41 + 63
                + m.partition.len()
                + m.transaction_id.len()
                + m.producer_sub.as_deref().map_or(0, str::len)
                + m.payload.len()
        })
        .sum();
    let mut out = Vec::with_capacity(64 + own.len() + size);
    out.extend_from_slice(MAGIC);
    out.push(1);
    put_bytes32(&mut out, own.as_bytes())?;
    put_text16(&mut out, &r.queue)?;
    put_text16(&mut out, &r.lease_id)?;
    put_text16(&mut out, &r.consumer_group)?;
    let claims_at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut claims = 0u32;
    let mut claim: Option<OpenClaim> = None;
    let mut rec: Option<OpenRecord> = None;
    for m in &r.messages {
        let id = *uuid::Uuid::parse_str(&m.id).ok()?.as_bytes();
        let trace_id = match &m.trace_id {
            Some(t) => Some(*uuid::Uuid::parse_str(t).ok()?.as_bytes()),
            None => None,
        };
        let frame = Frame {
            id,
            trace_id,
            transaction_id: &m.transaction_id,
            producer: m.producer_sub.as_deref(),
            encrypted: false,
            payload: &m.payload,
        };
        let same_claim = claim.as_ref().is_some_and(|c| {
            c.partition_id == m.partition_id
                && c.delivery_attempt == m.delivery_attempt
                && c.end < m.offset
        });
        if !same_claim {
            close_record(&mut out, rec.take())?;
            close_claim(&mut out, claim.take())?;
            claims = claims.checked_add(1)?;
            out.extend_from_slice(&m.partition_id.to_le_bytes());
            put_text16(&mut out, &m.partition)?;
            out.extend_from_slice(&m.offset.to_le_bytes());
            let end_at = out.len();
            out.extend_from_slice(&m.offset.to_le_bytes());
            out.extend_from_slice(&m.delivery_attempt.to_le_bytes());
            let records_at = out.len();
            out.extend_from_slice(&0u32.to_le_bytes());
            claim = Some(OpenClaim {
                partition_id: m.partition_id,
                delivery_attempt: m.delivery_attempt,
                end: m.offset,
                end_at,
                records: 0,
                records_at,
            });
        }
        let c = claim.as_mut()?;
        let follows = same_claim
            && rec.as_ref().is_some_and(|rec| {
                rec.created_at_us == m.created_at_us
                    && rec.base_offset.checked_add(u64::from(rec.count)) == Some(m.offset)
            });
        if !follows {
            close_record(&mut out, rec.take())?;
            c.records = c.records.checked_add(1)?;
            out.extend_from_slice(&m.offset.to_le_bytes());
            out.extend_from_slice(&m.created_at_us.to_le_bytes());
            let count_at = out.len();
            out.extend_from_slice(&0u32.to_le_bytes());
            out.push(CODEC_RAW);
            let len_at = out.len();
            out.extend_from_slice(&0u32.to_le_bytes());
            rec = Some(OpenRecord {
                base_offset: m.offset,
                created_at_us: m.created_at_us,
                count: 0,
                count_at,
                len_at,
            });
        }
        write_frame(&mut out, &frame)?;
        let open = rec.as_mut()?;
        open.count = open.count.checked_add(1)?;
        c.end = m.offset;
    }
    close_record(&mut out, rec.take())?;
    close_claim(&mut out, claim.take())?;
    patch(&mut out, claims_at, &claims.to_le_bytes())?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::frames::decode_frames;
    use crate::binary::fuzzing::pop_result;
    use bytes::Bytes;

    #[test]
    fn an_answer_encodes_decodes_and_every_truncation_fails() {
        let r = pop_result();
        let Some(bytes) = encode(&r, r#"{"partitionsClaimed":2}"#) else {
            panic!("encodes")
        };
        let pop = decode(&bytes);
        let Ok(pop) = pop else { panic!("{pop:?}") };
        assert_eq!(pop.write().as_deref(), Some(&bytes[..]));
        assert_eq!(pop.queue, "q");
        // p1 offsets 4,5 (one record), then 9 (a gap: a second record); p2 offset 0.
        assert_eq!(pop.claims.len(), 2);
        assert_eq!(pop.claims[0].records.len(), 2);
        assert_eq!((pop.claims[0].start, pop.claims[0].end), (4, 9));
        let rec = &pop.claims[0].records[0];
        let frames = decode_frames(&rec.bytes, rec.count as usize);
        let Ok(frames) = frames else {
            panic!("{frames:?}")
        };
        assert_eq!(frames[0].transaction_id, "t4");
        assert_eq!(frames[1].payload, b"[5]");
        assert_eq!(frames[0].producer, Some("sub"));
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn the_answer_is_written_in_one_buffer_it_was_sized_for() {
        let mut r = pop_result();
        for m in &mut r.messages {
            m.payload = Bytes::from(vec![b'1'; 10_000]);
        }
        let Some(bytes) = encode(&r, "{}") else {
            panic!("encodes")
        };
        // Built straight into the answer: never grown past what was sized up front.
        assert!(
            bytes.capacity() < bytes.len() + 1024,
            "{}",
            bytes.capacity()
        );
        let pop = decode(&bytes);
        let Ok(pop) = pop else { panic!("{pop:?}") };
        assert_eq!(pop.write().as_deref(), Some(&bytes[..]));
    }

    #[test]
    fn a_message_that_is_not_framable_gives_none() {
        let mut r = pop_result();
        r.messages[0].id = "not-a-uuid".into();
        assert!(encode(&r, "{}").is_none());
    }

    #[test]
    fn lying_counts_are_refused() {
        let mut b = b"QPF1\x00\x00\x00\x00\x00\x00\x00".to_vec();
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&b).is_err());
    }
}
