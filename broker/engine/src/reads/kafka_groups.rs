//! ListGroups and OffsetFetch from the Kafka groups' applied state, under a grant of the
//! cycle (review s19 kafka H2: both copied whole tables, charged nowhere). Each listed group
//! is charged [`READ_ENTRY_BYTES`] plus its id and protocol strings, each offset row
//! [`OFFSET_ROW_BYTES`] plus its topic and metadata, summed over the borrowed rows before
//! anything is copied. Kafka's answers have no "more" flag, so past the grant the answer is
//! refused whole ([`KafkaGroupsOutcome::OverBudget`]), never cut; a table whose row count
//! alone cannot fit is refused before any row is visited (review s20 kafka M1).

use std::collections::BTreeSet;

use queenmq_protocol::kafka_groups::{KafkaCommitted, KafkaGroupsOutcome};
use queenmq_protocol::kafka_txn_reads::READ_ENTRY_BYTES;

use super::kafka_txns::Grant;
use crate::state::kafka_groups::{committed, KGroup, OffsetRow};
use crate::state::State;

/// What one fetched row holds besides its strings: the answer's struct and the two strings'
/// allocations (review s20 kafka L2: 40 bytes counted about half of it).
pub const OFFSET_ROW_BYTES: usize = std::mem::size_of::<KafkaCommitted>() + 32;

/// Whether `n` rows of at least `least` bytes each can fit `granted` at all.
fn may_fit(n: usize, least: usize, granted: Grant) -> bool {
    n <= granted.entries && n.saturating_mul(least) <= granted.bytes
}

fn offset_cost(topic: &str, row: &OffsetRow) -> Grant {
    Grant {
        entries: 1,
        bytes: OFFSET_ROW_BYTES
            .saturating_add(topic.len())
            .saturating_add(row.metadata.len()),
    }
}

fn group_cost(id: &str, g: &KGroup) -> Grant {
    Grant {
        entries: 1,
        bytes: READ_ENTRY_BYTES
            .saturating_add(id.len())
            .saturating_add(g.protocol_type.len())
            .saturating_add(g.protocol_name.len()),
    }
}

/// The committed offsets of `group` (`None`: every partition it has), and what they list.
/// A partition named twice is answered once (review s20 kafka M2).
pub fn fetch(
    st: &State,
    group: &str,
    partitions: Option<&[(String, i32)]>,
    granted: Grant,
) -> (KafkaGroupsOutcome, Grant) {
    let Some(g) = st.kafka_groups.get(group) else {
        return (KafkaGroupsOutcome::Fetched(Vec::new()), Grant::default());
    };
    let refused = (KafkaGroupsOutcome::OverBudget, Grant::default());
    match partitions {
        None => {
            if !may_fit(g.offsets.len(), OFFSET_ROW_BYTES, granted) {
                return refused;
            }
            answer(g.offsets.iter(), granted).unwrap_or(refused)
        }
        Some(ps) => {
            // At most MAX_KAFKA_OFFSETS_PER_REQUEST names (the planner's bound).
            let asked: BTreeSet<&(String, i32)> = ps.iter().collect();
            let rows = asked.iter().filter_map(|k| g.offsets.get_key_value(*k));
            answer(rows, granted).unwrap_or(refused)
        }
    }
}

/// The rows copied, if their cost fits `granted` (summed before anything is copied).
fn answer<'a>(
    rows: impl Iterator<Item = (&'a (String, i32), &'a OffsetRow)> + Clone,
    granted: Grant,
) -> Option<(KafkaGroupsOutcome, Grant)> {
    let mut cost = Grant::default();
    for ((topic, _), row) in rows.clone() {
        cost.add(offset_cost(topic, row));
        if !granted.fits(cost) {
            return None;
        }
    }
    let out: Vec<KafkaCommitted> = rows
        .map(|((topic, p), row)| committed(topic, *p, row))
        .collect();
    Some((KafkaGroupsOutcome::Fetched(out), cost))
}

/// Every group this tenant holds durable facts for, and what they list.
pub fn list(st: &State, granted: Grant) -> (KafkaGroupsOutcome, Grant) {
    if !may_fit(st.kafka_groups.len(), READ_ENTRY_BYTES, granted) {
        return (KafkaGroupsOutcome::OverBudget, Grant::default());
    }
    let mut cost = Grant::default();
    for (id, g) in st.kafka_groups.iter() {
        cost.add(group_cost(id, g));
        if !granted.fits(cost) {
            return (KafkaGroupsOutcome::OverBudget, Grant::default());
        }
    }
    let out = st
        .kafka_groups
        .iter()
        .filter_map(|(id, _)| st.kafka_groups.info(id))
        .collect();
    (KafkaGroupsOutcome::Groups(out), cost)
}
