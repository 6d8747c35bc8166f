//! Kafka idempotent producers' state (docs/kafka-compat.md "Idempotent producers"): the next
//! producer id to hand out, and per producer its epoch, when it was last active and, per
//! partition it wrote, the epoch and the last five batches Kafka's ProducerStateManager
//! keeps for the duplicate check. Kept apart from the partitions' messages, so retention
//! trimming a partition never forgets a batch the check needs.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use queenmq_protocol::kafka_producers::{
    in_sequence, increment_sequence, MAX_PRODUCER_ID, PRODUCER_BATCHES_KEPT,
};

use crate::codec::{DecodeError, Reader, Writer};

/// One remembered batch: its sequence range and where it was appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRow {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: u64,
    pub records: u32,
}

/// A producer's facts about one partition (by engine partition id).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionSeqs {
    pub epoch: i16,
    /// Oldest first, at most [`PRODUCER_BATCHES_KEPT`].
    pub batches: VecDeque<BatchRow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerRow {
    /// The latest epoch handed out or seen in a batch.
    pub epoch: i16,
    pub last_us: i64,
    pub partitions: BTreeMap<u64, PartitionSeqs>,
}

/// What a producer row holds in memory beside its partitions: the map entry, the idle
/// index entry and the B-trees' slack (nodes half empty at worst).
const PRODUCER_BYTES: usize =
    2 * (std::mem::size_of::<(i64, ProducerRow)>() + std::mem::size_of::<(i64, i64)>());
/// One partition's row with room for its five batches.
const PARTITION_BYTES: usize = 2 * std::mem::size_of::<(u64, PartitionSeqs)>()
    + (PRODUCER_BATCHES_KEPT + 1) * std::mem::size_of::<BatchRow>();

#[derive(Debug, Default)]
pub struct KafkaProducers {
    /// The next id InitProducerId hands out; never lowered, so ids are unique for the life
    /// of the tenant (restarts included: it is checkpointed and replayed).
    next_id: i64,
    rows: BTreeMap<i64, ProducerRow>,
    /// Derived: (last active, id) of every row, for the expiry sweep.
    idle: BTreeSet<(i64, i64)>,
    /// Derived: what the rows hold, as counted by the constants above.
    bytes: usize,
    /// Derived: how many producers hold state on each engine partition, so DescribeProducers
    /// knows a partition's count, or that it has none, without a walk of every row (review
    /// s19 kafka M3: a read granted nothing refused even the empty ones). At most one
    /// entry per partition a row holds, so bounded by the rows' cap.
    on_partition: HashMap<u64, usize>,
}

impl KafkaProducers {
    pub fn next_id(&self) -> i64 {
        self.next_id
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.next_id == 0
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn get(&self, id: i64) -> Option<&ProducerRow> {
        self.rows.get(&id)
    }

    /// How many producers hold state on engine partition `pid`.
    pub fn count_on(&self, pid: u64) -> usize {
        self.on_partition.get(&pid).copied().unwrap_or(0)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&i64, &ProducerRow)> {
        self.rows.iter()
    }

    /// Up to `limit` ids idle since before `cutoff_us`, oldest first.
    pub fn idle_before(&self, cutoff_us: i64, limit: usize) -> Vec<i64> {
        self.idle
            .iter()
            .take_while(|(at, _)| *at < cutoff_us)
            .take(limit)
            .map(|(_, id)| *id)
            .collect()
    }

    /// Up to `limit` ids idle since `cutoff_us` or before and not in `keep`, oldest first: the
    /// states new producers evict at the cap. One walk of the idle index, of at most
    /// `limit + keep.len()` entries.
    pub fn evictable(&self, cutoff_us: i64, limit: usize, keep: &HashSet<i64>) -> Vec<i64> {
        self.idle
            .iter()
            .take_while(|(at, _)| *at <= cutoff_us)
            .map(|(_, id)| *id)
            .filter(|id| !keep.contains(id))
            .take(limit)
            .collect()
    }

    /// InitProducerId handed out `id` as a new producer: only the counter moves, the state
    /// appears with the producer's first batch.
    pub fn take_id(&mut self, id: i64) {
        self.next_id = self.next_id.max(id.saturating_add(1));
    }

    fn row(&mut self, id: i64, now_us: i64) -> &mut ProducerRow {
        if !self.rows.contains_key(&id) {
            self.bytes = self.bytes.saturating_add(PRODUCER_BYTES);
            self.rows.insert(
                id,
                ProducerRow {
                    last_us: now_us,
                    ..ProducerRow::default()
                },
            );
            self.idle.insert((now_us, id));
        }
        self.next_id = self.next_id.max(id.saturating_add(1));
        // Inserted just above when absent.
        let row = self.rows.entry(id).or_default();
        if row.last_us != now_us {
            self.idle.remove(&(row.last_us, id));
            self.idle.insert((now_us, id));
            row.last_us = now_us;
        }
        row
    }

    /// InitProducerId granted `(id, epoch)`.
    pub fn init(&mut self, id: i64, epoch: i16, now_us: i64) {
        let row = self.row(id, now_us);
        row.epoch = row.epoch.max(epoch);
    }

    /// Whether apply may take this batch: what the planner emits (at least one record, a
    /// sequence range that adds up, a known partition, following the partition's last batch
    /// of the same epoch). Anything else (an older or buggy build, a bus producer other
    /// than the door) is skipped alike on every replica: kept, it would make every later
    /// checkpoint one that [`Self::decode`] refuses, and halt the node at its next restart.
    pub fn accepts_batch(
        &self,
        id: i64,
        pid: u64,
        epoch: i16,
        b: &BatchRow,
        next_pid: u64,
    ) -> bool {
        let span = b.records.checked_sub(1).and_then(|n| i32::try_from(n).ok());
        if pid >= next_pid
            || b.first_seq < 0
            || b.last_seq < 0
            || span.map(|n| increment_sequence(b.first_seq, n)) != Some(b.last_seq)
        {
            return false;
        }
        let last = self
            .rows
            .get(&id)
            .and_then(|r| r.partitions.get(&pid))
            .filter(|p| p.epoch == epoch)
            .and_then(|p| p.batches.back());
        last.is_none_or(|l| in_sequence(l.last_seq, b.first_seq))
    }

    /// A batch appended at `base_offset` of partition `pid`.
    pub fn batch(&mut self, id: i64, pid: u64, epoch: i16, b: BatchRow, now_us: i64) {
        let row = self.row(id, now_us);
        row.epoch = row.epoch.max(epoch);
        let mut added = 0;
        let p = row.partitions.entry(pid).or_insert_with(|| {
            added = PARTITION_BYTES;
            PartitionSeqs {
                epoch,
                batches: VecDeque::with_capacity(PRODUCER_BATCHES_KEPT),
            }
        });
        if p.epoch != epoch {
            // A new epoch starts its sequences over: the old epoch's batches cannot repeat.
            p.epoch = epoch;
            p.batches.clear();
        }
        if p.batches.len() >= PRODUCER_BATCHES_KEPT {
            p.batches.pop_front();
        }
        p.batches.push_back(b);
        self.bytes = self.bytes.saturating_add(added);
        if added > 0 {
            *self.on_partition.entry(pid).or_insert(0) += 1;
        }
    }

    pub fn expire(&mut self, id: i64) {
        if let Some(row) = self.rows.remove(&id) {
            self.idle.remove(&(row.last_us, id));
            for pid in row.partitions.keys() {
                if let Some(n) = self.on_partition.get_mut(pid) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.on_partition.remove(pid);
                    }
                }
            }
            let parts = row.partitions.len().saturating_mul(PARTITION_BYTES);
            self.bytes = self
                .bytes
                .saturating_sub(PRODUCER_BYTES.saturating_add(parts));
        }
    }

    /// Checkpoint section tag 4 (docs/storage-format.md "Kafka producers section").
    pub fn encode(&self, w: &mut Writer) {
        w.i64(self.next_id);
        w.u32(self.rows.len() as u32);
        for (id, row) in &self.rows {
            w.i64(*id);
            w.u16(row.epoch as u16);
            w.i64(row.last_us);
            w.u32(row.partitions.len() as u32);
            for (pid, p) in &row.partitions {
                w.u64(*pid);
                w.u16(p.epoch as u16);
                w.u8(p.batches.len() as u8);
                for b in &p.batches {
                    w.u32(b.first_seq as u32);
                    w.u32(b.last_seq as u32);
                    w.u64(b.base_offset);
                    w.u32(b.records);
                }
            }
        }
    }

    /// Refuses what apply never makes: negative or out-of-range ids, epochs and sequences, a
    /// partition epoch above its producer's, batches out of sequence, activity after
    /// `now_us` (the checkpoint's clock) and partitions at or past `next_pid`.
    pub fn decode(
        r: &mut Reader<'_>,
        now_us: i64,
        next_pid: u64,
    ) -> Result<KafkaProducers, DecodeError> {
        let mut t = KafkaProducers::default();
        let next_id = r.i64()?;
        if !(0..=MAX_PRODUCER_ID.saturating_add(1)).contains(&next_id) {
            return Err(r.malformed(format!("kafka producers: next id {next_id} out of range")));
        }
        let n = r.count(8 + 2 + 8 + 4)?;
        for _ in 0..n {
            let id = r.i64()?;
            if !(0..next_id).contains(&id) || t.rows.contains_key(&id) {
                return Err(r.malformed(format!(
                    "kafka producer {id} is negative, repeated or not handed out"
                )));
            }
            let epoch = r.u16()? as i16;
            let last_us = r.i64()?;
            if epoch < 0 || last_us > now_us {
                return Err(r.malformed(format!(
                    "kafka producer {id}: epoch {epoch} or activity {last_us} after {now_us}"
                )));
            }
            t.init(id, epoch, last_us);
            let m = r.count(8 + 2 + 1)?;
            for _ in 0..m {
                let pid = r.u64()?;
                let p_epoch = r.u16()? as i16;
                let k = usize::from(r.u8()?);
                if k > PRODUCER_BATCHES_KEPT
                    || t.rows
                        .get(&id)
                        .is_some_and(|p| p.partitions.contains_key(&pid))
                {
                    return Err(r.malformed(format!(
                        "kafka producer {id} partition {pid}: {k} batches or repeated"
                    )));
                }
                if k == 0 || pid >= next_pid || !(0..=epoch).contains(&p_epoch) {
                    // A partition row is only made by a batch, of a partition that existed,
                    // at an epoch the producer row saw.
                    return Err(r.malformed(format!(
                        "kafka producer {id} partition {pid}: empty, unknown or epoch {p_epoch}"
                    )));
                }
                let mut last: Option<i32> = None;
                for _ in 0..k {
                    let b = BatchRow {
                        first_seq: r.u32()? as i32,
                        last_seq: r.u32()? as i32,
                        base_offset: r.u64()?,
                        records: r.u32()?,
                    };
                    let follows = last.is_none_or(|l| in_sequence(l, b.first_seq));
                    if b.first_seq < 0 || b.last_seq < 0 || b.records == 0 || !follows {
                        return Err(r.malformed(format!(
                            "kafka producer {id} partition {pid}: batch {}..{} out of sequence",
                            b.first_seq, b.last_seq
                        )));
                    }
                    last = Some(b.last_seq);
                    t.batch(id, pid, p_epoch, b, last_us);
                }
            }
            // The row's epoch is what was checkpointed, not the largest a partition shows.
            if let Some(row) = t.rows.get_mut(&id) {
                row.epoch = epoch;
            }
        }
        t.next_id = next_id;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(first: i32, last: i32, base: u64) -> BatchRow {
        BatchRow {
            first_seq: first,
            last_seq: last,
            base_offset: base,
            records: (last - first + 1) as u32,
        }
    }

    #[test]
    fn five_batches_are_kept_and_a_new_epoch_forgets_them() {
        let mut t = KafkaProducers::default();
        t.init(0, 0, 10);
        for i in 0..7 {
            t.batch(0, 3, 0, b(i * 2, i * 2 + 1, i as u64 * 2), 20);
        }
        let p = &t.get(0).expect("row").partitions[&3];
        assert_eq!(p.batches.len(), PRODUCER_BATCHES_KEPT);
        assert_eq!(p.batches.front().map(|x| x.first_seq), Some(4));
        t.batch(0, 3, 1, b(0, 0, 99), 30);
        let p = &t.get(0).expect("row").partitions[&3];
        assert_eq!((p.epoch, p.batches.len()), (1, 1));
        assert_eq!(t.next_id(), 1);
        assert_eq!(t.bytes(), PRODUCER_BYTES + PARTITION_BYTES);
        assert_eq!(t.idle_before(31, 10), vec![0]);
        assert!(t.idle_before(30, 10).is_empty(), "touched at 30");
        t.expire(0);
        assert_eq!(
            (t.len(), t.bytes(), t.next_id()),
            (0, 0, 1),
            "ids never reused"
        );
    }

    #[test]
    fn the_section_round_trips_and_refuses_corruption() {
        let mut t = KafkaProducers::default();
        t.init(4, 2, 10);
        t.batch(4, 1, 2, b(0, 4, 7), 11);
        t.batch(4, 1, 2, b(5, 5, 12), 12);
        t.batch(4, 9, 1, b(i32::MAX, 0, 3), 12);
        t.init(6, 0, 13);
        t.expire(6);
        let mut w = Writer::default();
        t.encode(&mut w);
        let back = KafkaProducers::decode(&mut Reader::new(&w.buf), 13, 10).expect("decodes");
        assert_eq!(back.next_id(), 7);
        assert_eq!(back.get(4), t.get(4));
        assert_eq!(back.bytes(), t.bytes());
        assert_eq!(back.idle_before(i64::MAX, 10), vec![4]);
        let mut low = Writer::default();
        low.i64(1);
        low.u32(1);
        low.i64(4);
        low.u16(0);
        low.i64(0);
        low.u32(0);
        assert!(KafkaProducers::decode(&mut Reader::new(&low.buf), 13, 10).is_err());
    }

    /// A section of one producer row (id 1, epoch `epoch`, active at `last_us`) with one
    /// partition `pid` at `p_epoch` holding `batches`.
    fn section(
        next_id: i64,
        epoch: i16,
        last_us: i64,
        pid: u64,
        p_epoch: i16,
        batches: &[(i32, i32)],
    ) -> Writer {
        let mut w = Writer::default();
        w.i64(next_id);
        w.u32(1);
        w.i64(1);
        w.u16(epoch as u16);
        w.i64(last_us);
        w.u32(1);
        w.u64(pid);
        w.u16(p_epoch as u16);
        w.u8(batches.len() as u8);
        for (first, last) in batches {
            w.u32(*first as u32);
            w.u32(*last as u32);
            w.u64(0);
            w.u32(1);
        }
        w
    }

    #[test]
    fn decode_refuses_values_apply_never_makes() {
        let decode = |w: Writer| KafkaProducers::decode(&mut Reader::new(&w.buf), 100, 10);
        assert!(decode(section(2, 1, 100, 9, 1, &[(0, 0), (1, 1)])).is_ok());
        let refused = [
            (
                "next id at i64::MAX",
                section(i64::MAX, 1, 100, 9, 1, &[(0, 0)]),
            ),
            ("negative next id", section(-1, 1, 100, 9, 1, &[(0, 0)])),
            ("id not handed out", section(1, 1, 100, 9, 1, &[(0, 0)])),
            ("negative epoch", section(2, -1, 100, 9, -1, &[(0, 0)])),
            (
                "activity in the future",
                section(2, 1, 101, 9, 1, &[(0, 0)]),
            ),
            ("partition epoch above", section(2, 1, 100, 9, 2, &[(0, 0)])),
            ("unknown partition", section(2, 1, 100, 10, 1, &[(0, 0)])),
            ("negative sequence", section(2, 1, 100, 9, 1, &[(-5, 0)])),
            (
                "out of sequence",
                section(2, 1, 100, 9, 1, &[(0, 0), (3, 3)]),
            ),
        ];
        for (why, w) in refused {
            assert!(decode(w).is_err(), "{why} decoded");
        }
    }
}
