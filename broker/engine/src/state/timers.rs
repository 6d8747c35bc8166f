//! Pending timers (spec/native-api.md §2.15): one row per (queue, timer key), and a derived
//! index by due time so the tick finds what is due without walking every row.
//!
//! A row leaves by `TimerDelete` only: a cancel, or the fire, whose Append is in the same
//! entry (so a timer fires once, also across a crash: the entry has both or neither).

use std::collections::{BTreeMap, BTreeSet};

use crate::codec::{DecodeError, Reader, Writer};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerRow {
    pub partition: String,
    pub txn: String,
    /// The id the fired message carries, promised in the schedule's answer.
    pub message_id: u128,
    pub deliver_at_us: i64,
    pub created_us: i64,
    /// Compact JSON text, pushed as the message's data; or, for a queue with
    /// `encryptionEnabled`, [`SEALED_TIMER`] followed by the payload's envelope (sealed for
    /// `message_id`), which JSON text can never start with.
    pub payload: Vec<u8>,
}

/// The first byte of a sealed timer payload (no JSON text starts with NUL).
pub const SEALED_TIMER: u8 = 0;

impl TimerRow {
    pub fn sealed(&self) -> bool {
        self.payload.first() == Some(&SEALED_TIMER)
    }

    /// The payload as stored: the JSON text, or the envelope without its mark.
    pub fn stored_payload(&self) -> &[u8] {
        if self.sealed() {
            &self.payload[1..]
        } else {
            &self.payload
        }
    }
}

/// Per-row overhead besides its strings and payload: the map node share of the row and of
/// its due-index key (two B-tree entries with two `String` headers each, and the row).
const ROW_OVERHEAD: usize = 2 * (2 * 24 + 8) + std::mem::size_of::<TimerRow>() + 64;

impl TimerRow {
    /// What the row holds in memory, keys and due-index entry included.
    pub fn held_bytes(&self, queue: &str, key: &str) -> usize {
        ROW_OVERHEAD
            + 2 * (queue.len() + key.len())
            + self.partition.len()
            + self.txn.len()
            + self.payload.len()
    }
}

#[derive(Default)]
pub struct TimerTable {
    rows: BTreeMap<(String, String), TimerRow>,
    /// Derived: (deliver_at_us, queue, key) of every row.
    due: BTreeSet<(i64, String, String)>,
    /// Derived: the sum of `held_bytes` over the rows.
    bytes: usize,
}

impl TimerTable {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn held_bytes(&self) -> usize {
        self.bytes
    }

    pub fn get(&self, queue: &str, key: &str) -> Option<&TimerRow> {
        self.rows.get(&(queue.to_string(), key.to_string()))
    }

    /// Inserts or replaces; returns whether a row was replaced.
    pub fn put(&mut self, queue: &str, key: &str, row: TimerRow) -> bool {
        let replaced = self.remove(queue, key).is_some();
        self.bytes = self.bytes.saturating_add(row.held_bytes(queue, key));
        self.due
            .insert((row.deliver_at_us, queue.to_string(), key.to_string()));
        self.rows.insert((queue.to_string(), key.to_string()), row);
        replaced
    }

    pub fn remove(&mut self, queue: &str, key: &str) -> Option<TimerRow> {
        let row = self.rows.remove(&(queue.to_string(), key.to_string()))?;
        self.due
            .remove(&(row.deliver_at_us, queue.to_string(), key.to_string()));
        self.bytes = self.bytes.saturating_sub(row.held_bytes(queue, key));
        Some(row)
    }

    /// Up to `limit` timers due at or before `now_us`, earliest first.
    pub fn due(&self, now_us: i64, limit: usize) -> Vec<(String, String)> {
        self.due
            .iter()
            .take_while(|(t, _, _)| *t <= now_us)
            .take(limit)
            .map(|(_, q, k)| (q.clone(), k.clone()))
            .collect()
    }

    /// The rows of `queue` with a key after `after` (exclusive), in key order: up to `limit`,
    /// and whether more follow.
    pub fn page(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<(&str, &TimerRow)>, bool) {
        use std::ops::Bound;
        let start = match after {
            Some(a) => Bound::Excluded((queue.to_string(), a.to_string())),
            None => Bound::Included((queue.to_string(), String::new())),
        };
        let mut it = self
            .rows
            .range((start, Bound::Unbounded))
            .take_while(|((q, _), _)| q == queue)
            .map(|((_, k), r)| (k.as_str(), r));
        let rows: Vec<_> = it.by_ref().take(limit).collect();
        let more = it.next().is_some();
        (rows, more)
    }

    /// Every row in key order (checkpoints, canonical dumps).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &TimerRow)> {
        self.rows
            .iter()
            .map(|((q, k), r)| (q.as_str(), k.as_str(), r))
    }

    /// The checkpoint section (tag 2): `count: u32`, then per row `queue, key, partition, txn:
    /// str | message_id: u128 | deliver_at_us: i64 | created_us: i64 | payload: bytes`.
    pub fn encode(&self, w: &mut Writer) {
        w.u32(self.rows.len() as u32);
        for (q, k, r) in self.iter() {
            w.str(q);
            w.str(k);
            w.str(&r.partition);
            w.str(&r.txn);
            w.u128(r.message_id);
            w.i64(r.deliver_at_us);
            w.i64(r.created_us);
            w.bytes(&r.payload);
        }
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<TimerTable, DecodeError> {
        let mut t = TimerTable::default();
        // Four strings (4 bytes each at least), an id, two times and the payload's length.
        let n = r.count(4 * 4 + 16 + 16 + 4)?;
        for _ in 0..n {
            let queue = r.string()?;
            let key = r.string()?;
            let row = TimerRow {
                partition: r.string()?,
                txn: r.string()?,
                message_id: r.u128()?,
                deliver_at_us: r.i64()?,
                created_us: r.i64()?,
                payload: r.bytes()?.to_vec(),
            };
            if t.put(&queue, &key, row) {
                return Err(r.malformed(format!("timer {queue:?}/{key:?} appears twice")));
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(at: i64) -> TimerRow {
        TimerRow {
            partition: "Default".into(),
            txn: format!("t{at}"),
            message_id: at as u128,
            deliver_at_us: at,
            created_us: 1,
            payload: b"{}".to_vec(),
        }
    }

    #[test]
    fn upsert_moves_the_due_time_and_keeps_bytes_exact() {
        let mut t = TimerTable::default();
        assert!(!t.put("q", "a", row(50)));
        let one = t.held_bytes();
        assert!(t.put("q", "a", row(10)));
        assert_eq!(t.held_bytes(), one);
        assert_eq!(t.due(20, 10), vec![("q".to_string(), "a".to_string())]);
        assert!(t.due(9, 10).is_empty());
        assert!(t.remove("q", "a").is_some());
        assert_eq!((t.len(), t.held_bytes()), (0, 0));
        assert!(t.due(i64::MAX, 10).is_empty());
    }

    #[test]
    fn pages_stay_in_their_queue_and_resume_after_the_cursor() {
        let mut t = TimerTable::default();
        for (q, k) in [("a", "z"), ("b", "1"), ("b", "2"), ("b", "3"), ("c", "0")] {
            t.put(q, k, row(1));
        }
        let (rows, more) = t.page("b", None, 2);
        assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), ["1", "2"]);
        assert!(more);
        let (rows, more) = t.page("b", Some("2"), 2);
        assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), ["3"]);
        assert!(!more);
    }

    #[test]
    fn the_section_round_trips_and_refuses_a_repeated_row() {
        let mut t = TimerTable::default();
        t.put("q", "a", row(5));
        t.put("q", "b", row(7));
        let mut w = Writer::with_capacity(64);
        t.encode(&mut w);
        let back = TimerTable::decode(&mut Reader::new(&w.buf)).unwrap();
        assert_eq!(
            back.iter().collect::<Vec<_>>(),
            t.iter().collect::<Vec<_>>()
        );
        assert_eq!(back.held_bytes(), t.held_bytes());
        let mut twice = Writer::with_capacity(64);
        twice.u32(2);
        for _ in 0..2 {
            twice.str("q");
            twice.str("a");
            twice.str("Default");
            twice.str("t");
            twice.u128(1);
            twice.i64(1);
            twice.i64(1);
            twice.bytes(b"{}");
        }
        assert!(TimerTable::decode(&mut Reader::new(&twice.buf)).is_err());
    }
}
