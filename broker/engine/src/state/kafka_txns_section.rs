//! Checkpoint section 8, Kafka transactions (docs/kafka-transactions.md "Checkpoint section
//! 8"): the rows and the partitions' stretches and aborted transactions. The derived
//! indexes are rebuilt on decode.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use queenmq_protocol::kafka_producers::MAX_PRODUCER_ID;

use super::kafka_txns::*;
use crate::codec::{DecodeError, Reader, Writer};

const BUMPED_FROM_VERSION: u8 = 1;

impl KafkaTxns {
    pub fn encode(&self, w: &mut Writer) {
        w.u32(self.len() as u32);
        for (id, row) in self.rows() {
            w.str(id);
            w.i64(row.producer_id);
            w.u16(row.epoch as u16);
            w.u32(row.timeout_ms);
            w.u8(row.state as u8);
            w.i64(row.started_us);
            w.i64(row.last_us);
            w.u8(row.last_result as u8);
            w.u32(row.partitions.len() as u32);
            for (pid, first) in &row.partitions {
                w.u64(*pid);
                match first {
                    Some(f) => {
                        w.u8(1);
                        w.u64(*f);
                    }
                    None => w.u8(0),
                }
            }
            w.u32(row.groups.len() as u32);
            for g in &row.groups {
                w.str(g);
            }
            w.u32(row.pending.len() as u32);
            for ((group, topic, partition), v) in &row.pending {
                w.str(group);
                w.str(topic);
                w.u32(*partition as u32);
                w.i64(v.offset);
                w.u32(v.leader_epoch as u32);
                w.str(&v.metadata);
            }
        }
        let parts: Vec<_> = self.parts().collect();
        w.u32(parts.len() as u32);
        for (pid, part) in parts {
            w.u64(*pid);
            w.u32(part.stretches.len() as u32);
            for (base, s) in &part.stretches {
                w.u64(*base);
                w.u32(s.count);
                w.i64(s.producer_id);
                w.u16(s.epoch as u16);
                w.u8(s.kind as u8);
            }
            w.u32(part.aborted.len() as u32);
            for a in &part.aborted {
                w.i64(a.producer_id);
                w.u64(a.first_offset);
                w.u64(a.last_offset);
            }
        }
        self.encode_bumped_from(w);
    }

    /// The rows' KIP-360 pairs (effect 66) after the partitions (the section's second
    /// layout): a version byte `1`, `count: u32`, then `(transactional id, producer id i64,
    /// epoch u16)` in id order. Written only when a row has one, so a section written before
    /// them (ending after the partitions) still reads, as none.
    fn encode_bumped_from(&self, w: &mut Writer) {
        // Counted, then written: nothing is collected while the engine waits on the encode.
        let pairs = || {
            self.rows()
                .filter_map(|(id, row)| row.bumped_from.map(|p| (id, p)))
        };
        let n = pairs().count();
        if n == 0 {
            return;
        }
        w.u8(BUMPED_FROM_VERSION);
        w.u32(n as u32);
        for (id, (producer_id, epoch)) in pairs() {
            w.str(id);
            w.i64(producer_id);
            w.u16(epoch as u16);
        }
    }

    fn decode_bumped_from(&mut self, r: &mut Reader<'_>) -> Result<(), DecodeError> {
        if r.is_done() {
            return Ok(());
        }
        let v = r.u8()?;
        if v != BUMPED_FROM_VERSION {
            return Err(r.malformed(format!("kafka transactions section layout {v}")));
        }
        let mut last: Option<String> = None;
        for _ in 0..r.count(4 + 8 + 2)? {
            let id = r.string()?;
            let producer_id = r.i64()?;
            let epoch = r.u16()? as i16;
            let in_order = last.as_ref().is_none_or(|l| *l < id);
            let fits = (0..=MAX_PRODUCER_ID).contains(&producer_id) && epoch >= 0;
            // A row keeps its pair while a transaction opens and ends at the bumped epoch;
            // the pair is always the one its current pair was bumped from.
            let row = self.row_mut(&id).filter(|row| {
                in_order
                    && fits
                    && row.bumped_from.is_none()
                    && row.is_bumped_from((producer_id, epoch))
            });
            let Some(row) = row else {
                return Err(r.malformed(format!(
                    "kafka transaction {id:?}: a retry pair out of order or range, repeated, \
                     of an unknown row or not the one its pair was bumped from"
                )));
            };
            row.bumped_from = Some((producer_id, epoch));
            last = Some(id);
        }
        Ok(())
    }

    /// Refuses what apply never makes (docs/kafka-transactions.md). `next_offset` gives a
    /// partition's next offset, `None` for a partition the checkpoint does not hold.
    pub fn decode(
        r: &mut Reader<'_>,
        now_us: i64,
        next_offset: &dyn Fn(u64) -> Option<u64>,
    ) -> Result<KafkaTxns, DecodeError> {
        let mut t = KafkaTxns::default();
        let n = r.count(4 + 8 + 2 + 4 + 1 + 8 + 8 + 1 + 12)?;
        let mut last_id: Option<String> = None;
        for _ in 0..n {
            let id = r.string()?;
            if id.is_empty()
                || id.len() > MAX_TRANSACTIONAL_ID_BYTES
                || last_id.as_ref().is_some_and(|l| *l >= id)
            {
                return Err(r.malformed(format!(
                    "kafka transactional id {id:?} empty, too long or out of order"
                )));
            }
            let row = decode_row(r, &id, now_us, next_offset)?;
            t.insert_decoded(id.clone(), row);
            last_id = Some(id);
        }
        let m = r.count(8 + 4 + 4)?;
        let mut last_pid: Option<u64> = None;
        for _ in 0..m {
            let pid = r.u64()?;
            let Some(next) = next_offset(pid).filter(|_| last_pid.is_none_or(|l| l < pid)) else {
                return Err(r.malformed(format!(
                    "kafka transactions: partition {pid} unknown or out of order"
                )));
            };
            last_pid = Some(pid);
            let part = decode_part(r, pid, next)?;
            t.insert_decoded_part(pid, part);
        }
        t.decode_bumped_from(r)?;
        t.rebuild();
        Ok(t)
    }
}

fn decode_row(
    r: &mut Reader<'_>,
    id: &str,
    now_us: i64,
    next_offset: &dyn Fn(u64) -> Option<u64>,
) -> Result<TxnRow, DecodeError> {
    let producer_id = r.i64()?;
    let epoch = r.u16()? as i16;
    let timeout_ms = r.u32()?;
    let state = match r.u8()? {
        0 => TxnState::Empty,
        1 => TxnState::Ongoing,
        b => return Err(r.malformed(format!("kafka transaction {id:?}: state {b}"))),
    };
    let started_us = r.i64()?;
    let last_us = r.i64()?;
    let last_result = match r.u8()? {
        0 => TxnResult::None,
        1 => TxnResult::Committed,
        2 => TxnResult::Aborted,
        b => return Err(r.malformed(format!("kafka transaction {id:?}: result {b}"))),
    };
    if !(0..=MAX_PRODUCER_ID).contains(&producer_id)
        || epoch < 0
        || timeout_ms == 0
        || timeout_ms > i32::MAX as u32
        || started_us > now_us
        || last_us > now_us
    {
        return Err(r.malformed(format!(
            "kafka transaction {id:?}: producer, epoch, timeout or time out of range"
        )));
    }
    let mut partitions = BTreeMap::new();
    for _ in 0..r.count(9)? {
        let pid = r.u64()?;
        let first = match r.u8()? {
            0 => None,
            1 => Some(r.u64()?),
            b => return Err(r.malformed(format!("kafka transaction {id:?}: tag {b}"))),
        };
        let fits = next_offset(pid).is_some_and(|n| first.is_none_or(|f| f < n));
        if !fits || partitions.insert(pid, first).is_some() {
            return Err(r.malformed(format!(
                "kafka transaction {id:?}: partition {pid} unknown, repeated or past its end"
            )));
        }
    }
    let mut groups = BTreeSet::new();
    for _ in 0..r.count(4)? {
        let g = r.string()?;
        if !groups.insert(g) {
            return Err(r.malformed(format!("kafka transaction {id:?}: group repeated")));
        }
    }
    let mut pending = BTreeMap::new();
    for _ in 0..r.count(4 + 4 + 4 + 8 + 4 + 4)? {
        let key = (r.string()?, r.string()?, r.u32()? as i32);
        let v = PendingOffset {
            offset: r.i64()?,
            leader_epoch: r.u32()? as i32,
            metadata: r.string()?,
        };
        if !groups.contains(&key.0) || pending.insert(key, v).is_some() {
            return Err(r.malformed(format!(
                "kafka transaction {id:?}: pending offset repeated or of a group not added"
            )));
        }
    }
    let holds = !partitions.is_empty() || !groups.is_empty() || !pending.is_empty();
    if state == TxnState::Empty && holds {
        return Err(r.malformed(format!(
            "kafka transaction {id:?}: no transaction open but partitions or offsets held"
        )));
    }
    Ok(TxnRow {
        producer_id,
        epoch,
        timeout_ms,
        state,
        started_us,
        last_us,
        last_result,
        partitions,
        groups,
        pending,
        bumped_from: None,
    })
}

fn decode_part(r: &mut Reader<'_>, pid: u64, next: u64) -> Result<PartTxns, DecodeError> {
    let mut part = PartTxns::default();
    let mut end = 0u64;
    for _ in 0..r.count(8 + 4 + 8 + 2 + 1)? {
        let base = r.u64()?;
        let count = r.u32()?;
        let producer_id = r.i64()?;
        let epoch = r.u16()? as i16;
        let kind_byte = r.u8()?;
        let Some(kind) = StretchKind::from_u8(kind_byte) else {
            return Err(r.malformed(format!("partition {pid}: stretch kind {kind_byte}")));
        };
        let stop = base.saturating_add(u64::from(count));
        if count == 0
            || (kind.is_marker() && count != 1)
            || base < end
            || stop > next
            || !(0..=MAX_PRODUCER_ID).contains(&producer_id)
            || epoch < 0
        {
            return Err(r.malformed(format!(
                "partition {pid}: stretch at {base} of {count} overlaps, passes the end or is bad"
            )));
        }
        end = stop;
        part.stretches.insert(
            base,
            Stretch {
                count,
                producer_id,
                epoch,
                kind,
            },
        );
    }
    let mut aborted = VecDeque::new();
    for _ in 0..r.count(8 + 8 + 8)? {
        let a = AbortedRow {
            producer_id: r.i64()?,
            first_offset: r.u64()?,
            last_offset: r.u64()?,
        };
        if a.first_offset > a.last_offset || a.last_offset >= next {
            return Err(r.malformed(format!(
                "partition {pid}: aborted transaction {}..{} out of range",
                a.first_offset, a.last_offset
            )));
        }
        aborted.push_back(a);
    }
    part.aborted = aborted;
    Ok(part)
}
