//! Kafka consumer groups' durable facts (docs/kafka-compat.md "Consumer groups"): committed
//! offsets and each group's last generation. Membership lives in the Kafka door.

use std::collections::BTreeMap;

use queenmq_protocol::kafka_groups::{KafkaCommitted, KafkaGroupInfo};

use crate::codec::{DecodeError, Reader, Writer};

/// Most Kafka groups one tenant may hold; a commit or generation naming a new group past it
/// is refused (retriable) until groups are deleted.
pub const MAX_KAFKA_GROUPS: usize = 10_000;
/// The most bytes the tenant's Kafka group rows may hold (as counted by [`offset_bytes`] and
/// [`group_bytes`]). A constant: every replica must agree on the state a refusal leaves.
pub const MAX_KAFKA_GROUP_BYTES: usize = 64 << 20;
/// A row's cost beside its strings: the map entry and the B-tree nodes' slack (nodes of 11
/// slots are half empty at worst).
const OFFSET_OVERHEAD: usize =
    2 * (std::mem::size_of::<(String, i32)>() + std::mem::size_of::<OffsetRow>());
const GROUP_OVERHEAD: usize = 2 * (std::mem::size_of::<String>() + std::mem::size_of::<KGroup>());

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRow {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_time_us: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KGroup {
    pub generation: i32,
    pub protocol_type: String,
    pub protocol_name: String,
    pub offsets: BTreeMap<(String, i32), OffsetRow>,
}

/// What one committed offset holds in memory (strings at their length: apply builds them
/// from the entry's text).
pub fn offset_bytes(topic: &str, metadata: &str) -> usize {
    topic.len() + metadata.len() + OFFSET_OVERHEAD
}

/// What a group row holds without its offsets.
pub fn group_bytes(group: &str, protocol_type: &str, protocol_name: &str) -> usize {
    group.len() + protocol_type.len() + protocol_name.len() + GROUP_OVERHEAD
}

#[derive(Debug, Default)]
pub struct KafkaGroups {
    groups: BTreeMap<String, KGroup>,
    /// Derived: the sum of the rows' bytes.
    bytes: usize,
}

impl KafkaGroups {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn get(&self, group: &str) -> Option<&KGroup> {
        self.groups.get(group)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &KGroup)> {
        self.groups.iter().map(|(g, v)| (g.as_str(), v))
    }

    fn entry(&mut self, group: &str) -> &mut KGroup {
        if !self.groups.contains_key(group) {
            self.bytes = self.bytes.saturating_add(group_bytes(group, "", ""));
            self.groups.insert(group.to_string(), KGroup::default());
        }
        // Inserted just above when absent.
        self.groups.entry(group.to_string()).or_default()
    }

    pub fn set_generation(&mut self, group: &str, generation: i32, ptype: &str, pname: &str) {
        let g = self.entry(group);
        let old = g.protocol_type.len() + g.protocol_name.len();
        // The planner decided it (it wraps to 1 after i32::MAX, as Kafka does): a max here
        // would leave the state at i32::MAX and mint 1 forever.
        g.generation = generation;
        g.protocol_type = ptype.to_string();
        g.protocol_name = pname.to_string();
        let new = ptype.len() + pname.len();
        self.bytes = self.bytes.saturating_sub(old).saturating_add(new);
    }

    pub fn put_offset(&mut self, group: &str, topic: &str, partition: i32, row: OffsetRow) {
        let add = offset_bytes(topic, &row.metadata);
        let g = self.entry(group);
        let old = g
            .offsets
            .insert((topic.to_string(), partition), row)
            .map_or(0, |o| offset_bytes(topic, &o.metadata));
        self.bytes = self.bytes.saturating_sub(old).saturating_add(add);
    }

    pub fn delete_offset(&mut self, group: &str, topic: &str, partition: i32) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        if let Some(o) = g.offsets.remove(&(topic.to_string(), partition)) {
            self.bytes = self.bytes.saturating_sub(offset_bytes(topic, &o.metadata));
        }
    }

    /// Drops every group's committed offsets of `topic`. Kafka forgets a deleted topic's
    /// offsets; kept, they would make a group resume a topic created again under the name at
    /// the old incarnation's offsets and skip its first records.
    pub fn forget_topic(&mut self, topic: &str) {
        let lo = (topic.to_string(), i32::MIN);
        let hi = (topic.to_string(), i32::MAX);
        let mut freed = 0usize;
        for g in self.groups.values_mut() {
            let doomed: Vec<(String, i32)> = g
                .offsets
                .range(lo.clone()..=hi.clone())
                .map(|(k, _)| k.clone())
                .collect();
            for k in doomed {
                if let Some(o) = g.offsets.remove(&k) {
                    freed = freed.saturating_add(offset_bytes(topic, &o.metadata));
                }
            }
        }
        self.bytes = self.bytes.saturating_sub(freed);
    }

    pub fn delete_group(&mut self, group: &str) {
        if let Some(g) = self.groups.remove(group) {
            let mut b = group_bytes(group, &g.protocol_type, &g.protocol_name);
            for ((t, _), o) in &g.offsets {
                b = b.saturating_add(offset_bytes(t, &o.metadata));
            }
            self.bytes = self.bytes.saturating_sub(b);
        }
    }

    pub fn info(&self, group: &str) -> Option<KafkaGroupInfo> {
        self.groups.get(group).map(|g| KafkaGroupInfo {
            group: group.to_string(),
            generation: g.generation,
            protocol_type: g.protocol_type.clone(),
            protocol_name: g.protocol_name.clone(),
            offsets: g.offsets.len(),
        })
    }

    pub fn committed(&self, group: &str, topic: &str, partition: i32) -> Option<KafkaCommitted> {
        let o = self
            .groups
            .get(group)?
            .offsets
            .get(&(topic.to_string(), partition))?;
        Some(committed(topic, partition, o))
    }

    /// Checkpoint section tag 3 (docs/storage-format.md "Kafka groups section").
    pub fn encode(&self, w: &mut Writer) {
        w.u32(self.groups.len() as u32);
        for (name, g) in &self.groups {
            w.str(name);
            w.u32(g.generation as u32);
            w.str(&g.protocol_type);
            w.str(&g.protocol_name);
            w.u32(g.offsets.len() as u32);
            for ((topic, partition), o) in &g.offsets {
                w.str(topic);
                w.u32(*partition as u32);
                w.i64(o.offset);
                w.u32(o.leader_epoch as u32);
                w.str(&o.metadata);
                w.i64(o.commit_time_us);
            }
        }
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<KafkaGroups, DecodeError> {
        let mut t = KafkaGroups::default();
        let n = r.count(4 * 4 + 4)?;
        for _ in 0..n {
            let name = r.str()?;
            if t.groups.contains_key(name) {
                return Err(r.malformed(format!("kafka group {name:?} appears twice")));
            }
            let generation = r.u32()? as i32;
            let ptype = r.str()?;
            let pname = r.str()?;
            t.set_generation(name, generation, ptype, pname);
            let m = r.count(4 + 4 + 8 + 4 + 4 + 8)?;
            for _ in 0..m {
                let topic = r.str()?;
                let partition = r.u32()? as i32;
                if t.get(name)
                    .is_some_and(|g| g.offsets.contains_key(&(topic.to_string(), partition)))
                {
                    return Err(r.malformed(format!(
                        "kafka offset {name:?}/{topic:?}/{partition} appears twice"
                    )));
                }
                let row = OffsetRow {
                    offset: r.i64()?,
                    leader_epoch: r.u32()? as i32,
                    metadata: r.string()?,
                    commit_time_us: r.i64()?,
                };
                t.put_offset(name, topic, partition, row);
            }
        }
        Ok(t)
    }
}

pub fn committed(topic: &str, partition: i32, o: &OffsetRow) -> KafkaCommitted {
    KafkaCommitted {
        topic: topic.to_string(),
        partition,
        offset: o.offset,
        leader_epoch: o.leader_epoch,
        metadata: o.metadata.clone(),
        commit_time_us: o.commit_time_us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(offset: i64, metadata: &str) -> OffsetRow {
        OffsetRow {
            offset,
            leader_epoch: 3,
            metadata: metadata.into(),
            commit_time_us: 9,
        }
    }

    #[test]
    fn bytes_follow_every_change() {
        let mut t = KafkaGroups::default();
        t.set_generation("g", 2, "consumer", "range");
        let g = group_bytes("g", "consumer", "range");
        assert_eq!(t.bytes(), g);
        t.put_offset("g", "t", 0, row(5, "meta"));
        assert_eq!(t.bytes(), g + offset_bytes("t", "meta"));
        t.put_offset("g", "t", 0, row(6, ""));
        assert_eq!(t.bytes(), g + offset_bytes("t", ""));
        t.set_generation("g", 1, "consumer", "roundrobin");
        assert_eq!(
            t.get("g").map(|g| g.generation),
            Some(1),
            "apply keeps what the planner minted (it wraps after i32::MAX)"
        );
        t.delete_offset("g", "t", 0);
        assert_eq!(t.bytes(), group_bytes("g", "consumer", "roundrobin"));
        t.put_offset("g", "t", 1, row(1, "x"));
        t.delete_group("g");
        assert_eq!((t.bytes(), t.len()), (0, 0));
    }

    #[test]
    fn a_forgotten_topic_leaves_other_topics_and_groups_alone() {
        let mut t = KafkaGroups::default();
        for g in ["g", "h"] {
            t.put_offset(g, "t", 0, row(5, "meta"));
            t.put_offset(g, "t", i32::MAX, row(5, ""));
            t.put_offset(g, "t.x", 0, row(7, ""));
            t.put_offset(g, "s", 1, row(8, ""));
        }
        t.forget_topic("t");
        for g in ["g", "h"] {
            assert!(t.committed(g, "t", 0).is_none(), "{g}");
            assert!(t.committed(g, "t", i32::MAX).is_none(), "{g}");
            assert!(t.committed(g, "t.x", 0).is_some(), "{g}");
            assert!(t.committed(g, "s", 1).is_some(), "{g}");
        }
        let left = 2 * (group_bytes("g", "", "") + offset_bytes("t.x", "") + offset_bytes("s", ""));
        assert_eq!(t.bytes(), left, "bytes follow");
    }

    #[test]
    fn the_section_round_trips_and_refuses_repeats() {
        let mut t = KafkaGroups::default();
        t.set_generation("g", 7, "consumer", "range");
        t.put_offset("g", "t", 0, row(5, "meta"));
        t.put_offset("h", "u", 2, row(1, ""));
        let mut w = Writer::default();
        t.encode(&mut w);
        let back = KafkaGroups::decode(&mut Reader::new(&w.buf)).expect("decodes");
        assert_eq!(back.bytes(), t.bytes());
        assert_eq!(back.info("g"), t.info("g"));
        assert_eq!(
            back.committed("g", "t", 0).map(|c| c.metadata),
            Some("meta".to_string())
        );
        let mut twice = Writer::default();
        twice.u32(2);
        for _ in 0..2 {
            twice.str("g");
            twice.u32(1);
            twice.str("");
            twice.str("");
            twice.u32(0);
        }
        assert!(KafkaGroups::decode(&mut Reader::new(&twice.buf)).is_err());
    }
}
