//! The incremental floor against a walk over every run: random appends (committed at once or
//! planned then committed), front drops, copies (of plain, copied and planned runs), partition
//! deletions and checkpoint read-backs, in any order.

use proptest::prelude::*;

use super::*;
use crate::state::model::test_partition;

#[derive(Clone, Debug)]
enum Op {
    /// Append one run to partition `p`; `pending`: planned now, committed by the next Commit.
    Append { p: usize, pending: bool },
    /// Drop the first `n` runs of partition `p`.
    Drop { p: usize, n: usize },
    /// Copy run number `r` (modulo its count) of partition `p` to a new entry.
    Copy { p: usize, r: usize, pending: bool },
    /// Give every planned run the next committed index.
    Commit,
    /// Delete partition `p` (its queue went) and create it anew, empty.
    Delete { p: usize },
    /// Re-count everything as a checkpoint load does.
    Reload,
}

const PARTS: usize = 4;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..PARTS, any::<bool>()).prop_map(|(p, pending)| Op::Append { p, pending }),
        3 => (0..PARTS, 0..4usize).prop_map(|(p, n)| Op::Drop { p, n }),
        4 => (0..PARTS, 0..16usize, any::<bool>()).prop_map(|(p, r, pending)| Op::Copy {
            p,
            r,
            pending
        }),
        2 => Just(Op::Commit),
        1 => (0..PARTS).prop_map(|p| Op::Delete { p }),
        1 => Just(Op::Reload),
    ]
}

struct Model {
    floor: RunFloor,
    parts: Vec<Partition>,
    /// The last log index used; every new entry takes the next.
    index: u64,
}

impl Model {
    fn new() -> Self {
        let parts = (0..PARTS as u64).map(|i| test_partition(i, "p")).collect();
        Model {
            floor: RunFloor::default(),
            parts,
            index: 0,
        }
    }

    /// A committed entry is applied only between planned cycles: what a cycle planned is
    /// committed first, as on the leader.
    fn next_index(&mut self, pending: bool) -> u64 {
        if pending {
            return PENDING_INDEX;
        }
        if self
            .parts
            .iter()
            .any(|p| p.runs.iter().any(|r| r.index == PENDING_INDEX))
        {
            self.apply(&Op::Commit);
        }
        self.index += 1;
        self.index
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Append { p, pending } => {
                let index = self.next_index(pending);
                let part = &mut self.parts[p];
                let run = Run {
                    base_offset: part.next_offset,
                    count: 1,
                    created_us: 0,
                    index,
                    pos: 0,
                };
                self.floor.push(part, run);
                part.next_offset += 1;
            }
            Op::Drop { p, n } => self.floor.drop_front(&mut self.parts[p], n),
            Op::Copy { p, r, pending } => {
                let index = self.next_index(pending);
                let part = &mut self.parts[p];
                if !part.runs.is_empty() {
                    let i = r % part.runs.len();
                    self.floor.set_index(part, i, index, 7, true);
                }
            }
            Op::Commit => {
                self.index += 1;
                for part in &mut self.parts {
                    for i in 0..part.runs.len() {
                        if part.runs.get(i).is_some_and(|r| r.index == PENDING_INDEX) {
                            self.floor.set_index(part, i, self.index, 0, false);
                        }
                    }
                }
            }
            Op::Delete { p } => {
                self.floor.remove_partition(&self.parts[p]);
                self.parts[p] = test_partition(p as u64, "p");
            }
            Op::Reload => {
                let mut floor = RunFloor::default();
                for part in &mut self.parts {
                    floor.add_partition(part);
                }
                self.floor = floor;
            }
        }
    }

    fn check(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.floor.lowest(), RunFloor::walked(self.parts.iter()));
        for part in &self.parts {
            let min = part.runs.iter().map(|r| r.index).min();
            prop_assert_eq!(lowest(part), min, "partition {}", part.id());
            if let Some(c) = part.copied_runs() {
                // Plain runs stay in log order: the first is the lowest of them.
                let plain: Vec<u64> = part
                    .runs
                    .iter()
                    .filter(|r| !c.bases.contains(&r.base_offset))
                    .map(|r| r.index)
                    .collect();
                prop_assert!(plain.windows(2).all(|w| w[0] <= w[1]), "{plain:?}");
                prop_assert!(!c.bases.is_empty(), "an empty copied set is freed");
            }
        }
        let copied: usize = self
            .parts
            .iter()
            .filter_map(|p| p.copied_runs())
            .map(|c| c.bases.len())
            .sum();
        prop_assert_eq!(self.floor.copied_runs, copied);
        let nodes: usize = self
            .parts
            .iter()
            .filter_map(|p| p.copied_runs())
            .map(|c| tree_nodes(c.bases.len()) - 1)
            .sum();
        prop_assert_eq!(self.floor.copied_nodes, nodes);
        prop_assert_eq!(
            self.floor.copied_parts,
            self.parts
                .iter()
                .filter(|p| p.copied_runs().is_some())
                .count()
        );
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_incremental_floor_is_the_lowest_run_of_all(ops in prop::collection::vec(op(), 1..80)) {
        let mut m = Model::new();
        for op in &ops {
            m.apply(op);
            m.check()?;
        }
        // Emptied, nothing is left counted.
        for p in 0..PARTS {
            m.apply(&Op::Delete { p });
        }
        let drops = m.floor.drops;
        prop_assert_eq!(m.floor, RunFloor { drops, ..RunFloor::default() });
    }
}

#[test]
fn the_floor_is_the_lowest_run_and_planned_runs_do_not_count() {
    let mut m = Model::new();
    assert_eq!(m.floor.lowest(), None);
    m.apply(&Op::Append {
        p: 0,
        pending: true,
    });
    assert_eq!(
        m.floor.lowest(),
        None,
        "a planned run names no committed entry"
    );
    m.apply(&Op::Commit);
    assert_eq!(m.floor.lowest(), Some(1));
    m.apply(&Op::Append {
        p: 0,
        pending: false,
    });
    m.apply(&Op::Append {
        p: 1,
        pending: false,
    });
    // The first run of partition 0 moves past the later ones: the floor is its second run.
    m.apply(&Op::Copy {
        p: 0,
        r: 0,
        pending: false,
    });
    assert_eq!(m.floor.lowest(), Some(2));
    m.apply(&Op::Drop { p: 0, n: 2 });
    assert_eq!(m.floor.lowest(), Some(3));
    assert!(
        m.parts[0].copied_runs().is_none(),
        "dropping the copied run frees the set"
    );
    assert_eq!(m.floor.bytes(), FIRSTS_NODE_BYTES);
}

#[test]
fn a_plain_partition_costs_one_node_whatever_its_runs() {
    let mut m = Model::new();
    for _ in 0..1000 {
        m.apply(&Op::Append {
            p: 0,
            pending: false,
        });
    }
    assert_eq!(m.floor.bytes(), FIRSTS_NODE_BYTES);
    assert_eq!(m.floor.firsts.len(), 1);
}
