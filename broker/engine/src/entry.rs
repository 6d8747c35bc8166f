//! The application payload of one Raft entry: everything one group-commit cycle decided.
//!
//! `version: u8 (1) | cycle: u64 | now_us: i64 | effects: u32 count | effect*`
//! Each effect is `kind: u8` followed by its fields (docs/storage-format.md "Engine entries").
//! Apply is a pure function of (state, entry): the planner stamped every time and minted every id.

use crate::codec::{DecodeError, Reader, Writer};
use crate::state::config::QueueConfig;
use crate::state::model::{CursorRow, LeaseRow};
use queenmq_protocol::EphemeralOptions;

pub const ENTRY_VERSION: u8 = 1;

#[derive(Debug, Clone, PartialEq)]
pub enum Effect<'a> {
    QueueUpsert {
        qid: u64,
        name: &'a str,
        namespace: &'a str,
        task: &'a str,
        configured: bool,
        config: QueueConfig,
    },
    QueueDelete {
        qid: u64,
    },
    PartitionCreate {
        qid: u64,
        pid: u64,
        name: &'a str,
    },
    /// Messages `base_offset..base_offset+hashes.len()` of a partition; `frames` are stored frames.
    Append {
        pid: u64,
        base_offset: u64,
        hashes: Vec<u64>,
        frames: &'a [u8],
    },
    GroupRegister {
        qid: u64,
        gid: u64,
        name: &'a str,
        start_from_us: i64,
    },
    GroupDelete {
        gid: u64,
    },
    CursorPut {
        gid: u64,
        pid: u64,
        row: CursorRow,
    },
    DlqInsert {
        gid: u64,
        pid: u64,
        offset: u64,
        retries: u32,
        error: &'a str,
    },
    TraceAppend {
        pid: u64,
        txn: &'a str,
        group: &'a str,
        names: Vec<&'a str>,
        event_type: &'a str,
        data: &'a str,
    },
    /// A KV row written whole (put, incr, a lock permit); the row's `updated_at` is the
    /// entry's `now_us`, `version` was minted by the planner.
    KvPut {
        ns: &'a str,
        key: &'a str,
        value: &'a str,
        version: u64,
        expires_at_us: Option<i64>,
    },
    /// A KV row removed (delete, release, the expiry sweep).
    KvDelete {
        ns: &'a str,
        key: &'a str,
    },
    /// A timer scheduled or rescheduled (an upsert on `(queue, key)`).
    TimerPut {
        queue: &'a str,
        key: &'a str,
        partition: &'a str,
        txn: &'a str,
        message_id: u128,
        deliver_at_us: i64,
        payload: &'a [u8],
    },
    /// A timer cancelled, or fired by the Append of the same entry.
    TimerDelete {
        queue: &'a str,
        key: &'a str,
    },
    /// A Kafka group's next generation and its chosen protocol (minted by the planner).
    KafkaGeneration {
        group: &'a str,
        generation: i32,
        protocol_type: &'a str,
        protocol_name: &'a str,
    },
    /// A committed Kafka offset; its commit time is the entry's `now_us`.
    KafkaOffsetPut {
        group: &'a str,
        topic: &'a str,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: &'a str,
    },
    KafkaOffsetDelete {
        group: &'a str,
        topic: &'a str,
        partition: i32,
    },
    /// A Kafka group with every offset committed for it.
    KafkaGroupDelete {
        group: &'a str,
    },
    /// Retention moved a partition's first held offset up to `low`, a run's first offset
    /// (state/retention.rs).
    RetentionTrim {
        pid: u64,
        low: u64,
    },
    /// The compactor copied the frames of run `base_offset..base_offset+count` of a partition
    /// forward, unchanged: the run now points at this entry (plan/compaction.rs).
    RunCopy {
        pid: u64,
        base_offset: u64,
        count: u32,
        frames: &'a [u8],
    },
    /// InitProducerId handed out `producer_id` at `epoch` (a new id, or a bumped epoch); the
    /// producer's last activity is the entry's `now_us`.
    KafkaProducerInit {
        producer_id: i64,
        epoch: i16,
    },
    /// An idempotent batch appended at `base_offset` of partition `pid` (by the Append of the
    /// same entry): remembered for the duplicate and sequence checks.
    KafkaProducerBatch {
        producer_id: i64,
        pid: u64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        base_offset: u64,
        records: u32,
    },
    /// A producer idle past `kafka_producer_id_expiration_ms`, or the longest idle when a new
    /// one passes `kafka_max_producer_ids`: forgotten.
    KafkaProducerExpire {
        producer_id: i64,
    },
    /// InitProducerId handed out the new id `producer_id`: the counter moves past it, no
    /// state is made (the first batch makes it).
    KafkaProducerIdTaken {
        producer_id: i64,
    },
    /// Kafka DeleteRecords moved partition `pid`'s first held offset up to exactly `low`
    /// (state/retention.rs `delete_records`).
    KafkaDeleteRecords {
        pid: u64,
        low: u64,
    },
    /// The group registered by the GroupRegister before it in the same entry takes
    /// last-value delivery as its policy (spec native-api §2.5.4); a group without one
    /// delivers every message.
    GroupConflation {
        gid: u64,
    },
    /// A seek of group `gid` to a time: the group now reads from `start_from_us`, the instant
    /// the seek was sent, to the microsecond (state/group_start.rs).
    GroupStartFrom {
        gid: u64,
        start_from_us: i64,
    },
    /// Every dead-letter row of the message at (`pid`, `offset`) removed, whichever group
    /// dead-lettered it (a delete or a retry of that message).
    DlqDelete {
        pid: u64,
        offset: u64,
    },
    /// The dead-letter rows of queue `qid` that match removed: `group` "" and `pid`
    /// [`ANY_PARTITION`] match any; rows failed outside `from_us..=to_us` stay.
    DlqPurge {
        qid: u64,
        group: &'a str,
        pid: u64,
        from_us: i64,
        to_us: i64,
    },
    /// An ephemeral queue declared (or re-declared) with these bounds; its contents live in
    /// the broker's RAM and never reach the log.
    EphemeralConfigSet {
        queue: &'a str,
        options: EphemeralOptions,
    },
    /// An ephemeral queue's declaration removed (none is a no-op).
    EphemeralConfigDelete {
        queue: &'a str,
    },
    /// Kafka transactions, kinds 55..=59 (crate::entry_kafka_txns).
    KafkaTxn(crate::entry_kafka_txns::TxnEffect<'a>),
    /// A tenant's group declared in a cluster, kind 67 (crate::entry_tenants); in the
    /// `default` group's log only, no state of the engine.
    TenantDeclared(crate::entry_tenants::TenantDeclared<'a>),
}

/// `DlqPurge.pid` of a purge over every partition of the queue.
pub const ANY_PARTITION: u64 = u64::MAX;

const K_QUEUE_UPSERT: u8 = 1;
const K_QUEUE_DELETE: u8 = 2;
const K_PARTITION_CREATE: u8 = 3;
const K_APPEND: u8 = 4;
const K_GROUP_REGISTER: u8 = 5;
const K_GROUP_DELETE: u8 = 6;
const K_CURSOR_PUT: u8 = 7;
const K_DLQ_INSERT: u8 = 8;
const K_TRACE_APPEND: u8 = 9;
const K_TIMER_PUT: u8 = 20;
const K_TIMER_DELETE: u8 = 21;
const K_KV_PUT: u8 = 10;
const K_KV_DELETE: u8 = 11;
const K_KAFKA_GENERATION: u8 = 30;
const K_KAFKA_OFFSET_PUT: u8 = 31;
const K_KAFKA_OFFSET_DELETE: u8 = 32;
const K_KAFKA_GROUP_DELETE: u8 = 33;
const K_RETENTION_TRIM: u8 = 40;
const K_KAFKA_PRODUCER_INIT: u8 = 50;
const K_KAFKA_PRODUCER_BATCH: u8 = 51;
const K_KAFKA_PRODUCER_EXPIRE: u8 = 52;
const K_KAFKA_PRODUCER_ID_TAKEN: u8 = 53;
const K_KAFKA_DELETE_RECORDS: u8 = 54;
const K_GROUP_CONFLATION: u8 = 60;
const K_DLQ_DELETE: u8 = 61;
const K_DLQ_PURGE: u8 = 62;
const K_EPHEMERAL_CONFIG_SET: u8 = 63;
const K_EPHEMERAL_CONFIG_DELETE: u8 = 64;
const K_GROUP_START_FROM: u8 = 65;
const K_RUN_COPY: u8 = 80;

pub struct EntryHeader {
    pub cycle: u64,
    pub now_us: i64,
}

/// Builds one entry. Positions returned by [`EntryBuilder::push`] for Append effects are where
/// the frames start inside the finished payload, which is what runs point at.
pub struct EntryBuilder {
    w: Writer,
    count: u32,
}

/// Most elements a decoder reserves room for before it has decoded them.
const PREALLOC_CAP: usize = 1024;
const COUNT_AT: usize = 1 + 8 + 8;

impl EntryBuilder {
    pub fn new(cycle: u64, now_us: i64) -> Self {
        let mut w = Writer::with_capacity(64 * 1024);
        w.u8(ENTRY_VERSION);
        w.u64(cycle);
        w.i64(now_us);
        w.u32(0);
        EntryBuilder { w, count: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn len(&self) -> usize {
        self.w.len()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.w.buf
    }

    /// Encodes an effect; returns the byte position of its frames (Append) or of the effect.
    pub fn push(&mut self, e: &Effect<'_>) -> u32 {
        self.count += 1;
        encode_effect(&mut self.w, e)
    }

    /// The payload, in the build buffer: it has room for a large cycle (64 KiB at least), so
    /// what outlives the cycle (the entry cache, pops sharing its bytes) takes an exact-size
    /// copy (issue 15).
    pub fn finish(mut self) -> Vec<u8> {
        self.w.buf[COUNT_AT..COUNT_AT + 4].copy_from_slice(&self.count.to_le_bytes());
        self.w.buf
    }
}

fn encode_effect(w: &mut Writer, e: &Effect<'_>) -> u32 {
    match e {
        Effect::QueueUpsert {
            qid,
            name,
            namespace,
            task,
            configured,
            config,
        } => {
            w.u8(K_QUEUE_UPSERT);
            w.u64(*qid);
            w.str(name);
            w.str(namespace);
            w.str(task);
            w.bool(*configured);
            config.encode(w);
        }
        Effect::QueueDelete { qid } => {
            w.u8(K_QUEUE_DELETE);
            w.u64(*qid);
        }
        Effect::PartitionCreate { qid, pid, name } => {
            w.u8(K_PARTITION_CREATE);
            w.u64(*qid);
            w.u64(*pid);
            w.str(name);
        }
        Effect::Append {
            pid,
            base_offset,
            hashes,
            frames,
        } => {
            w.u8(K_APPEND);
            w.u64(*pid);
            w.u64(*base_offset);
            w.u32(hashes.len() as u32);
            for h in hashes {
                w.u64(*h);
            }
            w.u32(frames.len() as u32);
            let pos = w.len() as u32;
            w.buf.extend_from_slice(frames);
            return pos;
        }
        Effect::GroupRegister {
            qid,
            gid,
            name,
            start_from_us,
        } => {
            w.u8(K_GROUP_REGISTER);
            w.u64(*qid);
            w.u64(*gid);
            w.str(name);
            w.i64(*start_from_us);
        }
        Effect::GroupDelete { gid } => {
            w.u8(K_GROUP_DELETE);
            w.u64(*gid);
        }
        Effect::CursorPut { gid, pid, row } => {
            w.u8(K_CURSOR_PUT);
            w.u64(*gid);
            w.u64(*pid);
            encode_cursor(w, row);
        }
        Effect::DlqInsert {
            gid,
            pid,
            offset,
            retries,
            error,
        } => {
            w.u8(K_DLQ_INSERT);
            w.u64(*gid);
            w.u64(*pid);
            w.u64(*offset);
            w.u32(*retries);
            w.str(error);
        }
        Effect::TraceAppend {
            pid,
            txn,
            group,
            names,
            event_type,
            data,
        } => {
            w.u8(K_TRACE_APPEND);
            w.u64(*pid);
            w.str(txn);
            w.str(group);
            w.u32(names.len() as u32);
            for n in names {
                w.str(n);
            }
            w.str(event_type);
            w.str(data);
        }
        Effect::KvPut {
            ns,
            key,
            value,
            version,
            expires_at_us,
        } => {
            w.u8(K_KV_PUT);
            w.str(ns);
            w.str(key);
            w.str(value);
            w.u64(*version);
            crate::state::kv::encode_expiry(w, *expires_at_us);
        }
        Effect::KvDelete { ns, key } => {
            w.u8(K_KV_DELETE);
            w.str(ns);
            w.str(key);
        }
        Effect::KafkaGeneration {
            group,
            generation,
            protocol_type,
            protocol_name,
        } => {
            w.u8(K_KAFKA_GENERATION);
            w.str(group);
            w.u32(*generation as u32);
            w.str(protocol_type);
            w.str(protocol_name);
        }
        Effect::KafkaOffsetPut {
            group,
            topic,
            partition,
            offset,
            leader_epoch,
            metadata,
        } => {
            w.u8(K_KAFKA_OFFSET_PUT);
            w.str(group);
            w.str(topic);
            w.u32(*partition as u32);
            w.i64(*offset);
            w.u32(*leader_epoch as u32);
            w.str(metadata);
        }
        Effect::KafkaOffsetDelete {
            group,
            topic,
            partition,
        } => {
            w.u8(K_KAFKA_OFFSET_DELETE);
            w.str(group);
            w.str(topic);
            w.u32(*partition as u32);
        }
        Effect::KafkaGroupDelete { group } => {
            w.u8(K_KAFKA_GROUP_DELETE);
            w.str(group);
        }
        Effect::TimerPut {
            queue,
            key,
            partition,
            txn,
            message_id,
            deliver_at_us,
            payload,
        } => {
            w.u8(K_TIMER_PUT);
            w.str(queue);
            w.str(key);
            w.str(partition);
            w.str(txn);
            w.u128(*message_id);
            w.i64(*deliver_at_us);
            w.bytes(payload);
        }
        Effect::TimerDelete { queue, key } => {
            w.u8(K_TIMER_DELETE);
            w.str(queue);
            w.str(key);
        }
        Effect::GroupConflation { gid } => {
            w.u8(K_GROUP_CONFLATION);
            w.u64(*gid);
        }
        Effect::GroupStartFrom { gid, start_from_us } => {
            w.u8(K_GROUP_START_FROM);
            w.u64(*gid);
            w.i64(*start_from_us);
        }
        Effect::DlqDelete { pid, offset } => {
            w.u8(K_DLQ_DELETE);
            w.u64(*pid);
            w.u64(*offset);
        }
        Effect::DlqPurge {
            qid,
            group,
            pid,
            from_us,
            to_us,
        } => {
            w.u8(K_DLQ_PURGE);
            w.u64(*qid);
            w.str(group);
            w.u64(*pid);
            w.i64(*from_us);
            w.i64(*to_us);
        }
        Effect::EphemeralConfigSet { queue, options } => {
            w.u8(K_EPHEMERAL_CONFIG_SET);
            w.str(queue);
            encode_ephemeral_options(w, options);
        }
        Effect::EphemeralConfigDelete { queue } => {
            w.u8(K_EPHEMERAL_CONFIG_DELETE);
            w.str(queue);
        }
        Effect::RetentionTrim { pid, low } => {
            w.u8(K_RETENTION_TRIM);
            w.u64(*pid);
            w.u64(*low);
        }
        Effect::RunCopy {
            pid,
            base_offset,
            count,
            frames,
        } => {
            w.u8(K_RUN_COPY);
            w.u64(*pid);
            w.u64(*base_offset);
            w.u32(*count);
            w.u32(frames.len() as u32);
            let pos = w.len() as u32;
            w.buf.extend_from_slice(frames);
            return pos;
        }
        Effect::KafkaProducerInit { producer_id, epoch } => {
            w.u8(K_KAFKA_PRODUCER_INIT);
            w.i64(*producer_id);
            w.u16(*epoch as u16);
        }
        Effect::KafkaProducerBatch {
            producer_id,
            pid,
            epoch,
            first_seq,
            last_seq,
            base_offset,
            records,
        } => {
            w.u8(K_KAFKA_PRODUCER_BATCH);
            w.i64(*producer_id);
            w.u64(*pid);
            w.u16(*epoch as u16);
            w.u32(*first_seq as u32);
            w.u32(*last_seq as u32);
            w.u64(*base_offset);
            w.u32(*records);
        }
        Effect::KafkaProducerExpire { producer_id } => {
            w.u8(K_KAFKA_PRODUCER_EXPIRE);
            w.i64(*producer_id);
        }
        Effect::KafkaProducerIdTaken { producer_id } => {
            w.u8(K_KAFKA_PRODUCER_ID_TAKEN);
            w.i64(*producer_id);
        }
        Effect::KafkaDeleteRecords { pid, low } => {
            w.u8(K_KAFKA_DELETE_RECORDS);
            w.u64(*pid);
            w.u64(*low);
        }
        Effect::KafkaTxn(t) => crate::entry_kafka_txns::encode(w, t),
        Effect::TenantDeclared(t) => crate::entry_tenants::encode(w, t),
    }
    w.len() as u32
}

pub fn encode_cursor(w: &mut Writer, row: &CursorRow) {
    w.u64(row.committed);
    w.u32(row.failures);
    w.u32(row.attempt);
    w.u64(row.delivered_end);
    match &row.lease {
        None => w.u8(0),
        Some(l) => {
            w.u8(1);
            w.u128(l.id);
            w.u64(l.end);
            w.i64(l.expires_us);
            w.u32(l.seconds);
        }
    }
}

pub fn decode_cursor(r: &mut Reader<'_>) -> Result<CursorRow, DecodeError> {
    let committed = r.u64()?;
    let failures = r.u32()?;
    let attempt = r.u32()?;
    let delivered_end = r.u64()?;
    let lease = match r.u8()? {
        0 => None,
        1 => Some(LeaseRow {
            id: r.u128()?,
            end: r.u64()?,
            expires_us: r.i64()?,
            seconds: r.u32()?,
        }),
        v => return Err(r.malformed(format!("lease tag {v}"))),
    };
    Ok(CursorRow {
        committed,
        lease,
        failures,
        attempt,
        delivered_end,
    })
}

/// Decodes an entry: its header and each effect with the byte position of its frames.
pub fn decode_entry(buf: &[u8]) -> Result<(EntryHeader, Vec<(Effect<'_>, u32)>), DecodeError> {
    let mut r = Reader::new(buf);
    let v = r.u8()?;
    if v != ENTRY_VERSION {
        return Err(r.malformed(format!("entry version {v}, expected {ENTRY_VERSION}")));
    }
    let header = EntryHeader {
        cycle: r.u64()?,
        now_us: r.i64()?,
    };
    // The smallest effect: KafkaGroupDelete, a kind byte and a string length.
    let n = r.count(5)?;
    // An effect in memory is many times its smallest encoding: a count that the buffer
    // allows still must not size the vector up front (it grows as effects really decode).
    let mut effects = Vec::with_capacity(n.min(PREALLOC_CAP));
    for _ in 0..n {
        effects.push(decode_effect(&mut r)?);
    }
    if !r.is_done() {
        return Err(r.malformed("trailing bytes after the last effect".into()));
    }
    Ok((header, effects))
}

/// A Kafka producer id as apply may hold it: one InitProducerId can have handed out.
fn producer_id(r: &mut Reader<'_>) -> Result<i64, DecodeError> {
    let id = r.i64()?;
    if !(0..=queenmq_protocol::kafka_producers::MAX_PRODUCER_ID).contains(&id) {
        return Err(r.malformed(format!("kafka producer id {id} out of range")));
    }
    Ok(id)
}

fn producer_epoch(r: &mut Reader<'_>) -> Result<i16, DecodeError> {
    let epoch = r.u16()? as i16;
    if epoch < 0 {
        return Err(r.malformed(format!("kafka producer epoch {epoch}")));
    }
    Ok(epoch)
}

fn sequence(r: &mut Reader<'_>) -> Result<i32, DecodeError> {
    let seq = r.u32()? as i32;
    if seq < 0 {
        return Err(r.malformed(format!("kafka producer sequence {seq}")));
    }
    Ok(seq)
}

fn decode_effect<'a>(r: &mut Reader<'a>) -> Result<(Effect<'a>, u32), DecodeError> {
    let kind = r.u8()?;
    let e = match kind {
        K_QUEUE_UPSERT => Effect::QueueUpsert {
            qid: r.u64()?,
            name: r.str()?,
            namespace: r.str()?,
            task: r.str()?,
            configured: r.bool()?,
            config: QueueConfig::decode(r)?,
        },
        K_QUEUE_DELETE => Effect::QueueDelete { qid: r.u64()? },
        K_PARTITION_CREATE => Effect::PartitionCreate {
            qid: r.u64()?,
            pid: r.u64()?,
            name: r.str()?,
        },
        K_APPEND => {
            let pid = r.u64()?;
            let base_offset = r.u64()?;
            let n = r.count(8)?;
            let mut hashes = Vec::with_capacity(n);
            for _ in 0..n {
                hashes.push(r.u64()?);
            }
            let len = r.u32()? as usize;
            let pos = r.pos() as u32;
            let frames = r.take(len)?;
            return Ok((
                Effect::Append {
                    pid,
                    base_offset,
                    hashes,
                    frames,
                },
                pos,
            ));
        }
        K_GROUP_REGISTER => Effect::GroupRegister {
            qid: r.u64()?,
            gid: r.u64()?,
            name: r.str()?,
            start_from_us: r.i64()?,
        },
        K_GROUP_DELETE => Effect::GroupDelete { gid: r.u64()? },
        K_CURSOR_PUT => Effect::CursorPut {
            gid: r.u64()?,
            pid: r.u64()?,
            row: decode_cursor(r)?,
        },
        K_DLQ_INSERT => Effect::DlqInsert {
            gid: r.u64()?,
            pid: r.u64()?,
            offset: r.u64()?,
            retries: r.u32()?,
            error: r.str()?,
        },
        K_TRACE_APPEND => {
            let pid = r.u64()?;
            let txn = r.str()?;
            let group = r.str()?;
            let n = r.count(4)?;
            let mut names = Vec::with_capacity(n.min(PREALLOC_CAP));
            for _ in 0..n {
                names.push(r.str()?);
            }
            Effect::TraceAppend {
                pid,
                txn,
                group,
                names,
                event_type: r.str()?,
                data: r.str()?,
            }
        }
        K_TIMER_PUT => Effect::TimerPut {
            queue: r.str()?,
            key: r.str()?,
            partition: r.str()?,
            txn: r.str()?,
            message_id: r.u128()?,
            deliver_at_us: r.i64()?,
            payload: r.bytes()?,
        },
        K_TIMER_DELETE => Effect::TimerDelete {
            queue: r.str()?,
            key: r.str()?,
        },
        K_KV_PUT => Effect::KvPut {
            ns: r.str()?,
            key: r.str()?,
            value: r.str()?,
            version: r.u64()?,
            expires_at_us: crate::state::kv::decode_expiry(r)?,
        },
        K_KV_DELETE => Effect::KvDelete {
            ns: r.str()?,
            key: r.str()?,
        },
        K_KAFKA_GENERATION => Effect::KafkaGeneration {
            group: r.str()?,
            generation: r.u32()? as i32,
            protocol_type: r.str()?,
            protocol_name: r.str()?,
        },
        K_KAFKA_OFFSET_PUT => Effect::KafkaOffsetPut {
            group: r.str()?,
            topic: r.str()?,
            partition: r.u32()? as i32,
            offset: r.i64()?,
            leader_epoch: r.u32()? as i32,
            metadata: r.str()?,
        },
        K_KAFKA_OFFSET_DELETE => Effect::KafkaOffsetDelete {
            group: r.str()?,
            topic: r.str()?,
            partition: r.u32()? as i32,
        },
        K_KAFKA_GROUP_DELETE => Effect::KafkaGroupDelete { group: r.str()? },
        K_GROUP_CONFLATION => Effect::GroupConflation { gid: r.u64()? },
        K_GROUP_START_FROM => Effect::GroupStartFrom {
            gid: r.u64()?,
            start_from_us: r.i64()?,
        },
        K_DLQ_DELETE => Effect::DlqDelete {
            pid: r.u64()?,
            offset: r.u64()?,
        },
        K_DLQ_PURGE => Effect::DlqPurge {
            qid: r.u64()?,
            group: r.str()?,
            pid: r.u64()?,
            from_us: r.i64()?,
            to_us: r.i64()?,
        },
        K_EPHEMERAL_CONFIG_SET => Effect::EphemeralConfigSet {
            queue: decode_ephemeral_name(r)?,
            options: decode_ephemeral_options(r)?,
        },
        K_EPHEMERAL_CONFIG_DELETE => Effect::EphemeralConfigDelete {
            queue: decode_ephemeral_name(r)?,
        },
        K_RETENTION_TRIM => Effect::RetentionTrim {
            pid: r.u64()?,
            low: r.u64()?,
        },
        K_RUN_COPY => {
            let pid = r.u64()?;
            let base_offset = r.u64()?;
            let count = r.u32()?;
            let len = r.u32()? as usize;
            let pos = r.pos() as u32;
            let frames = r.take(len)?;
            return Ok((
                Effect::RunCopy {
                    pid,
                    base_offset,
                    count,
                    frames,
                },
                pos,
            ));
        }
        K_KAFKA_PRODUCER_INIT => Effect::KafkaProducerInit {
            producer_id: producer_id(r)?,
            epoch: producer_epoch(r)?,
        },
        K_KAFKA_PRODUCER_BATCH => Effect::KafkaProducerBatch {
            producer_id: producer_id(r)?,
            pid: r.u64()?,
            epoch: producer_epoch(r)?,
            first_seq: sequence(r)?,
            last_seq: sequence(r)?,
            base_offset: r.u64()?,
            records: r.u32()?,
        },
        K_KAFKA_PRODUCER_EXPIRE => Effect::KafkaProducerExpire {
            producer_id: producer_id(r)?,
        },
        K_KAFKA_PRODUCER_ID_TAKEN => Effect::KafkaProducerIdTaken {
            producer_id: producer_id(r)?,
        },
        K_KAFKA_DELETE_RECORDS => Effect::KafkaDeleteRecords {
            pid: r.u64()?,
            low: r.u64()?,
        },
        crate::entry_tenants::K_TENANT_DECLARED => {
            Effect::TenantDeclared(crate::entry_tenants::decode(r)?)
        }
        k => match crate::entry_kafka_txns::decode(k, r) {
            Some(t) => Effect::KafkaTxn(t?),
            None => return Err(r.malformed(format!("unknown effect kind {k}"))),
        },
    };
    Ok((e, r.pos() as u32))
}

/// `max_bytes u64 | max_length u32 | policy u8 (0 reject, 1 dropOldest) | ttl_seconds u32 |
/// lease_seconds u32 | retry_limit u32 | window_ms u32 | window_count u32`; shared by effect 63
/// and checkpoint section 7.
pub fn encode_ephemeral_options(w: &mut Writer, o: &EphemeralOptions) {
    w.u64(o.max_bytes);
    w.u32(o.max_length);
    w.u8(u8::from(o.drop_oldest));
    w.u32(o.ttl_seconds);
    w.u32(o.lease_seconds);
    w.u32(o.retry_limit);
    w.u32(o.window_ms);
    w.u32(o.window_count);
}

/// An ephemeral queue's name as the planner took it (≤ 512 bytes, no control characters,
/// not empty): the RAM store is seeded with it, so a name no route accepts is refused here.
pub fn decode_ephemeral_name<'a>(r: &mut Reader<'a>) -> Result<&'a str, DecodeError> {
    let name = r.str()?;
    queenmq_protocol::ephemeral::check_ephemeral_name(name)
        .map_err(|e| r.malformed(format!("ephemeral queue name: {}", e.message)))?;
    Ok(name)
}

/// Refuses an unknown policy or a bound outside the documented ranges: apply never writes one.
pub fn decode_ephemeral_options(r: &mut Reader<'_>) -> Result<EphemeralOptions, DecodeError> {
    let max_bytes = r.u64()?;
    let max_length = r.u32()?;
    let drop_oldest = match r.u8()? {
        0 => false,
        1 => true,
        p => return Err(r.malformed(format!("ephemeral policy {p}"))),
    };
    let o = EphemeralOptions {
        max_bytes,
        max_length,
        drop_oldest,
        ttl_seconds: r.u32()?,
        lease_seconds: r.u32()?,
        retry_limit: r.u32()?,
        window_ms: r.u32()?,
        window_count: r.u32()?,
    };
    o.check()
        .map_err(|e| r.malformed(format!("ephemeral options: {}", e.message)))?;
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_round_trip_keeps_frame_positions() {
        let mut b = EntryBuilder::new(9, 1234);
        b.push(&Effect::PartitionCreate {
            qid: 1,
            pid: 2,
            name: "Default",
        });
        let pos = b.push(&Effect::Append {
            pid: 2,
            base_offset: 0,
            hashes: vec![7, 8],
            frames: b"FRAMES",
        });
        let row = CursorRow {
            committed: 3,
            lease: Some(LeaseRow {
                id: 5,
                end: 9,
                expires_us: 77,
                seconds: 30,
            }),
            ..Default::default()
        };
        b.push(&Effect::CursorPut {
            gid: 4,
            pid: 2,
            row,
        });
        let buf = b.finish();
        assert_eq!(&buf[pos as usize..pos as usize + 6], b"FRAMES");
        let (h, effects) = decode_entry(&buf).unwrap();
        assert_eq!((h.cycle, h.now_us, effects.len()), (9, 1234, 3));
        assert_eq!(effects[1].1, pos);
        assert_eq!(
            effects[2].0,
            Effect::CursorPut {
                gid: 4,
                pid: 2,
                row
            }
        );
    }

    fn assert_round_trips(effects: &[Effect<'_>]) {
        let mut b = EntryBuilder::new(1, 2);
        for e in effects {
            b.push(e);
        }
        let buf = b.finish();
        let (_, back) = decode_entry(&buf).expect("decodes");
        let back: Vec<_> = back.into_iter().map(|(e, _)| e).collect();
        assert_eq!(back, effects);
    }

    #[test]
    fn kafka_group_effects_round_trip() {
        let effects = [
            Effect::KafkaGeneration {
                group: "g",
                generation: i32::MAX,
                protocol_type: "consumer",
                protocol_name: "range",
            },
            Effect::KafkaOffsetPut {
                group: "g",
                topic: "t",
                partition: 3,
                offset: -1,
                leader_epoch: -1,
                metadata: "m ü",
            },
            Effect::KafkaOffsetDelete {
                group: "g",
                topic: "t",
                partition: 0,
            },
            // Shorter than any other effect: the entry's count bound must still admit it.
            Effect::KafkaGroupDelete { group: "" },
        ];
        assert_round_trips(&effects);
    }

    #[test]
    fn kafka_producer_effects_round_trip() {
        let effects = [
            Effect::KafkaProducerInit {
                producer_id: queenmq_protocol::kafka_producers::MAX_PRODUCER_ID,
                epoch: i16::MAX - 1,
            },
            Effect::KafkaProducerBatch {
                producer_id: 3,
                pid: 9,
                epoch: 0,
                first_seq: i32::MAX,
                last_seq: 4,
                base_offset: 1 << 40,
                records: 6,
            },
            Effect::KafkaProducerExpire { producer_id: 3 },
            Effect::KafkaProducerIdTaken { producer_id: 0 },
            Effect::KafkaDeleteRecords {
                pid: 4,
                low: 1 << 40,
            },
        ];
        assert_round_trips(&effects);
    }

    #[test]
    fn kafka_producer_effects_out_of_range_are_refused() {
        for e in [
            Effect::KafkaProducerInit {
                producer_id: -1,
                epoch: 0,
            },
            Effect::KafkaProducerInit {
                producer_id: i64::MAX,
                epoch: 0,
            },
            Effect::KafkaProducerInit {
                producer_id: 1,
                epoch: -1,
            },
            Effect::KafkaProducerBatch {
                producer_id: 1,
                pid: 1,
                epoch: 0,
                first_seq: -1,
                last_seq: 0,
                base_offset: 0,
                records: 1,
            },
            Effect::KafkaProducerIdTaken {
                producer_id: i64::MAX,
            },
        ] {
            let mut b = EntryBuilder::new(1, 1);
            b.push(&e);
            assert!(decode_entry(&b.finish()).is_err(), "{e:?} decoded");
        }
    }

    #[test]
    fn conflation_and_dead_letter_effects_round_trip() {
        let effects = [
            Effect::GroupConflation { gid: u64::MAX - 1 },
            Effect::GroupStartFrom {
                gid: 9,
                start_from_us: 1_709_618_828_123_000,
            },
            Effect::DlqDelete {
                pid: 7,
                offset: 1 << 40,
            },
            Effect::DlqPurge {
                qid: 3,
                group: "g ü",
                pid: ANY_PARTITION,
                from_us: i64::MIN,
                to_us: i64::MAX,
            },
        ];
        assert_round_trips(&effects);
    }

    #[test]
    fn ephemeral_config_effects_round_trip() {
        let effects = [
            Effect::EphemeralConfigSet {
                queue: "presence ü",
                options: EphemeralOptions {
                    drop_oldest: true,
                    ttl_seconds: 60,
                    window_ms: 5,
                    window_count: 7,
                    ..Default::default()
                },
            },
            Effect::EphemeralConfigDelete {
                queue: "presence ü",
            },
        ];
        assert_round_trips(&effects);
        let mut b = EntryBuilder::new(1, 1);
        b.push(&Effect::EphemeralConfigSet {
            queue: "q",
            options: EphemeralOptions::default(),
        });
        let mut buf = b.finish();
        // The policy byte sits after the name (4 + 1) and max_bytes, max_length (12).
        let at = buf.len() - 4 * 5 - 1;
        buf[at] = 9;
        assert!(decode_entry(&buf).is_err(), "unknown policy decoded");
    }

    #[test]
    fn an_ephemeral_name_no_route_accepts_is_refused_on_decode() {
        let long = "q".repeat(513);
        for queue in [long.as_str(), "", "a\nb"] {
            for effect in [
                Effect::EphemeralConfigSet {
                    queue,
                    options: EphemeralOptions::default(),
                },
                Effect::EphemeralConfigDelete { queue },
            ] {
                let mut b = EntryBuilder::new(1, 1);
                b.push(&effect);
                assert!(decode_entry(&b.finish()).is_err(), "{effect:?} decoded");
            }
        }
        let ok = "q".repeat(512);
        let mut b = EntryBuilder::new(1, 1);
        b.push(&Effect::EphemeralConfigDelete { queue: &ok });
        assert!(decode_entry(&b.finish()).is_ok());
    }

    #[test]
    fn kv_effects_round_trip() {
        let mut b = EntryBuilder::new(3, 50);
        let put = Effect::KvPut {
            ns: "ns",
            key: "k",
            value: "{\"a\":1}",
            version: 9,
            expires_at_us: Some(77),
        };
        let forever = Effect::KvPut {
            ns: "ns",
            key: "k2",
            value: "null",
            version: 10,
            expires_at_us: None,
        };
        let delete = Effect::KvDelete { ns: "ns", key: "k" };
        let trim = Effect::RetentionTrim {
            pid: 7,
            low: 1 << 40,
        };
        let copy = Effect::RunCopy {
            pid: 9,
            base_offset: 1 << 33,
            count: 2,
            frames: b"COPIED",
        };
        let mut copy_pos = 0;
        for e in [&put, &forever, &delete, &trim, &copy] {
            copy_pos = b.push(e);
        }
        let buf = b.finish();
        assert_eq!(&buf[copy_pos as usize..copy_pos as usize + 6], b"COPIED");
        let (_, effects) = decode_entry(&buf).unwrap();
        assert_eq!(effects.last().map(|(_, pos)| *pos), Some(copy_pos));
        let got: Vec<_> = effects.into_iter().map(|(e, _)| e).collect();
        assert_eq!(got, vec![put, forever, delete, trim, copy]);
    }

    #[test]
    fn corrupt_entries_are_refused() {
        let buf = EntryBuilder::new(1, 1).finish();
        assert!(decode_entry(&buf[..5]).is_err());
        let mut bad = buf.clone();
        bad[0] = 99;
        assert!(decode_entry(&bad).is_err());
        let mut huge = buf;
        huge[COUNT_AT..COUNT_AT + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_entry(&huge).is_err());
    }
}
