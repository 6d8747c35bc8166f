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

/// A pop's messages as a framed answer: one claim per run of one partition's messages with
/// one delivery attempt, one raw record per run of consecutive offsets created together.
/// `own` is the JSON object of the keys the JSON answer has beside its messages. `None` when a
/// message cannot travel in frames (an id or trace id that is not a UUID, an over-long text):
/// the caller then answers JSON, which the client reads as well.
pub fn encode(r: &PopResult, own: &str) -> Option<Vec<u8>> {
    let mut pop = FramedPop {
        version: 1,
        own: own.as_bytes().to_vec(),
        queue: r.queue.clone(),
        lease_id: r.lease_id.clone(),
        consumer_group: r.consumer_group.clone(),
        claims: Vec::new(),
    };
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
        let same_claim = pop.claims.last().is_some_and(|c| {
            c.partition_id == m.partition_id
                && c.delivery_attempt == m.delivery_attempt
                && c.end < m.offset
        });
        if !same_claim {
            pop.claims.push(Claim {
                partition_id: m.partition_id,
                partition: m.partition.to_string(),
                start: m.offset,
                end: m.offset,
                delivery_attempt: m.delivery_attempt,
                records: Vec::new(),
            });
        }
        let claim = pop.claims.last_mut()?;
        let follows = claim.records.last().is_some_and(|rec| {
            same_claim
                && rec.created_at_us == m.created_at_us
                && rec.base_offset.checked_add(u64::from(rec.count)) == Some(m.offset)
        });
        if !follows {
            claim.records.push(Record {
                base_offset: m.offset,
                created_at_us: m.created_at_us,
                count: 0,
                codec: CODEC_RAW,
                bytes: Vec::new(),
            });
        }
        let rec = claim.records.last_mut()?;
        write_frame(&mut rec.bytes, &frame)?;
        rec.count = rec.count.checked_add(1)?;
        claim.end = m.offset;
    }
    pop.write()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::frames::decode_frames;
    use crate::binary::fuzzing::pop_result;

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
