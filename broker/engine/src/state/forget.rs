//! Forgetting the messages whose log records are gone, once the operator accepted the loss
//! (accept_data_loss, server.rs). A run naming an entry below the log's first index can never
//! be read again, and a cursor left below the runs that remain would make every pop of its
//! partition fail on the missing entry, so the surviving messages behind it could never be
//! delivered. The repaired state is checkpointed at once, so later starts find nothing missing.

use super::model::PENDING_INDEX;
use super::State;

/// The messages of one partition that were forgotten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forgotten {
    pub queue: String,
    pub partition: String,
    /// Offsets `from..to` are gone; `to` is the partition's first held offset now.
    pub from: u64,
    pub to: u64,
    /// Groups whose cursor stood below `to` and was moved up to it.
    pub groups: Vec<String>,
}

impl Forgotten {
    pub fn count(&self) -> u64 {
        self.to.saturating_sub(self.from)
    }
}

impl State {
    /// Drops every run whose entry lies below `log_first` and moves each cursor (with its
    /// lease, when the lease covered only forgotten messages) up to the partition's first
    /// held offset. Runs are appended in log order, but a compacted run points past later
    /// ones, so everything up to the last lost run goes (a partition's held offsets stay one
    /// stretch). What was dropped, by partition.
    pub fn forget_runs_below(&mut self, log_first: u64) -> Vec<Forgotten> {
        let lost = |index: u64| index < log_first && index != PENDING_INDEX;
        let pids: Vec<u64> = self
            .partitions
            .values()
            .filter(|p| p.runs.iter().any(|r| lost(r.index)))
            .map(|p| p.id())
            .collect();
        let mut out = Vec::with_capacity(pids.len());
        for pid in pids {
            let Some(p) = self.partitions.get_mut(&pid) else {
                continue;
            };
            let from = p.low_offset();
            let drop = p
                .runs
                .iter()
                .rposition(|r| lost(r.index))
                .map_or(0, |i| i + 1);
            self.run_floor.drop_front(p, drop);
            let to = p.low_offset();
            let (qid, next_offset, partition) = (p.queue(), p.next_offset, p.name.to_string());
            let (queue, gids) = match self.queues.get(&qid) {
                Some(q) => (q.name.clone(), q.groups.values().copied().collect()),
                None => (String::new(), Vec::new()),
            };
            let mut groups = Vec::new();
            let mut freed_leases = Vec::new();
            for gid in gids {
                let Some(g) = self.groups.get_mut(&gid) else {
                    continue;
                };
                // An untouched partition's cursor starts at its first held offset. Read first: a
                // checkpoint may share the row, and `get_mut` copies it whether or not it is
                // then written (review s29 ckpt M1).
                if g.cursors.get(&pid).is_none_or(|r| r.committed >= to) {
                    continue;
                }
                let Some(row) = g.cursors.get_mut(&pid) else {
                    continue;
                };
                row.committed = to;
                // The charged failures were those of a message that no longer exists.
                row.failures = 0;
                row.delivered_end = row.delivered_end.max(to);
                if let Some(l) = row.lease.filter(|l| l.end <= to) {
                    row.lease = None;
                    freed_leases.push((l.id, gid));
                }
                if row.lease.is_none() && to < next_offset {
                    g.mark_ready(pid);
                }
                groups.push(g.name.clone());
            }
            for (id, gid) in freed_leases {
                if let Some(rows) = self.leases.get_mut(&id) {
                    rows.retain(|&(g, p)| !(g == gid && p == pid));
                    if rows.is_empty() {
                        self.leases.remove(&id);
                    }
                }
            }
            groups.sort();
            out.push(Forgotten {
                queue,
                partition,
                from,
                to,
                groups,
            });
        }
        out.sort_by(|a, b| (&a.queue, &a.partition).cmp(&(&b.queue, &b.partition)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Effect;
    use crate::state::config::QueueConfig;
    use crate::state::model::{cursor_start, CursorRow, LeaseRow};
    use crate::state::Loc;

    /// Queue "q", partition "p" (pid 1) holding offsets 0..10 in entries 3 (0..4), 5 (4..7)
    /// and 9 (7..10); groups "behind" (cursor 2, lease to 4), "straddling" (cursor 4, lease
    /// to 8), "ahead" (cursor 8) and "fresh" (no cursor).
    fn state() -> State {
        let mut st = State::default();
        let at = |index| Loc { index, pos: 0 };
        st.seed_queue(1, "q", QueueConfig::default(), &[(1, "p")], at(1));
        for (index, base, n) in [(3, 0, 4), (5, 4, 3), (9, 7, 3)] {
            st.apply(
                &Effect::Append {
                    pid: 1,
                    base_offset: base,
                    hashes: (0..n).collect(),
                    frames: &[],
                },
                10,
                at(index),
            );
        }
        let rows = [
            ("behind", 2, Some(4)),
            ("straddling", 4, Some(8)),
            ("ahead", 8, None),
            ("fresh", 0, None),
        ];
        for (gid, (name, committed, lease_end)) in (1u64..).zip(rows) {
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
            if name == "fresh" {
                continue;
            }
            let row = CursorRow {
                committed,
                lease: lease_end.map(|end| LeaseRow {
                    id: u128::from(gid),
                    end,
                    expires_us: i64::MAX,
                    seconds: 60,
                }),
                failures: 2,
                attempt: 1,
                delivered_end: lease_end.unwrap_or(committed),
            };
            st.apply(&Effect::CursorPut { gid, pid: 1, row }, 20, at(10));
        }
        st
    }

    fn row(st: &State, group: &str) -> Option<CursorRow> {
        let gid = st.queue_named("q")?.groups.get(group)?;
        st.groups.get(gid)?.cursors.get(&1).copied()
    }

    #[test]
    fn runs_below_the_log_start_go_and_cursors_move_past_them() {
        let mut st = state();
        let gone = st.forget_runs_below(6);
        assert_eq!(
            gone,
            vec![Forgotten {
                queue: "q".into(),
                partition: "p".into(),
                from: 0,
                to: 7,
                groups: vec!["behind".into(), "straddling".into()],
            }]
        );
        assert_eq!(gone[0].count(), 7);
        let p = st.partitions.get(&1).unwrap();
        assert_eq!(p.low_offset(), 7);
        assert_eq!(p.runs.len(), 1);
        assert_eq!(p.next_offset, 10);
        assert_eq!(
            cursor_start(p, i64::MIN),
            7,
            "a new group starts at what is held"
        );

        let behind = row(&st, "behind").unwrap();
        assert_eq!(
            (behind.committed, behind.failures, behind.lease),
            (7, 0, None)
        );
        assert!(
            !st.leases.contains_key(&1),
            "the freed lease leaves the lease index"
        );
        let straddling = row(&st, "straddling").unwrap();
        assert_eq!(straddling.committed, 7);
        assert_eq!(
            straddling.lease.map(|l| l.end),
            Some(8),
            "it still covers a held message"
        );
        assert!(st.leases.contains_key(&2));
        assert_eq!(row(&st, "ahead").unwrap().committed, 8, "untouched");
        assert_eq!(row(&st, "fresh"), None);
        let behind_gid = st.queue_named("q").unwrap().groups["behind"];
        assert!(st.groups[&behind_gid].in_ready.contains(&1));

        assert_eq!(st.forget_runs_below(6), vec![], "nothing left to forget");
    }

    #[test]
    fn a_partition_whose_every_run_is_lost_keeps_its_next_offset() {
        let mut st = state();
        let gone = st.forget_runs_below(100);
        assert_eq!((gone[0].from, gone[0].to, gone[0].count()), (0, 10, 10));
        let p = st.partitions.get(&1).unwrap();
        assert!(p.runs.is_empty());
        assert_eq!((p.low_offset(), p.next_offset), (10, 10));
        assert_eq!(row(&st, "ahead").unwrap().committed, 10);
        let straddling = row(&st, "straddling").unwrap();
        assert_eq!(straddling.lease, None);
        assert!(st.leases.is_empty());
    }

    #[test]
    fn a_whole_log_forgets_nothing() {
        let mut st = state();
        assert_eq!(st.forget_runs_below(0), vec![]);
        assert_eq!(st.forget_runs_below(3), vec![]);
        assert_eq!(st.partitions.get(&1).unwrap().runs.len(), 3);
        assert_eq!(row(&st, "behind").unwrap().committed, 2);
    }

    #[test]
    fn the_forgotten_state_survives_a_checkpoint() {
        let mut st = state();
        st.forget_runs_below(6);
        let back = crate::state::decode_state(&crate::state::encode_state(&st)).unwrap();
        let p = back.partitions.get(&1).unwrap();
        assert_eq!((p.low_offset(), p.next_offset), (7, 10));
        assert_eq!(row(&back, "behind").unwrap().committed, 7);
        // A later start whose log begins at 6 finds nothing missing (broker log_backing.rs).
        assert!(
            p.runs.iter().all(|r| r.index >= 6),
            "a run points below the log's start: {:?}",
            p.runs
        );
    }
}
