//! Kafka transaction effects, kinds 55..=59 and 66 (docs/kafka-transactions.md "Effects"): one
//! `Effect::KafkaTxn` variant of the entry, encoded and decoded here.

use crate::codec::{DecodeError, Reader, Writer};
use crate::state::kafka_txns::{TxnEnd, MAX_TRANSACTIONAL_ID_BYTES};

pub const K_KAFKA_TXN_INIT: u8 = 55;
pub const K_KAFKA_TXN_ADD: u8 = 56;
pub const K_KAFKA_TXN_OFFSET: u8 = 57;
pub const K_KAFKA_TXN_END: u8 = 58;
pub const K_KAFKA_TXN_RECORDS: u8 = 59;
pub const K_KAFKA_TXN_BUMPED_FROM: u8 = 66;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnEffect<'a> {
    /// InitProducerId granted (producer id, epoch, timeout) to a transactional id.
    Init {
        txn_id: &'a str,
        producer_id: i64,
        epoch: i16,
        timeout_ms: u32,
    },
    /// AddPartitionsToTxn / AddOffsetsToTxn: the transaction opens if it was not.
    Add {
        txn_id: &'a str,
        producer_id: i64,
        epoch: i16,
        pids: Vec<u64>,
        groups: Vec<&'a str>,
    },
    /// TxnOffsetCommit: an offset visible only once the transaction commits.
    Offset {
        txn_id: &'a str,
        group: &'a str,
        topic: &'a str,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: &'a str,
    },
    /// EndTxn, an abort by the timeout or a fenced epoch, or an idle row forgotten; the
    /// markers were appended by the same entry's Append effects, before it.
    End {
        txn_id: &'a str,
        how: TxnEnd,
        markers: Vec<(u64, u64)>,
    },
    /// A transactional batch the same entry appended, before it.
    Records {
        txn_id: &'a str,
        pid: u64,
        base_offset: u64,
        count: u32,
    },
    /// The (producer id, epoch) a KIP-360 InitProducerId named, after the Init effect of the
    /// same entry that bumped from it: a retry naming it again gets the bumped pair.
    BumpedFrom {
        txn_id: &'a str,
        producer_id: i64,
        epoch: i16,
    },
}

pub fn encode(w: &mut Writer, e: &TxnEffect<'_>) {
    match e {
        TxnEffect::Init {
            txn_id,
            producer_id,
            epoch,
            timeout_ms,
        } => {
            w.u8(K_KAFKA_TXN_INIT);
            w.str(txn_id);
            w.i64(*producer_id);
            w.u16(*epoch as u16);
            w.u32(*timeout_ms);
        }
        TxnEffect::Add {
            txn_id,
            producer_id,
            epoch,
            pids,
            groups,
        } => {
            w.u8(K_KAFKA_TXN_ADD);
            w.str(txn_id);
            w.i64(*producer_id);
            w.u16(*epoch as u16);
            w.u32(pids.len() as u32);
            for pid in pids {
                w.u64(*pid);
            }
            w.u32(groups.len() as u32);
            for g in groups {
                w.str(g);
            }
        }
        TxnEffect::Offset {
            txn_id,
            group,
            topic,
            partition,
            offset,
            leader_epoch,
            metadata,
        } => {
            w.u8(K_KAFKA_TXN_OFFSET);
            w.str(txn_id);
            w.str(group);
            w.str(topic);
            w.u32(*partition as u32);
            w.i64(*offset);
            w.u32(*leader_epoch as u32);
            w.str(metadata);
        }
        TxnEffect::End {
            txn_id,
            how,
            markers,
        } => {
            w.u8(K_KAFKA_TXN_END);
            w.str(txn_id);
            w.u8(*how as u8);
            w.u32(markers.len() as u32);
            for (pid, offset) in markers {
                w.u64(*pid);
                w.u64(*offset);
            }
        }
        TxnEffect::Records {
            txn_id,
            pid,
            base_offset,
            count,
        } => {
            w.u8(K_KAFKA_TXN_RECORDS);
            w.str(txn_id);
            w.u64(*pid);
            w.u64(*base_offset);
            w.u32(*count);
        }
        TxnEffect::BumpedFrom {
            txn_id,
            producer_id,
            epoch,
        } => {
            w.u8(K_KAFKA_TXN_BUMPED_FROM);
            w.str(txn_id);
            w.i64(*producer_id);
            w.u16(*epoch as u16);
        }
    }
}

fn txn_id<'a>(r: &mut Reader<'a>) -> Result<&'a str, DecodeError> {
    let id = r.str()?;
    if id.is_empty() || id.len() > MAX_TRANSACTIONAL_ID_BYTES {
        return Err(r.malformed(format!("kafka transactional id of {} bytes", id.len())));
    }
    Ok(id)
}

fn producer(r: &mut Reader<'_>) -> Result<(i64, i16), DecodeError> {
    let id = r.i64()?;
    let epoch = r.u16()? as i16;
    if !(0..=queenmq_protocol::kafka_producers::MAX_PRODUCER_ID).contains(&id) || epoch < 0 {
        return Err(r.malformed(format!("kafka producer {id} epoch {epoch} out of range")));
    }
    Ok((id, epoch))
}

/// Decodes the effect of `kind` (one of 55..=59 and 66; `None` for any other kind).
pub fn decode<'a>(kind: u8, r: &mut Reader<'a>) -> Option<Result<TxnEffect<'a>, DecodeError>> {
    let decoded = match kind {
        K_KAFKA_TXN_INIT => decode_init(r),
        K_KAFKA_TXN_ADD => decode_add(r),
        K_KAFKA_TXN_OFFSET => decode_offset(r),
        K_KAFKA_TXN_END => decode_end(r),
        K_KAFKA_TXN_RECORDS => decode_records(r),
        K_KAFKA_TXN_BUMPED_FROM => decode_bumped_from(r),
        _ => return None,
    };
    Some(decoded)
}

fn decode_init<'a>(r: &mut Reader<'a>) -> Result<TxnEffect<'a>, DecodeError> {
    let txn_id = txn_id(r)?;
    let (producer_id, epoch) = producer(r)?;
    let timeout_ms = r.u32()?;
    if timeout_ms == 0 || timeout_ms > i32::MAX as u32 {
        return Err(r.malformed(format!("kafka transaction timeout {timeout_ms}")));
    }
    Ok(TxnEffect::Init {
        txn_id,
        producer_id,
        epoch,
        timeout_ms,
    })
}

fn decode_add<'a>(r: &mut Reader<'a>) -> Result<TxnEffect<'a>, DecodeError> {
    let txn_id = txn_id(r)?;
    let (producer_id, epoch) = producer(r)?;
    let n = r.count(8)?;
    let mut pids = Vec::with_capacity(n);
    for _ in 0..n {
        pids.push(r.u64()?);
    }
    let m = r.count(4)?;
    let mut groups = Vec::with_capacity(m);
    for _ in 0..m {
        groups.push(r.str()?);
    }
    Ok(TxnEffect::Add {
        txn_id,
        producer_id,
        epoch,
        pids,
        groups,
    })
}

fn decode_offset<'a>(r: &mut Reader<'a>) -> Result<TxnEffect<'a>, DecodeError> {
    Ok(TxnEffect::Offset {
        txn_id: txn_id(r)?,
        group: r.str()?,
        topic: r.str()?,
        partition: r.u32()? as i32,
        offset: r.i64()?,
        leader_epoch: r.u32()? as i32,
        metadata: r.str()?,
    })
}

fn decode_end<'a>(r: &mut Reader<'a>) -> Result<TxnEffect<'a>, DecodeError> {
    let txn_id = txn_id(r)?;
    let how = match r.u8()? {
        0 => TxnEnd::Abort,
        1 => TxnEnd::Commit,
        2 => TxnEnd::Expire,
        b => return Err(r.malformed(format!("kafka transaction outcome {b}"))),
    };
    let n = r.count(16)?;
    let mut markers = Vec::with_capacity(n);
    for _ in 0..n {
        markers.push((r.u64()?, r.u64()?));
    }
    Ok(TxnEffect::End {
        txn_id,
        how,
        markers,
    })
}

fn decode_records<'a>(r: &mut Reader<'a>) -> Result<TxnEffect<'a>, DecodeError> {
    Ok(TxnEffect::Records {
        txn_id: txn_id(r)?,
        pid: r.u64()?,
        base_offset: r.u64()?,
        count: r.u32()?,
    })
}

fn decode_bumped_from<'a>(r: &mut Reader<'a>) -> Result<TxnEffect<'a>, DecodeError> {
    let txn_id = txn_id(r)?;
    let (producer_id, epoch) = producer(r)?;
    Ok(TxnEffect::BumpedFrom {
        txn_id,
        producer_id,
        epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: &TxnEffect<'_>) -> Result<(), DecodeError> {
        let mut w = Writer::default();
        encode(&mut w, e);
        let mut r = Reader::new(&w.buf);
        let kind = r.u8()?;
        let back = decode(kind, &mut r).expect("a transaction kind")?;
        assert_eq!(&back, e);
        assert!(r.is_done());
        Ok(())
    }

    #[test]
    fn every_transaction_effect_round_trips() {
        let effects = [
            TxnEffect::Init {
                txn_id: "tx ü",
                producer_id: queenmq_protocol::kafka_producers::MAX_PRODUCER_ID,
                epoch: i16::MAX - 1,
                timeout_ms: i32::MAX as u32,
            },
            TxnEffect::Add {
                txn_id: "tx",
                producer_id: 0,
                epoch: 0,
                pids: vec![1, u64::MAX],
                groups: vec!["g", ""],
            },
            TxnEffect::Offset {
                txn_id: "tx",
                group: "g",
                topic: "t",
                partition: -1,
                offset: i64::MIN,
                leader_epoch: -1,
                metadata: "m",
            },
            TxnEffect::End {
                txn_id: "tx",
                how: TxnEnd::Commit,
                markers: vec![(3, 1 << 40)],
            },
            TxnEffect::End {
                txn_id: "tx",
                how: TxnEnd::Expire,
                markers: vec![],
            },
            TxnEffect::Records {
                txn_id: "tx",
                pid: 2,
                base_offset: 9,
                count: 1,
            },
            TxnEffect::BumpedFrom {
                txn_id: "tx",
                producer_id: 7,
                epoch: i16::MAX - 1,
            },
        ];
        for e in &effects {
            round_trip(e).expect("round trips");
        }
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        let long = "x".repeat(MAX_TRANSACTIONAL_ID_BYTES + 1);
        let init = |txn_id, producer_id, epoch, timeout_ms| TxnEffect::Init {
            txn_id,
            producer_id,
            epoch,
            timeout_ms,
        };
        for e in [
            init("", 1, 0, 1),
            init(&long, 1, 0, 1),
            init("t", -1, 0, 1),
            init("t", 1, -1, 1),
            init("t", 1, 0, 0),
            init("t", 1, 0, u32::MAX),
        ] {
            assert!(round_trip(&e).is_err(), "{e:?} decoded");
        }
        let mut w = Writer::default();
        w.str("tx");
        w.u8(3);
        w.u32(0);
        assert!(decode(K_KAFKA_TXN_END, &mut Reader::new(&w.buf))
            .expect("a transaction kind")
            .is_err());
        assert!(decode(54, &mut Reader::new(&w.buf)).is_none());
        let bumped = |producer_id, epoch| TxnEffect::BumpedFrom {
            txn_id: "tx",
            producer_id,
            epoch,
        };
        for e in [bumped(-1, 0), bumped(1, -1)] {
            assert!(round_trip(&e).is_err(), "{e:?} decoded");
        }
    }
}
