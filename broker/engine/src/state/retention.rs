//! Applying retention: a partition's first held offset (its low watermark) moves up.
//!
//! The low watermark is not a field of its own: it is the first run's `base_offset` (the
//! partition's `next_offset` when no run is left), so the runs, which every checkpoint already
//! holds whole, carry it, and a checkpoint written before retention existed reads as "nothing
//! removed". Runs wholly below the new low are dropped (their memory is freed); a run the low
//! cuts keeps its tail, starting at the frame whose byte position the planner read (`pos`):
//! apply never reads the log, so a follower and a replay do exactly what the leader did.

use super::model::Partition;
use super::State;

impl State {
    /// Moves partition `pid`'s first held offset up to `low` (never past `next_offset`, never
    /// down); `pos` is the byte position of `low`'s frame when `low` falls inside a run.
    /// Cursors left below move up to it: their charged failures were those of a removed
    /// message, and a lease that covered only removed messages ends.
    pub fn trim_partition(&mut self, pid: u64, low: u64, pos: u32) {
        let Some(p) = self.partitions.get_mut(&pid) else {
            return;
        };
        let from = p.low_offset();
        let to = low.min(p.next_offset);
        if to <= from {
            return;
        }
        drop_below(p, to, pos);
        let (qid, next_offset) = (p.queue, p.next_offset);
        let gids: Vec<u64> = match self.queues.get(&qid) {
            Some(q) => q.groups.values().copied().collect(),
            None => Vec::new(),
        };
        let mut freed_leases = Vec::new();
        for gid in gids {
            let Some(g) = self.groups.get_mut(&gid) else {
                continue;
            };
            // A partition the group never touched starts at its first held offset.
            let Some(row) = g.cursors.get_mut(&pid) else {
                continue;
            };
            if row.committed >= to {
                continue;
            }
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

/// Drops the messages of `p` below `to` (`p.low_offset() < to <= p.next_offset`). The bytes
/// the partition reports shrink in proportion to the messages removed: the frames' own sizes
/// would need the log, and apply reads nothing.
fn drop_below(p: &mut Partition, to: u64, pos: u32) {
    let held = p.next_offset.saturating_sub(p.low_offset());
    let removed = to.saturating_sub(p.low_offset());
    let whole = p
        .runs
        .partition_point(|r| r.base_offset + u64::from(r.count) <= to);
    p.runs.drain(..whole);
    if let Some(r) = p.runs.first_mut() {
        if r.base_offset < to {
            // `to` is inside this run: keep its tail, from the frame the planner located.
            let cut = to - r.base_offset;
            r.count = r
                .count
                .saturating_sub(u32::try_from(cut).unwrap_or(u32::MAX));
            r.base_offset = to;
            r.pos = pos;
        }
    }
    if p.runs.is_empty() {
        p.runs.shrink_to_fit();
    }
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
    fn a_trim_inside_a_run_keeps_its_tail_from_the_given_frame() {
        let mut st = state();
        st.apply(
            &Effect::RetentionTrim {
                pid: 1,
                low: 5,
                pos: 142,
            },
            30,
            Loc { index: 11, pos: 0 },
        );
        let p = st.partitions.get(&1).unwrap();
        assert_eq!(p.low_offset(), 5);
        assert_eq!(p.runs.len(), 2);
        let r = p.runs[0];
        assert_eq!((r.base_offset, r.count, r.index, r.pos), (5, 2, 5, 142));
        assert_eq!(p.bytes, 300 * 5 / 10);
        assert_eq!(cursor_start(p, i64::MIN), 5);
        let g = cursor(&st, 1);
        assert_eq!((g.committed, g.failures, g.lease), (5, 0, None));
        assert!(
            !st.leases.contains_key(&1),
            "the removed lease is unindexed"
        );
        assert!(st.groups[&1].in_ready.contains(&1));
        assert_eq!(cursor(&st, 2).committed, 8, "a cursor above the low stays");
    }

    #[test]
    fn a_lease_reaching_past_the_low_stays_and_a_trim_never_goes_down_or_past_the_end() {
        let mut st = state();
        st.trim_partition(1, 3, 0);
        let g = cursor(&st, 1);
        assert_eq!(g.committed, 3);
        assert_eq!(g.lease.map(|l| l.end), Some(4), "still covers message 3");
        assert!(st.leases.contains_key(&1));
        let before = st.partitions.get(&1).unwrap().runs.clone();
        st.trim_partition(1, 2, 0);
        assert_eq!(st.partitions.get(&1).unwrap().runs, before, "never down");
        st.trim_partition(1, 99, 0);
        let p = st.partitions.get(&1).unwrap();
        assert!(p.runs.is_empty());
        assert_eq!((p.low_offset(), p.next_offset, p.bytes), (10, 10, 0));
        assert_eq!(cursor(&st, 2).committed, 10);
        assert!(st.leases.is_empty());
    }

    #[test]
    fn trimmed_partitions_survive_a_checkpoint() {
        let mut st = state();
        st.trim_partition(1, 5, 142);
        let back = crate::state::decode_state(&crate::state::encode_state(&st)).unwrap();
        let (a, b) = (
            st.partitions.get(&1).unwrap(),
            back.partitions.get(&1).unwrap(),
        );
        assert_eq!(a.runs, b.runs);
        assert_eq!((b.low_offset(), b.next_offset, b.bytes), (5, 10, a.bytes));
        assert_eq!(cursor(&back, 1), cursor(&st, 1));
    }
}
