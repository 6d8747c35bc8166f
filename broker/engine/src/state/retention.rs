//! Applying retention: a partition's first held offset (its low watermark) moves up.
//!
//! The low watermark is not a field of its own: it is the first run's `base_offset` (the
//! partition's `next_offset` when no run is left), so the runs, which every checkpoint already
//! holds whole, carry it, and a checkpoint written before retention existed reads as "nothing
//! removed". Only whole runs go: the planner rounds every new low down to a run's first
//! offset, and apply drops the runs that end at or below `low` (a `low` inside a run keeps
//! that run whole), so apply never reads the log and a follower and a replay do exactly what
//! the leader did. The runs' vector gives its memory back as it empties.

use super::model::Partition;
use super::run_floor::RunFloor;
use super::State;

impl State {
    /// Moves partition `pid`'s first held offset up to the start of the run holding `low`
    /// (`next_offset` when `low` is past every run; never down). Cursors left below move up
    /// to it: their charged failures were those of a removed message, and a lease that
    /// covered only removed messages ends.
    pub fn trim_partition(&mut self, pid: u64, low: u64) {
        self.move_low(pid, low, false);
    }

    /// Kafka DeleteRecords: as [`State::trim_partition`], but the first held offset becomes
    /// exactly `low` (at most `next_offset`), inside a run if need be: the run stays for the
    /// messages above `low`, the floor hides those below.
    pub fn delete_records(&mut self, pid: u64, low: u64) {
        self.move_low(pid, low, true);
    }

    fn move_low(&mut self, pid: u64, low: u64, exact: bool) {
        let Some(p) = self.partitions.get_mut(&pid) else {
            return;
        };
        let from = p.low_offset();
        if low.min(p.next_offset) <= from {
            return;
        }
        drop_below(p, low, exact, &mut self.run_floor);
        let (qid, next_offset, to) = (p.queue(), p.next_offset, p.low_offset());
        if to <= from {
            return;
        }
        self.kafka_txns.trim(pid, to);
        let gids: Vec<u64> = match self.queues.get(&qid) {
            Some(q) => q.groups.values().copied().collect(),
            None => Vec::new(),
        };
        let mut freed_leases = Vec::new();
        for gid in gids {
            let Some(g) = self.groups.get_mut(&gid) else {
                continue;
            };
            // A partition the group never touched starts at its first held offset. Read before
            // taking the row to write: a checkpoint may share it, and `get_mut` copies it (and
            // its shard's handles) whether or not it is then written (review s29 ckpt M1).
            if g.cursors.get(&pid).is_none_or(|r| r.committed >= to) {
                continue;
            }
            let Some(row) = g.cursors.get_mut(&pid) else {
                continue;
            };
            row.committed = to;
            row.failures = 0;
            row.delivered_end = row.delivered_end.max(to);
            if let Some(l) = row.lease.filter(|l| l.end <= to) {
                row.lease = None;
                freed_leases.push((l.id, gid));
            }
            if row.lease.is_none() && to < next_offset {
                g.mark_ready(pid);
            }
        }
        for (id, gid) in freed_leases {
            if let Some(rows) = self.leases.get_mut(&id) {
                rows.retain(|&(g, p)| !(g == gid && p == pid));
                if rows.is_empty() {
                    self.leases.remove(&id);
                }
            }
        }
    }
}

/// Drops the runs of `p` that end at or below `low`. The bytes the partition reports shrink
/// in proportion to the messages removed: the frames' own sizes would need the log, and apply
/// reads nothing.
fn drop_below(p: &mut Partition, low: u64, exact: bool, floor: &mut RunFloor) {
    let from = p.low_offset();
    let held = p.next_offset.saturating_sub(from);
    let whole = p
        .runs
        .partition_point(|r| r.base_offset + u64::from(r.count) <= low);
    floor.drop_front(p, whole);
    // Memory is counted by capacity (memory/size.rs): give it back once mostly unused, as
    // txn_ids.expire does, so the shrink's copy is paid for by the trims that emptied it.
    if p.runs.mostly_room() {
        p.runs.shrink_to(p.runs.len() * 2);
    }
    if exact {
        p.set_floor(p.floor().max(low.min(p.next_offset)));
    }
    // A floor at or below the first run's start (or with no run left) no longer decides the
    // low watermark: cleared, so the checkpoint is again the one without floors.
    if p.runs.first().is_none_or(|r| p.floor() <= r.base_offset) {
        p.set_floor(0);
    }
    let removed = p.low_offset().saturating_sub(from);
    p.bytes = if removed >= held {
        0
    } else {
        let kept = u128::from(p.bytes) * u128::from(held - removed) / u128::from(held.max(1));
        u64::try_from(kept).unwrap_or(p.bytes)
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Effect;
    use crate::state::config::QueueConfig;
    use crate::state::model::{cursor_start, CursorRow, LeaseRow};
    use crate::state::Loc;

    /// Queue "q", partition 1 holding offsets 0..10 in entries 3 (0..4, frames at 100), 5
    /// (4..7) and 9 (7..10); group "g" with cursor 2 and a lease to 4, group "h" at 8.
    fn state() -> State {
        let mut st = State::default();
        let at = |index| Loc { index, pos: 100 };
        st.seed_queue(1, "q", QueueConfig::default(), &[(1, "p")], at(1));
        for (index, base, n) in [(3, 0, 4), (5, 4, 3), (9, 7, 3)] {
            st.apply(
                &Effect::Append {
                    pid: 1,
                    base_offset: base,
                    hashes: (0..n).collect(),
                    frames: &[0u8; 100],
                },
                10,
                at(index),
            );
        }
        for (gid, name, committed, lease_end) in [(1, "g", 2, Some(4)), (2, "h", 8, None)] {
            st.apply(
                &Effect::GroupRegister {
                    qid: 1,
                    gid,
                    name,
                    start_from_us: i64::MIN,
                },
                20,
                at(10),
            );
            let row = CursorRow {
                committed,
                lease: lease_end.map(|end| LeaseRow {
                    id: u128::from(gid),
                    end,
                    expires_us: i64::MAX,
                    seconds: 60,
                }),
                failures: 1,
                attempt: 1,
                delivered_end: lease_end.unwrap_or(committed),
            };
            st.apply(&Effect::CursorPut { gid, pid: 1, row }, 20, at(10));
        }
        st
    }

    fn cursor(st: &State, gid: u64) -> CursorRow {
        st.groups[&gid].cursors[&1]
    }

    #[test]
    fn a_trim_inside_a_run_keeps_that_run_whole() {
        let mut st = state();
        st.apply(
            &Effect::RetentionTrim { pid: 1, low: 5 },
            30,
            Loc { index: 11, pos: 0 },
        );
        let p = st.partitions.get(&1).unwrap();
        assert_eq!(p.low_offset(), 4);
        assert_eq!(p.runs.len(), 2);
        let r = p.runs.first().unwrap();
        assert_eq!((r.base_offset, r.count, r.index, r.pos), (4, 3, 5, 100));
        assert_eq!(p.bytes, 300 * 6 / 10);
        assert_eq!(cursor_start(p, i64::MIN), 4);
        let g = cursor(&st, 1);
        assert_eq!((g.committed, g.failures, g.lease), (4, 0, None));
        assert!(
            !st.leases.contains_key(&1),
            "the removed lease is unindexed"
        );
        assert!(st.groups[&1].in_ready.contains(&1));
        assert_eq!(cursor(&st, 2).committed, 8, "a cursor above the low stays");
    }

    #[test]
    fn the_runs_give_their_memory_back_as_they_empty() {
        let mut st = State::default();
        let at = |index| Loc { index, pos: 100 };
        st.seed_queue(1, "q", QueueConfig::default(), &[(1, "p")], at(1));
        for i in 0..64u64 {
            st.apply(
                &Effect::Append {
                    pid: 1,
                    base_offset: i,
                    hashes: vec![i],
                    frames: &[0u8; 10],
                },
                10 + i as i64,
                at(2 + i),
            );
        }
        // Sealed runs cost ~5 B each here (one-byte deltas), the tail 4 runs of 32 B.
        let before = st.partitions.get(&1).unwrap().runs.heap_bytes();
        assert!(before >= 64 * 5, "{before}");
        st.trim_partition(1, 60);
        let p = st.partitions.get(&1).unwrap();
        assert_eq!(p.runs.len(), 4);
        assert!(p.runs.heap_bytes() < before / 4, "{}", p.runs.heap_bytes());
    }

    #[test]
    fn a_trim_never_goes_down_or_past_the_end() {
        let mut st = state();
        st.trim_partition(1, 4);
        let g = cursor(&st, 1);
        assert_eq!(g.committed, 4);
        assert_eq!(g.lease, None, "a lease ending at the low ended");
        assert!(!st.leases.contains_key(&1));
        let before = st.partitions.get(&1).unwrap().runs.clone();
        st.trim_partition(1, 2);
        assert_eq!(st.partitions.get(&1).unwrap().runs, before, "never down");
        st.trim_partition(1, 99);
        let p = st.partitions.get(&1).unwrap();
        assert!(p.runs.is_empty());
        assert_eq!((p.low_offset(), p.next_offset, p.bytes), (10, 10, 0));
        assert_eq!(cursor(&st, 2).committed, 10);
        assert!(st.leases.is_empty());
    }

    #[test]
    fn trimmed_partitions_survive_a_checkpoint() {
        let mut st = state();
        st.trim_partition(1, 7);
        let back = crate::state::decode_state(&crate::state::encode_state(&st)).unwrap();
        let (a, b) = (
            st.partitions.get(&1).unwrap(),
            back.partitions.get(&1).unwrap(),
        );
        assert_eq!(a.runs, b.runs);
        assert_eq!((b.low_offset(), b.next_offset, b.bytes), (7, 10, a.bytes));
        assert_eq!(cursor(&back, 1), cursor(&st, 1));
    }
}
