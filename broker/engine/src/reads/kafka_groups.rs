//! ListGroups and OffsetFetch from the Kafka groups' applied state, under the admin reads'
//! grant of the cycle (review s19 kafka H2: both copied whole tables, charged nowhere). Each
//! listed group is charged [`READ_ENTRY_BYTES`] plus its id and protocol strings, each
//! offset row plus its topic and metadata, summed over the borrowed rows before anything is
//! copied. Kafka's answers have no "more" flag, so past the grant the answer is refused
//! whole ([`KafkaGroupsOutcome::OverBudget`]), never cut.

use queenmq_protocol::kafka_groups::{KafkaCommitted, KafkaGroupsOutcome};
use queenmq_protocol::kafka_txn_reads::READ_ENTRY_BYTES;

use super::kafka_txns::Grant;
use crate::state::kafka_groups::{committed, KGroup, OffsetRow};
use crate::state::State;

fn offset_cost(topic: &str, row: &OffsetRow) -> Grant {
    Grant {
        entries: 1,
        bytes: READ_ENTRY_BYTES
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
pub fn fetch(
    st: &State,
    group: &str,
    partitions: Option<&[(String, i32)]>,
    granted: Grant,
) -> (KafkaGroupsOutcome, Grant) {
    let Some(g) = st.kafka_groups.get(group) else {
        return (KafkaGroupsOutcome::Fetched(Vec::new()), Grant::default());
    };
    let rows: Vec<(&(String, i32), &OffsetRow)> = match partitions {
        None => g.offsets.iter().collect(),
        Some(ps) => ps
            .iter()
            .filter_map(|k| g.offsets.get_key_value(k))
            .collect(),
    };
    let mut cost = Grant::default();
    for ((topic, _), row) in &rows {
        cost.add(offset_cost(topic, row));
        if !granted.fits(cost) {
            return (KafkaGroupsOutcome::OverBudget, Grant::default());
        }
    }
    let out: Vec<KafkaCommitted> = rows
        .into_iter()
        .map(|((topic, p), row)| committed(topic, *p, row))
        .collect();
    (KafkaGroupsOutcome::Fetched(out), cost)
}

/// Every group this tenant holds durable facts for, and what they list.
pub fn list(st: &State, granted: Grant) -> (KafkaGroupsOutcome, Grant) {
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
