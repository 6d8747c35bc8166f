//! Checkpoint encoding of the state (docs/storage-format.md "Checkpoint blob").
//! Only replicated rows are written; derived indexes are rebuilt on decode.

use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};

use super::config::QueueConfig;
use super::model::*;
use super::partition_table::PartitionsSnapshot;
use super::{
    CursorMap, CursorsSnapshot, NameIndex, PartitionOrder, State, TxnIds, TxnRow, TxnSnapshot,
};
use crate::codec::{DecodeError, Reader, Writer};
use crate::entry::{decode_cursor, encode_cursor};

/// 2: transaction ids as one FIFO of Appends after the queues (1 kept one per partition).
/// 3: tagged sections after the traces (tag 1: KV rows, tag 2: timers); 2 is read with them
/// empty.
const CHECKPOINT_VERSION: u8 = 3;
/// Section tags of version 3 (docs/storage-format.md "Checkpoint blob").
const SECTION_KV: u8 = 1;
const SECTION_TIMERS: u8 = 2;
const SECTION_KAFKA_GROUPS: u8 = 3;
const SECTION_KAFKA_PRODUCERS: u8 = 4;
/// The ids of the groups whose policy is last-value delivery (`Group::conflation`).
const SECTION_CONFLATION: u8 = 5;
/// The declared ephemeral queues (`State::ephemeral`).
const SECTION_EPHEMERAL: u8 = 7;
/// Kafka transactions (docs/kafka-transactions.md "Checkpoint section 8").
const SECTION_KAFKA_TXNS: u8 = 8;
/// Tenants declared in a cluster (`State::tenants`, the `default` group's).
const SECTION_TENANTS: u8 = 9;
/// Partition ids index a dense table (`PartitionTable`), so an id read from a checkpoint sizes
/// an allocation: ids must lie below `next_partition_id`, as apply keeps them, and that at or
/// below 2^32 (a chunk index of 24 MiB at most). A corrupt id once asked for 6 GiB (fuzz
/// target `state`).
pub const MAX_NEXT_PARTITION_ID: u64 = 1 << 32;
/// Queue ids are below 2^32 since session 35: a partition's row holds its queue's id in 32 bits
/// (`model::Partition`, 8 B of the row). Decode refuses a queue past that and apply skips its
/// upsert (no node hands out 4 billion queue ids, so no checkpoint written before holds one).
pub const MAX_NEXT_QUEUE_ID: u64 = 1 << 32;
/// Group ids key hash maps, so decode takes any, but a group row of id u64::MAX reads as a
/// deleted one and no next id follows u64::MAX: the planner hands out ids below.
pub const MAX_NEXT_GROUP_ID: u64 = u64::MAX;

pub fn encode_state(s: &State) -> Vec<u8> {
    begin_checkpoint(s).finish()
}

/// A checkpoint taken under the state lock, to be finished after releasing it. Under the lock
/// only the rows nothing shares are encoded (queues, DLQ rows, groups, traces, the sections);
/// the partitions with their runs, the queues' partition ids, the groups' cursors and the
/// transaction-id FIFO, the bulk under load, are snapshots of shared blocks
/// (`PartitionsSnapshot`, `PartitionOrder`, `CursorsSnapshot`, `TxnSnapshot`) that `encode`
/// and `emit` write off the lock, in the same bytes the lock once held.
pub struct PendingCheckpoint {
    head: HeadParts,
    partitions: PartitionsSnapshot,
    txn: TxnSnapshot,
}

/// Everything up to the transaction-id FIFO with the partitions' and the cursors' records left
/// out: they go at `holes` (a byte position in `buf`, and what is written there).
struct HeadParts {
    buf: Vec<u8>,
    holes: Vec<(usize, Hole)>,
    /// Version 1's transaction rows, written inside each partition's record (tests only).
    v1_rows: Option<HashMap<u64, Vec<(i64, u64)>>>,
    sections: Option<Sections>,
}

/// What goes at a hole of the head, taken under the lock as shared blocks.
enum Hole {
    /// A queue's partition ids in creation order: their records (the count is in the head).
    Partitions(PartitionOrder),
    /// A group's cursors: `(pid, row)` records (the count is in the head).
    Cursors(CursorsSnapshot),
}

impl Hole {
    /// About the bytes its records take, to size the buffer once.
    fn encoded_hint(&self, parts: &PartitionsSnapshot) -> usize {
        match self {
            Hole::Partitions(pids) => pids
                .iter()
                .map(|pid| {
                    parts
                        .get(&pid)
                        .map_or(8, |p| 64 + p.name.len() + p.runs.len() * 32)
                })
                .sum(),
            Hole::Cursors(c) => c.len() * MAX_CURSOR_RECORD,
        }
    }
}

/// A cursor's record at most: pid 8, committed 8, failures 4, attempt 4, delivered end 8, the
/// lease's tag 1 and body 36.
const MAX_CURSOR_RECORD: usize = 69;

/// Version 3's sections, but for the count and the producers section: whether that one is
/// written, and its DeleteRecords floors, come from the partitions.
struct Sections {
    /// Sections written, the producers' not counted.
    count: u32,
    /// KV, timers and Kafka groups, whole (tag, length, body).
    before: Vec<u8>,
    /// The producers section's body up to its floors.
    producers: Vec<u8>,
    /// A producer id was handed out: the section is written even with no floors.
    producers_held: bool,
    /// Conflation, ephemeral queues and Kafka transactions, whole.
    after: Vec<u8>,
}

pub fn begin_checkpoint(s: &State) -> PendingCheckpoint {
    PendingCheckpoint {
        head: take_head(s, CHECKPOINT_VERSION),
        partitions: s.partitions.snapshot(),
        txn: s.txn_ids.snapshot(),
    }
}

impl PendingCheckpoint {
    /// The bytes encoded under the lock: the checkpoint's head without its partitions, and the
    /// section count and producers section's tag and length still to come (9 bytes).
    pub fn taken_len(&self) -> usize {
        let sections = self.head.sections.as_ref().map_or(0, |s| {
            s.before.len() + s.producers.len() + s.after.len() + 4 + 5
        });
        self.head.buf.len() + sections
    }

    /// About what `encode` and `emit` will hold besides the state (the memory account counts
    /// it before they run): the head taken, twice while `encode` splices it, the partitions'
    /// records (at most `partition_bytes`, the table's size in memory: a record encodes to
    /// fewer bytes than its row and run index hold) and as much again for the chunks the
    /// engine copies while this snapshot still shares them, the cursors' records and the
    /// shards and id chunks the engine may copy likewise (`off_lock_rows`), and what writing
    /// the rows holds (`held_while_written`).
    pub fn held_estimate(
        &self,
        partition_bytes: usize,
        store_chunk_bytes: usize,
        store_cache_bytes: usize,
    ) -> usize {
        let (cursor_records, copies) = self.off_lock_rows();
        let head = self
            .taken_len()
            .saturating_add(partition_bytes)
            .saturating_add(cursor_records);
        let len = head.saturating_add(txn_len(&self.txn));
        head.saturating_add(self.taken_len())
            .saturating_add(partition_bytes)
            .saturating_add(copies)
            .saturating_add(len.saturating_sub(head).min(PIECE_BYTES))
            .saturating_add(len.min(store_chunk_bytes))
            .saturating_add(len.min(store_cache_bytes))
    }

    /// The cursors' records at most, and what copies of the blocks this snapshot shares
    /// besides the partition table's can hold at most: every cursor shard and each queue's
    /// last chunk of partition ids, by capacity (a copy keeps its original's buckets).
    fn off_lock_rows(&self) -> (usize, usize) {
        let (mut records, mut copies) = (0usize, 0usize);
        for (_, hole) in &self.head.holes {
            match hole {
                Hole::Cursors(c) => {
                    records = records.saturating_add(c.len().saturating_mul(MAX_CURSOR_RECORD));
                    copies = copies.saturating_add(c.held_bytes());
                }
                Hole::Partitions(pids) => {
                    copies = copies.saturating_add(pids.last_chunk_bytes());
                }
            }
        }
        (records, copies)
    }

    /// Encodes the partitions into the head, off the lock: the head is then byte for byte
    /// what encoding the state at `begin_checkpoint` gave, whatever the engine did since.
    pub fn encode(self) -> ReadyCheckpoint {
        let HeadParts {
            buf,
            holes,
            v1_rows,
            sections,
        } = self.head;
        let parts = &self.partitions;
        let records: usize = holes.iter().map(|(_, h)| h.encoded_hint(parts)).sum();
        let rest = sections.as_ref().map_or(0, |s| {
            64 + s.before.len() + s.producers.len() + s.after.len()
        });
        let mut w = Writer::with_capacity(buf.len() + records + rest);
        let mut at = 0;
        for (pos, hole) in &holes {
            w.buf.extend_from_slice(buf.get(at..*pos).unwrap_or(&[]));
            at = *pos;
            match hole {
                Hole::Partitions(pids) => {
                    for pid in pids {
                        encode_partition(&mut w, parts.get(&pid), &pid, v1_rows.as_ref());
                    }
                }
                Hole::Cursors(cursors) => {
                    for (pid, row) in cursors.iter() {
                        w.u64(*pid);
                        encode_cursor(&mut w, row);
                    }
                }
            }
        }
        w.buf.extend_from_slice(buf.get(at..).unwrap_or(&[]));
        drop(buf);
        if let Some(sections) = sections {
            sections.write(&mut w, parts);
        }
        ReadyCheckpoint {
            head: w,
            txn: self.txn,
        }
    }

    /// The whole checkpoint in one buffer (start-up, tests).
    pub fn finish(self) -> Vec<u8> {
        self.encode().finish()
    }
}

/// A checkpoint whose head is encoded, its transaction-id rows still shared blocks.
pub struct ReadyCheckpoint {
    head: Writer,
    txn: TxnSnapshot,
}

/// The transaction-id rows are emitted in pieces of about this size.
const PIECE_BYTES: usize = 1 << 20;

fn txn_len(txn: &TxnSnapshot) -> usize {
    4 + txn.groups() * 12 + txn.rows() * 24
}

impl ReadyCheckpoint {
    /// The length `finish` will return, known before the buffer is built.
    pub fn encoded_len(&self) -> usize {
        self.head.buf.len() + txn_len(&self.txn)
    }

    /// What writing it holds at most: the head, one piece of rows, the store's chunk being
    /// filled and the store's cache, which holds the written chunks until it flushes them.
    /// The store's two sizes are its own (queenmq_storage's `CHECKPOINT_CHUNK_BYTES` and
    /// `STATE_CACHE_BYTES`): the engine does not link the store.
    pub fn held_while_written(&self, store_chunk_bytes: usize, store_cache_bytes: usize) -> usize {
        let len = self.encoded_len();
        let rows = len - self.head.buf.len();
        self.head.buf.len()
            + rows.min(PIECE_BYTES)
            + len.min(store_chunk_bytes)
            + len.min(store_cache_bytes)
    }

    /// The whole checkpoint in one buffer.
    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.emit(|b| out.extend_from_slice(b));
        out
    }

    /// Hands the checkpoint to `out` in pieces: the head, then the transaction-id FIFO a
    /// piece at a time, so the writer never holds the FIFO's encoding whole (it is the bulk of
    /// a checkpoint under load).
    pub fn emit(self, mut out: impl FnMut(&[u8])) {
        out(&self.head.buf);
        drop(self.head);
        let mut w = Writer::with_capacity(PIECE_BYTES + 32);
        w.u32(self.txn.groups() as u32);
        let mut rows = self.txn.row_iter();
        for (t, n) in self.txn.time_iter() {
            w.i64(*t);
            w.u32(*n);
            for r in rows.by_ref().take(*n as usize) {
                w.u64(r.pid);
                w.u64(r.offset);
                w.u64(r.hash);
                if w.buf.len() >= PIECE_BYTES {
                    out(&w.buf);
                    w.buf.clear();
                }
            }
        }
        out(&w.buf);
    }
}

/// About the encoded size of what is taken under the lock, so the buffer is allocated once:
/// growing a buffer of hundreds of megabytes by doubling copies it again at every step while
/// the engine waits. The partitions and the cursors are not in it (`PendingCheckpoint::encode` sizes them).
fn size_hint(s: &State) -> usize {
    let groups = s.groups.len() * 64;
    let queues: usize = s.queues.values().map(|q| 256 + q.dlq.len() * 64).sum();
    1024 + groups + queues + s.traces.len() * 128
}

/// Writes `version` 3, or an older version (only so tests can check that upgrades read it).
#[cfg(test)]
fn encode_version(s: &State, version: u8) -> Vec<u8> {
    let pending = PendingCheckpoint {
        head: take_head(s, version),
        partitions: s.partitions.snapshot(),
        txn: s.txn_ids.snapshot(),
    };
    if version == 1 {
        return pending.encode().head.buf;
    }
    pending.finish()
}

/// The head of a checkpoint in `version`: everything before the transaction-id FIFO.
#[cfg(test)]
fn encode_head(s: &State, version: u8) -> Writer {
    PendingCheckpoint {
        head: take_head(s, version),
        partitions: s.partitions.snapshot(),
        txn: s.txn_ids.snapshot(),
    }
    .encode()
    .head
}

/// Everything up to the transaction-id FIFO but the partitions' records (version 1 had no
/// FIFO; its rows were per partition).
fn take_head(s: &State, version: u8) -> HeadParts {
    let v1_rows = (version == 1).then(|| {
        let mut rows: HashMap<u64, Vec<(i64, u64)>> = HashMap::new();
        for (t, r) in s.txn_ids.iter() {
            rows.entry(r.pid).or_default().push((t, r.hash));
        }
        rows
    });
    let mut w = Writer::with_capacity(size_hint(s));
    let mut holes = Vec::with_capacity(s.queues.len() + s.groups.len());
    w.u8(version);
    w.u64(s.last_cycle);
    w.i64(s.last_now_us);
    let (ai, at) = s.applied.unwrap_or((0, 0));
    w.bool(s.applied.is_some());
    w.u64(ai);
    w.u64(at);
    w.u64(s.next_queue_id);
    w.u64(s.next_partition_id);
    w.u64(s.next_group_id);
    w.u32(s.queues.len() as u32);
    for q in s.queues.values() {
        w.u64(q.id);
        w.str(&q.name);
        w.str(&q.namespace);
        w.str(&q.task);
        q.config.encode(&mut w);
        w.bool(q.configured);
        w.i64(q.created_us);
        for c in [
            q.counters.pushed,
            q.counters.acked,
            q.counters.failed,
            q.counters.dead_lettered,
        ] {
            w.u64(c);
        }
        w.u32(q.dlq.len() as u32);
        for d in &q.dlq {
            w.str(&d.group);
            w.u64(d.partition);
            w.u64(d.offset);
            w.str(&d.error);
            w.i64(d.failed_us);
            w.u32(d.retries);
        }
        w.u32(q.partition_order.len() as u32);
        holes.push((w.buf.len(), Hole::Partitions(q.partition_order.clone())));
        w.u32(q.groups.len() as u32);
        for gid in q.groups.values() {
            let Some(g) = s.groups.get(gid) else {
                w.u64(u64::MAX);
                continue;
            };
            w.u64(g.id);
            w.str(&g.name);
            w.i64(g.start_from_us);
            w.i64(g.created_us);
            w.u32(g.cursors.len() as u32);
            holes.push((w.buf.len(), Hole::Cursors(g.cursors.snapshot())));
        }
    }
    w.u32(s.traces.len() as u32);
    for t in &s.traces {
        w.u64(t.partition);
        w.str(&t.transaction_id);
        w.str(&t.group);
        w.u32(t.names.len() as u32);
        for n in &t.names {
            w.str(n);
        }
        w.str(&t.event_type);
        w.str(&t.data);
        w.i64(t.at_us);
    }
    HeadParts {
        buf: w.buf,
        holes,
        v1_rows,
        sections: (version >= 3).then(|| take_sections(s)),
    }
}

/// A partition's record in its queue's list (`u64::MAX` for an id the table does not hold).
fn encode_partition(
    w: &mut Writer,
    p: Option<&Partition>,
    pid: &u64,
    v1_rows: Option<&HashMap<u64, Vec<(i64, u64)>>>,
) {
    let Some(p) = p else {
        w.u64(u64::MAX);
        return;
    };
    w.u64(p.id());
    w.str(&p.name);
    w.i64(p.created_us);
    w.u64(p.next_offset);
    w.i64(p.last_write_us);
    w.u64(p.bytes);
    w.u32(p.runs.len() as u32);
    for r in &p.runs {
        w.u64(r.base_offset);
        w.u32(r.count);
        w.i64(r.created_us);
        w.u64(r.index);
        w.u32(r.pos);
    }
    if let Some(rows) = v1_rows {
        let rows = rows.get(pid).map_or(&[][..], Vec::as_slice);
        w.u32(rows.len() as u32);
        for (t, h) in rows {
            w.i64(*t);
            w.u64(*h);
        }
    }
}

/// Version 3's sections: `count: u32`, then per section `tag: u8 | len: u32 | bytes`. Each
/// body is written in place and its length patched after, so no section is built twice.
/// Taken under the lock but for the producers section's floors (`Sections::write`).
fn take_sections(s: &State) -> Sections {
    // The Kafka groups section is written only when there are groups, so a tenant without
    // Kafka consumers checkpoints exactly as before.
    let kafka = !s.kafka_groups.is_empty();
    // Likewise the producers section, once a producer id was ever handed out or a
    // DeleteRecords set a floor (carried at the section's end, see `encode_floors`).
    let producers_held = !s.kafka_producers.is_empty();
    // And the conflation section, once a group conflates.
    let mut conflating: Vec<u64> = s
        .groups
        .values()
        .filter(|g| g.conflation)
        .map(|g| g.id)
        .collect();
    conflating.sort_unstable();
    let conflation = !conflating.is_empty();
    // And the ephemeral section, once a queue is declared.
    let ephemeral = !s.ephemeral.is_empty();
    // And the transactions section, once a transactional id exists.
    let txns = !s.kafka_txns.is_empty();
    // And the tenants section, once a tenant was declared.
    let tenants = !s.tenants.is_empty();
    // Sized once, as `size_hint` sizes the head (review s25 ckpt M3): the KV and timer
    // counts are of what the rows hold in memory, more than they encode to.
    let mut before =
        Writer::with_capacity(64 + s.kv.bytes() + s.timers.held_bytes() + s.kafka_groups.bytes());
    section(&mut before, SECTION_KV, |w| s.kv.encode(w));
    section(&mut before, SECTION_TIMERS, |w| s.timers.encode(w));
    if kafka {
        section(&mut before, SECTION_KAFKA_GROUPS, |w| {
            s.kafka_groups.encode(w)
        });
    }
    let mut producers = Writer::with_capacity(16 + s.kafka_producers.bytes());
    s.kafka_producers.encode(&mut producers);
    let mut after = Writer::with_capacity(64 + s.kafka_txns.bytes());
    if conflation {
        section(&mut after, SECTION_CONFLATION, |w| {
            w.u32(conflating.len() as u32);
            for gid in conflating {
                w.u64(gid);
            }
        });
    }
    if ephemeral {
        section(&mut after, SECTION_EPHEMERAL, |w| encode_ephemeral(w, s));
    }
    if txns {
        section(&mut after, SECTION_KAFKA_TXNS, |w| s.kafka_txns.encode(w));
    }
    if tenants {
        section(&mut after, SECTION_TENANTS, |w| {
            super::tenants::encode(w, &s.tenants)
        });
    }
    Sections {
        count: 2
            + u32::from(kafka)
            + u32::from(conflation)
            + u32::from(ephemeral)
            + u32::from(txns)
            + u32::from(tenants),
        before: before.buf,
        producers: producers.buf,
        producers_held,
        after: after.buf,
    }
}

impl Sections {
    /// Writes the sections in tag order, the producers section with the floors of `parts`.
    fn write(self, w: &mut Writer, parts: &PartitionsSnapshot) {
        let floors: Vec<(u64, u64)> = parts
            .values()
            .filter(|p| p.floor() > 0)
            .map(|p| (p.id(), p.floor()))
            .collect();
        let producers = self.producers_held || !floors.is_empty();
        w.u32(self.count + u32::from(producers));
        w.buf.extend_from_slice(&self.before);
        if producers {
            section(w, SECTION_KAFKA_PRODUCERS, |w| {
                w.buf.extend_from_slice(&self.producers);
                encode_floors(w, &floors);
            });
        }
        w.buf.extend_from_slice(&self.after);
    }
}

/// `count u32`, then per declared queue in name order: name str, the options of effect 63.
fn encode_ephemeral(w: &mut Writer, s: &State) {
    w.u32(s.ephemeral.len() as u32);
    for (name, options) in &s.ephemeral {
        w.str(name);
        crate::entry::encode_ephemeral_options(w, options);
    }
}

/// A name given twice fails the decode: which bounds are the state would be unknowable.
fn decode_ephemeral(r: &mut Reader<'_>, s: &mut State) -> Result<(), DecodeError> {
    // A row is at least a 4-byte name length and 33 bytes of options.
    let n = r.count(37)?;
    for _ in 0..n {
        let name = crate::entry::decode_ephemeral_name(r)?.to_string();
        let options = crate::entry::decode_ephemeral_options(r)?;
        if s.ephemeral.insert(name.clone(), options).is_some() {
            return Err(r.malformed(format!("ephemeral queue {name:?} appears twice")));
        }
    }
    Ok(())
}

/// Marks the groups the conflation section names; a group the checkpoint does not hold fails
/// the decode (its policy would be lost silently).
fn decode_conflation(r: &mut Reader<'_>, s: &mut State) -> Result<(), DecodeError> {
    let n = r.count(8)?;
    for _ in 0..n {
        let gid = r.u64()?;
        match s.groups.get_mut(&gid) {
            Some(g) => g.conflation = true,
            None => return Err(r.malformed(format!("conflating group {gid} is not held"))),
        }
    }
    Ok(())
}

/// The Kafka DeleteRecords floors, after the producers in section 4 (the section's second
/// layout): a version byte `1`, `count: u32`, then `(partition id u64, floor u64)` in id
/// order. Written only when some partition has one, so a section written before floors
/// existed (ending after the producers) still reads, as no floors.
const FLOORS_VERSION: u8 = 1;

fn encode_floors(w: &mut Writer, floors: &[(u64, u64)]) {
    if floors.is_empty() {
        return;
    }
    let mut sorted = floors.to_vec();
    sorted.sort_unstable();
    w.u8(FLOORS_VERSION);
    w.u32(sorted.len() as u32);
    for (pid, floor) in sorted {
        w.u64(pid);
        w.u64(floor);
    }
}

fn decode_floors(r: &mut Reader<'_>, s: &mut State) -> Result<(), DecodeError> {
    if r.is_done() {
        return Ok(());
    }
    let v = r.u8()?;
    if v != FLOORS_VERSION {
        return Err(r.malformed(format!("kafka producers section layout {v}")));
    }
    let n = r.count(16)?;
    for _ in 0..n {
        let (pid, floor) = (r.u64()?, r.u64()?);
        match s.partitions.get_mut(&pid) {
            Some(p) if p.floor() == 0 && (1..=p.next_offset).contains(&floor) => p.set_floor(floor),
            _ => {
                return Err(r.malformed(format!(
                    "records floor {floor} of partition {pid}: unknown, repeated or past its end"
                )))
            }
        }
    }
    Ok(())
}

fn section(w: &mut Writer, tag: u8, body: impl FnOnce(&mut Writer)) {
    w.u8(tag);
    let at = w.buf.len();
    w.u32(0);
    body(w);
    let len = u32::try_from(w.buf.len() - at - 4).unwrap_or(u32::MAX);
    w.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// Reads version 3's sections into `s`. A tag this build does not know, or a length past the
/// end, fails the decode: a section is state, and dropping it would lose data.
fn decode_sections(r: &mut Reader<'_>, s: &mut State) -> Result<(), DecodeError> {
    let n = r.count(5)?;
    let mut seen = Vec::with_capacity(n.min(8));
    for _ in 0..n {
        let tag = r.u8()?;
        let bytes = r.bytes()?;
        // A second copy would overwrite the first: which one is the state is unknowable.
        if seen.contains(&tag) {
            return Err(r.malformed(format!("checkpoint section {tag} appears twice")));
        }
        seen.push(tag);
        let mut sr = Reader::new(bytes);
        match tag {
            SECTION_KV => s.kv = super::kv::KvTable::decode(&mut sr)?,
            SECTION_TIMERS => s.timers = super::timers::TimerTable::decode(&mut sr)?,
            SECTION_KAFKA_GROUPS => {
                s.kafka_groups = super::kafka_groups::KafkaGroups::decode(&mut sr)?
            }
            SECTION_KAFKA_PRODUCERS => {
                s.kafka_producers = super::kafka_producers::KafkaProducers::decode(
                    &mut sr,
                    s.last_now_us,
                    s.next_partition_id,
                )?;
                decode_floors(&mut sr, s)?;
            }
            SECTION_CONFLATION => decode_conflation(&mut sr, s)?,
            SECTION_EPHEMERAL => decode_ephemeral(&mut sr, s)?,
            SECTION_KAFKA_TXNS => {
                let parts = &s.partitions;
                let next = |pid: u64| parts.get(&pid).map(|p| p.next_offset);
                s.kafka_txns = super::kafka_txns::KafkaTxns::decode(&mut sr, s.last_now_us, &next)?;
            }
            SECTION_TENANTS => {
                s.tenants = super::tenants::decode(&mut sr, s.applied.map(|(i, _)| i))?
            }
            t => return Err(r.malformed(format!("unknown checkpoint section tag {t}"))),
        }
        if !sr.is_done() {
            return Err(r.malformed(format!("trailing bytes in checkpoint section {tag}")));
        }
    }
    Ok(())
}

/// What a checkpoint's run must be (review L3): copies put runs out of log order, so the
/// order of their indexes says nothing, but the floor and every read search a partition's
/// runs by base offset, and a run naming an entry the checkpoint has not applied (or one still
/// being planned) would let the floor delete what it holds.
fn check_run(
    r: &Reader<'_>,
    pid: u64,
    prev: Option<&Run>,
    run: &Run,
    applied: Option<(u64, u64)>,
) -> Result<(), DecodeError> {
    if let Some(prev) = prev.filter(|p| p.base_offset >= run.base_offset) {
        return Err(r.malformed(format!(
            "partition {pid}: run at offset {} after one at {}",
            run.base_offset, prev.base_offset
        )));
    }
    if run.index == PENDING_INDEX {
        return Err(r.malformed(format!(
            "partition {pid}: run at offset {} names no committed entry",
            run.base_offset
        )));
    }
    // Every checkpoint written holds its applied position (an entry applied set it); a state
    // without one (built by hand) has nothing to hold the index to.
    if let Some((applied, _)) = applied.filter(|&(a, _)| run.index > a) {
        return Err(r.malformed(format!(
            "partition {pid}: run at offset {} names entry {} above the applied {applied}",
            run.base_offset, run.index
        )));
    }
    Ok(())
}

pub fn decode_state(buf: &[u8]) -> Result<State, DecodeError> {
    let mut r = Reader::new(buf);
    let v = r.u8()?;
    if !(1..=CHECKPOINT_VERSION).contains(&v) {
        return Err(r.malformed(format!("checkpoint version {v}")));
    }
    // Version 1 kept each partition's (created_us, hash) rows, the partition's last messages
    // in offset order; they become one-message chunks, merged into time order below.
    let mut v1_rows: Vec<(i64, TxnRow)> = Vec::new();
    let mut s = State {
        last_cycle: r.u64()?,
        last_now_us: r.i64()?,
        ..Default::default()
    };
    let has_applied = r.bool()?;
    let (ai, at) = (r.u64()?, r.u64()?);
    s.applied = has_applied.then_some((ai, at));
    s.next_queue_id = r.u64()?;
    s.next_partition_id = r.u64()?;
    if s.next_partition_id > MAX_NEXT_PARTITION_ID {
        return Err(r.malformed(format!(
            "next partition id {} is above {MAX_NEXT_PARTITION_ID}",
            s.next_partition_id
        )));
    }
    s.next_group_id = r.u64()?;
    let nq = r.count(8)?;
    for _ in 0..nq {
        let id = r.u64()?;
        let name = r.string()?;
        // Apply skips such a queue (review s35 p M): a row of one read here would take pushes
        // whose partitions apply cannot create.
        if id >= MAX_NEXT_QUEUE_ID {
            return Err(r.malformed(format!("queue {id} {name:?} is past 32 bits")));
        }
        // A repeated id or name would leave rows no index reaches (fuzz target `state`).
        if s.queues.contains_key(&id) || s.queue_by_name.contains_key(&name) {
            return Err(r.malformed(format!("queue {id} {name:?} appears twice")));
        }
        let namespace = r.string()?;
        let task = r.string()?;
        let config = QueueConfig::decode(&mut r)?;
        let configured = r.bool()?;
        let created_us = r.i64()?;
        let counters = QueueCounters {
            pushed: r.u64()?,
            acked: r.u64()?,
            failed: r.u64()?,
            dead_lettered: r.u64()?,
        };
        let nd = r.count(8)?;
        let mut dlq = Vec::with_capacity(nd);
        for _ in 0..nd {
            dlq.push(DlqRow {
                group: r.string()?,
                partition: r.u64()?,
                offset: r.u64()?,
                error: r.string()?,
                failed_us: r.i64()?,
                retries: r.u32()?,
            });
        }
        let mut q = Queue {
            id,
            name,
            namespace,
            task,
            config,
            configured,
            created_us,
            partitions: NameIndex::default(),
            partition_order: PartitionOrder::default(),
            groups: HashMap::new(),
            dlq: dlq.into(),
            counters,
        };
        let np = r.count(8)?;
        for _ in 0..np {
            let pid = r.u64()?;
            if pid == u64::MAX {
                continue;
            }
            if pid >= s.next_partition_id {
                return Err(r.malformed(format!(
                    "partition id {pid} is not below the next partition id {}",
                    s.next_partition_id
                )));
            }
            let pname = r.string()?;
            if s.partitions.contains_key(&pid) || q.partitions.get(&pname, &s.partitions).is_some()
            {
                return Err(r.malformed(format!("partition {pid} {pname:?} appears twice")));
            }
            let created_us = r.i64()?;
            let next_offset = r.u64()?;
            let last_write_us = r.i64()?;
            let bytes = r.u64()?;
            let nr = r.count(32)?;
            let mut runs: Vec<Run> = Vec::with_capacity(nr);
            for _ in 0..nr {
                let run = Run {
                    base_offset: r.u64()?,
                    count: r.u32()?,
                    created_us: r.i64()?,
                    index: r.u64()?,
                    pos: r.u32()?,
                };
                check_run(&r, pid, runs.last(), &run, s.applied)?;
                runs.push(run);
            }
            if v == 1 {
                let nt = r.count(16)?;
                let first = next_offset.saturating_sub(nt as u64);
                for i in 0..nt {
                    let created_us = r.i64()?;
                    let hash = r.u64()?;
                    let offset = first + i as u64;
                    v1_rows.push((created_us, TxnRow { pid, offset, hash }));
                }
            }
            // Below `next_partition_id`, itself at most `MAX_NEXT_PARTITION_ID` (2^32).
            let Ok(short) = u32::try_from(pid) else {
                return Err(r.malformed(format!("partition id {pid} is past 32 bits")));
            };
            let Ok(short_qid) = u32::try_from(id) else {
                return Err(r.malformed(format!(
                    "partition {pid} belongs to queue {id}, past 32 bits"
                )));
            };
            let mut p = Partition::new(short, short_qid, &pname, created_us);
            p.next_offset = next_offset;
            p.last_write_us = last_write_us;
            p.bytes = bytes;
            p.runs = runs.into();
            q.partition_order.push(short);
            s.run_floor.add_partition(&mut p);
            s.partitions.insert(pid, p);
            q.partitions.insert(&pname, pid, &s.partitions);
        }
        let ng = r.count(8)?;
        for _ in 0..ng {
            let gid = r.u64()?;
            if gid == u64::MAX {
                continue;
            }
            let gname = r.string()?;
            if s.groups.contains_key(&gid) || q.groups.contains_key(&gname) {
                return Err(r.malformed(format!("group {gid} {gname:?} appears twice")));
            }
            let mut g = Group {
                id: gid,
                queue: id,
                name: gname,
                start_from_us: r.i64()?,
                created_us: r.i64()?,
                conflation: false,
                cursors: CursorMap::default(),
                ready: VecDeque::new(),
                in_ready: Default::default(),
                wake: Default::default(),
            };
            let nc = r.count(8)?;
            for _ in 0..nc {
                let pid = r.u64()?;
                if g.cursors.contains_key(&pid) {
                    return Err(r.malformed(format!("cursor of partition {pid} appears twice")));
                }
                let row = decode_cursor(&mut r)?;
                if let Some(l) = row.lease {
                    s.leases.entry(l.id).or_default().push((gid, pid));
                    g.wake.push(Reverse((l.expires_us, pid)));
                    s.wakes.insert(l.expires_us, gid);
                }
                g.cursors.insert(pid, row);
            }
            for pid in &q.partition_order {
                g.mark_ready(pid);
            }
            q.groups.insert(g.name.clone(), gid);
            s.groups.insert(gid, g);
        }
        s.queue_by_name.insert(q.name.clone(), id);
        s.labels.insert(id, &q.namespace, &q.task);
        s.queues.insert(id, q);
    }
    let nt = r.count(8)?;
    for _ in 0..nt {
        let partition = r.u64()?;
        let transaction_id = r.string()?;
        let group = r.string()?;
        let nn = r.count(4)?;
        let mut names = Vec::with_capacity(nn);
        for _ in 0..nn {
            names.push(r.string()?);
        }
        s.traces.push_back(TraceRow {
            partition,
            transaction_id,
            group,
            names,
            event_type: r.string()?,
            data: r.string()?,
            at_us: r.i64()?,
        });
    }
    if v >= 3 {
        decode_sections(&mut r, &mut s)?;
    }
    if v == 1 {
        v1_rows.sort_by_key(|(t, _)| *t);
        s.txn_ids = TxnIds::from_rows(v1_rows);
    } else {
        let ng = r.count(12)?;
        let mut rows = Vec::new();
        for _ in 0..ng {
            let t = r.i64()?;
            let n = r.count(24)?;
            rows.reserve(n);
            for _ in 0..n {
                let pid = r.u64()?;
                let offset = r.u64()?;
                let hash = r.u64()?;
                rows.push((t, TxnRow { pid, offset, hash }));
            }
        }
        s.txn_ids = TxnIds::from_rows(rows);
    }
    if !r.is_done() {
        return Err(r.malformed("trailing bytes after the checkpoint".into()));
    }
    let windows: Vec<i64> = s
        .queues
        .values()
        .map(|q| q.config.dedup_window_seconds)
        .collect();
    for w in windows {
        s.count_dedup_window(w);
    }
    s.trace_bytes = s.traces.iter().map(TraceRow::stored_bytes).sum();
    Ok(s)
}

#[cfg(test)]
#[path = "snapshot_offlock_tests.rs"]
pub(crate) mod offlock_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Effect;
    use crate::state::Loc;

    fn rows(s: &State) -> Vec<(i64, TxnRow)> {
        s.txn_ids.iter().map(|(t, r)| (t, *r)).collect()
    }

    fn loc() -> Loc {
        Loc { index: 7, pos: 0 }
    }

    fn sample() -> State {
        let mut s = State::default();
        let cfg = QueueConfig::default();
        s.apply(
            &Effect::QueueUpsert {
                qid: 1,
                name: "q",
                namespace: "",
                task: "",
                configured: true,
                config: cfg,
            },
            10,
            loc(),
        );
        for (pid, name) in [(1, "p1"), (2, "p2")] {
            s.apply(&Effect::PartitionCreate { qid: 1, pid, name }, 11, loc());
        }
        s.apply(
            &Effect::Append {
                pid: 1,
                base_offset: 0,
                hashes: vec![11, 12, 13],
                frames: &[0; 30],
            },
            20,
            loc(),
        );
        s.apply(
            &Effect::Append {
                pid: 2,
                base_offset: 0,
                hashes: vec![11],
                frames: &[0; 10],
            },
            21,
            loc(),
        );
        s
    }

    #[test]
    fn checkpoints_round_trip_with_the_txn_index() {
        let s = sample();
        assert_eq!(s.txn_ids.get(1, 12), Some(1));
        assert_eq!(s.txn_ids.get(2, 11), Some(0));
        let blob = encode_state(&s);
        let back = decode_state(&blob).unwrap();
        assert_eq!(rows(&back), rows(&s));
        assert_eq!(back.txn_ids.get(1, 12), Some(1));
        assert_eq!(back.txn_keep_us(), s.txn_keep_us());
        assert_eq!(
            encode_state(&back),
            blob,
            "decode then encode is the identity"
        );
    }

    /// Section 9: the first declaration of each tenant, with the index that declared it, rides
    /// in the checkpoint; a state without declarations encodes as before (no section), and a
    /// declaration the checkpoint could not have applied fails the whole decode.
    #[test]
    fn declared_tenants_survive_a_checkpoint_and_one_past_applied_is_refused() {
        let mut s = sample();
        s.applied = Some((12, 2));
        let blob_without = encode_state(&s);
        assert!(decode_state(&blob_without).unwrap().tenants.is_empty());
        crate::state::tenants::declare(&mut s.tenants, "zeta", 12, &[3]);
        crate::state::tenants::declare(&mut s.tenants, "acme", 9, &[1, 2, 3]);
        let blob = encode_state(&s);
        assert!(blob.len() > blob_without.len());
        let back = decode_state(&blob).unwrap();
        assert_eq!(back.tenants, s.tenants);
        assert_eq!(back.tenants["acme"].declared_at, 9);
        assert_eq!(
            encode_state(&back),
            blob,
            "decode then encode is the identity"
        );
        // Without a declaration nothing of it is written: the blob is byte for byte the old.
        s.tenants.clear();
        assert_eq!(encode_state(&s), blob_without);
        // The same tenants in a checkpoint applied only through 11: zeta's entry, at 12, is
        // not in it.
        s.applied = Some((11, 2));
        crate::state::tenants::declare(&mut s.tenants, "zeta", 12, &[3]);
        assert!(decode_state(&encode_state(&s)).is_err());
        s.applied = Some((12, 2));
        assert!(decode_state(&encode_state(&s)).is_ok());
        // Every flipped byte of the section either decodes to a state that is a valid one
        // (re-encoding identically) or is refused; never a panic.
        let at = blob
            .windows(5)
            .rposition(|w| w == [4, 0, 0, 0, b'a'])
            .expect("acme's name")
            - 4
            - 4
            - 1;
        assert_eq!(blob[at], SECTION_TENANTS);
        let len = u32::from_le_bytes(blob[at + 1..at + 5].try_into().unwrap()) as usize;
        for i in at..at + 5 + len {
            for bit in 0..8 {
                let mut b = blob.clone();
                b[i] ^= 1 << bit;
                if let Ok(st) = decode_state(&b) {
                    assert_eq!(encode_state(&st), b, "byte {i} bit {bit}");
                }
            }
        }
    }

    #[test]
    fn declared_ephemeral_queues_survive_a_checkpoint_and_duplicates_are_refused() {
        let mut s = sample();
        let blob_without = encode_state(&s);
        let drop_oldest = queenmq_protocol::EphemeralOptions {
            drop_oldest: true,
            ttl_seconds: 9,
            ..Default::default()
        };
        for (name, o) in [
            ("a", drop_oldest),
            ("b", Default::default()),
            ("c", drop_oldest),
        ] {
            s.apply(
                &Effect::EphemeralConfigSet {
                    queue: name,
                    options: o,
                },
                22,
                loc(),
            );
        }
        s.apply(&Effect::EphemeralConfigDelete { queue: "c" }, 23, loc());
        let blob = encode_state(&s);
        let back = decode_state(&blob).unwrap();
        let names: Vec<_> = back.ephemeral.keys().cloned().collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(back.ephemeral["a"], drop_oldest);
        assert_eq!(encode_state(&back), blob);
        // Without a declaration the section is not written: the blob is as before.
        s.apply(&Effect::EphemeralConfigDelete { queue: "a" }, 24, loc());
        s.apply(&Effect::EphemeralConfigDelete { queue: "b" }, 24, loc());
        assert_eq!(encode_state(&s), blob_without);
        // "b" renamed to "a" in place: one name twice.
        let mut twice = blob.clone();
        let at = twice
            .windows(5)
            .rposition(|w| w == [1, 0, 0, 0, b'b'])
            .expect("the second name");
        twice[at + 4] = b'a';
        assert!(decode_state(&twice).is_err());
        // A name with a control character, which no route accepts: refused, not seeded.
        let mut control = blob.clone();
        control[at + 4] = b'\n';
        assert!(decode_state(&control).is_err());
    }

    #[test]
    fn a_seek_instant_replaces_the_group_start_and_survives_a_checkpoint() {
        let mut s = sample();
        s.apply(
            &Effect::GroupRegister {
                qid: 1,
                gid: 40,
                name: "sought",
                start_from_us: i64::MIN,
            },
            22,
            loc(),
        );
        let at = 1_709_618_828_123_000;
        s.apply(
            &Effect::GroupStartFrom {
                gid: 40,
                start_from_us: at,
            },
            23,
            loc(),
        );
        // A group deleted earlier in the entry: nothing to do, no error.
        s.apply(
            &Effect::GroupStartFrom {
                gid: 99,
                start_from_us: 1,
            },
            23,
            loc(),
        );
        let back = decode_state(&encode_state(&s)).unwrap();
        assert_eq!(back.groups[&40].start_from_us, at);
        assert!(!back.groups.contains_key(&99));
    }

    #[test]
    fn a_groups_conflation_and_what_dead_letter_deletes_leave_survive_a_checkpoint() {
        let mut s = sample();
        for (gid, name) in [(1, "last"), (2, "every")] {
            s.apply(
                &Effect::GroupRegister {
                    qid: 1,
                    gid,
                    name,
                    start_from_us: i64::MIN,
                },
                22,
                loc(),
            );
        }
        s.apply(&Effect::GroupConflation { gid: 1 }, 22, loc());
        for (gid, pid, offset) in [(1, 1, 0), (2, 1, 0), (1, 1, 1), (2, 2, 0)] {
            s.apply(
                &Effect::DlqInsert {
                    gid,
                    pid,
                    offset,
                    retries: 3,
                    error: "e",
                },
                23,
                loc(),
            );
        }
        s.apply(&Effect::DlqDelete { pid: 1, offset: 0 }, 24, loc());
        s.apply(
            &Effect::DlqPurge {
                qid: 1,
                group: "every",
                pid: crate::entry::ANY_PARTITION,
                from_us: i64::MIN,
                to_us: i64::MAX,
            },
            25,
            loc(),
        );
        let back = decode_state(&encode_state(&s)).unwrap();
        assert_eq!(
            super::super::canonical::canonical(&back),
            super::super::canonical::canonical(&s)
        );
        assert!(back.groups[&1].conflation && !back.groups[&2].conflation);
        let left: Vec<_> = back.queues[&1]
            .dlq
            .iter()
            .map(|d| (d.group.as_str(), d.offset))
            .collect();
        assert_eq!(
            left,
            vec![("last", 1)],
            "both rows of (1, 0) and every row of 'every' went"
        );
    }

    #[test]
    fn the_label_index_follows_upserts_and_deletes_and_is_rebuilt_on_load() {
        let mut s = sample();
        let upsert = |qid, name, namespace, task| Effect::QueueUpsert {
            qid,
            name,
            namespace,
            task,
            configured: true,
            config: QueueConfig::default(),
        };
        s.apply(&upsert(2, "billing", "ns", "t"), 30, loc());
        s.apply(&upsert(3, "ops", "ns", "u"), 31, loc());
        assert_eq!(s.labels.matching(Some("ns"), None), Some(vec![2, 3]));
        assert_eq!(s.labels.matching(Some(""), None), Some(vec![1]));
        // Relabelled: it leaves its old filters.
        s.apply(&upsert(3, "ops", "other", "t"), 32, loc());
        assert_eq!(s.labels.matching(Some("ns"), None), Some(vec![2]));
        assert_eq!(s.labels.matching(None, Some("t")), Some(vec![2, 3]));
        let back = decode_state(&encode_state(&s)).unwrap();
        for (ns, task) in [
            (Some("ns"), None),
            (None, Some("t")),
            (Some("other"), Some("t")),
        ] {
            assert_eq!(back.labels.matching(ns, task), s.labels.matching(ns, task));
        }
        s.apply(&Effect::QueueDelete { qid: 2 }, 33, loc());
        assert_eq!(s.labels.matching(None, Some("t")), Some(vec![3]));
        assert_eq!(s.labels.matching(Some("ns"), None), Some(vec![]));
    }

    fn with_kv(mut s: State) -> State {
        s.apply(
            &Effect::KvPut {
                ns: "ns",
                key: "k",
                value: "{\"a\":1}",
                version: 5,
                expires_at_us: Some(1_000),
            },
            30,
            loc(),
        );
        s.apply(
            &Effect::KvPut {
                ns: "ns",
                key: "forever",
                value: "null",
                version: 6,
                expires_at_us: None,
            },
            31,
            loc(),
        );
        s
    }

    #[test]
    fn the_kv_section_round_trips() {
        let s = with_kv(sample());
        let blob = encode_state(&s);
        let back = decode_state(&blob).unwrap();
        assert_eq!(
            crate::state::canonical::canonical(&back),
            crate::state::canonical::canonical(&s)
        );
        assert_eq!(back.kv.last_version, 6);
        assert_eq!(back.kv.bytes(), s.kv.bytes());
        assert_eq!(encode_state(&back), blob);
    }

    #[test]
    fn a_version_2_checkpoint_reads_with_no_kv_rows() {
        let s = with_kv(sample());
        let back = decode_state(&encode_version(&s, 2)).unwrap();
        assert!(back.kv.is_empty());
        assert_eq!(back.kv.last_version, 0);
        assert_eq!(rows(&back), rows(&s));
    }

    #[test]
    fn an_unknown_section_or_a_section_past_the_end_fails_decode() {
        let s = sample();
        let head = encode_head(&s, CHECKPOINT_VERSION).buf;
        let (mut kv, mut timers) = (Writer::default(), Writer::default());
        s.kv.encode(&mut kv);
        s.timers.encode(&mut timers);
        // The sections are the head's last bytes: count, then tag, length, body for KV, then
        // for timers.
        let at = head.len() - timers.buf.len() - 5 - kv.buf.len() - 4 - 1 - 4;
        let blob = encode_state(&s);
        let mut unknown = blob.clone();
        // Tag 10: no section has it (9 is the tenants').
        unknown[at + 4] = 10;
        assert!(decode_state(&unknown).is_err());
        let mut long = blob.clone();
        long[at + 5..at + 9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_state(&long).is_err());
        // The timers section's tag rewritten to KV's: one section twice.
        let mut twice = blob;
        twice[at + 9 + kv.buf.len()] = SECTION_KV;
        assert!(decode_state(&twice).is_err());
    }

    #[test]
    fn version_1_transaction_rows_are_read_into_the_shared_fifo() {
        let s = sample();
        let back = decode_state(&encode_version(&s, 1)).unwrap();
        assert_eq!(rows(&back), rows(&s));
        assert_eq!(back.txn_ids.get(2, 11), Some(0));
    }

    fn with_timer() -> State {
        let mut s = sample();
        s.apply(
            &Effect::TimerPut {
                queue: "q",
                key: "k/1",
                partition: "Default",
                txn: "t-1",
                message_id: 42,
                deliver_at_us: 99,
                payload: b"{\"a\":1}",
            },
            40,
            loc(),
        );
        s
    }

    /// Where the timers section's tag byte is in a version-3 checkpoint.
    fn section_at(s: &State) -> usize {
        let mut body = Writer::with_capacity(64);
        s.timers.encode(&mut body);
        encode_head(s, 3).buf.len() - body.buf.len() - 4 - 1
    }

    #[test]
    fn timers_ride_in_their_section_and_version_2_reads_with_none() {
        let s = with_timer();
        let back = decode_state(&encode_state(&s)).unwrap();
        assert_eq!(
            crate::state::canonical::canonical(&back),
            crate::state::canonical::canonical(&s)
        );
        assert_eq!(back.timers.due(99, 10).len(), 1);
        let v2 = decode_state(&encode_version(&s, 2)).unwrap();
        assert!(v2.timers.is_empty());
        assert_eq!(rows(&v2), rows(&s));
    }

    #[test]
    fn an_unknown_section_or_a_length_past_the_end_fails_decode() {
        let s = with_timer();
        let buf = encode_state(&s);
        let at = section_at(&s);
        assert_eq!(buf[at], SECTION_TIMERS);
        let mut unknown = buf.clone();
        unknown[at] = 10;
        assert!(decode_state(&unknown).is_err());
        let mut long = buf;
        long[at + 1..at + 5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_state(&long).is_err());
    }
}
