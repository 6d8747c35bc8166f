//! Kafka consumer groups' durable requests (protocol/src/kafka_groups.rs). The door's
//! coordinator has judged membership and generations; here offsets are stored, generations
//! minted, and groups listed and removed. A read emits nothing: its answer is released after
//! the cycle's entry commits, so it is ordered after every commit answered before it.

use std::collections::HashSet;

use queenmq_protocol::kafka_groups::*;
use queenmq_protocol::{ErrorCode, QueenError};

use super::Planner;
use crate::entry::Effect;
use crate::reads::kafka_txns::Grant;
use crate::state::kafka_groups::{
    group_bytes, offset_bytes, MAX_KAFKA_GROUPS, MAX_KAFKA_GROUP_BYTES,
};

/// What the cycle's first named-partition OffsetFetch may list under memory pressure.
pub const PRESSED_NAMED_FETCH_BYTES: usize = 1 << 20;

/// The retriable refusal past the tenant's group count or byte cap.
pub fn kafka_groups_full(what: &str) -> QueenError {
    QueenError::new(
        ErrorCode::Unavailable,
        format!("kafka_groups_unavailable: {what}; retry after groups are deleted"),
    )
}

fn check_partition(topic: &str, partition: i32) -> KafkaPartitionResult {
    if topic.is_empty() || topic.len() > MAX_KAFKA_TOPIC_BYTES || partition < 0 {
        KafkaPartitionResult::InvalidTopic
    } else {
        KafkaPartitionResult::Ok
    }
}

/// Refuses what the door should have bounded already: the engine trusts no door.
fn check_bounds(req: &KafkaGroupsReq) -> Result<(), QueenError> {
    let group_ok = |g: &str| valid_group_id(g);
    let ok = match req {
        KafkaGroupsReq::Commit { group, offsets } => {
            group_ok(group) && offsets.len() <= MAX_KAFKA_OFFSETS_PER_REQUEST
        }
        KafkaGroupsReq::Fetch { group, partitions } => {
            group_ok(group)
                && partitions
                    .as_ref()
                    .is_none_or(|p| p.len() <= MAX_KAFKA_OFFSETS_PER_REQUEST)
        }
        KafkaGroupsReq::NextGeneration {
            group,
            protocol_type,
            protocol_name,
        } => {
            group_ok(group)
                && protocol_type.len() <= MAX_KAFKA_PROTOCOL_BYTES
                && protocol_name.len() <= MAX_KAFKA_PROTOCOL_BYTES
        }
        KafkaGroupsReq::List => true,
        KafkaGroupsReq::Describe { group } => group_ok(group),
        KafkaGroupsReq::Infos { groups } => groups.len() <= MAX_KAFKA_GROUPS_PER_REQUEST,
        KafkaGroupsReq::Delete { groups } => groups.len() <= MAX_KAFKA_GROUPS_PER_REQUEST,
        KafkaGroupsReq::OffsetDelete { group, partitions } => {
            group_ok(group) && partitions.len() <= MAX_KAFKA_OFFSETS_PER_REQUEST
        }
    };
    if ok {
        Ok(())
    } else {
        Err(QueenError::bad_request(
            "kafka group request out of bounds (group id, protocol or count)",
        ))
    }
}

impl Planner<'_> {
    pub fn plan_kafka_groups(
        &mut self,
        req: &KafkaGroupsReq,
    ) -> Result<KafkaGroupsOutcome, QueenError> {
        check_bounds(req)?;
        if let Some(m) = self.memory {
            if m.pressed() && req.grows() {
                return Err(m.refusal());
            }
        }
        Ok(match req {
            KafkaGroupsReq::Commit { group, offsets } => {
                KafkaGroupsOutcome::Committed(self.kafka_commit(group, offsets)?)
            }
            // A consumer's own offsets (at its join, `committed()`, a Streams restore) are
            // consumption: held with the pops' answers and charged to their room, so
            // monitoring reads never starve them, nor they the pops' share of it; the cycle's
            // first that lists rows is served whatever is left (review s20 kafka M3, L1).
            KafkaGroupsReq::Fetch {
                group,
                partitions: Some(ps),
            } => {
                let room = Grant {
                    entries: usize::MAX,
                    bytes: self.answer_room(),
                };
                let granted = match (self.cycle.named_fetch_served, self.memory_pressed()) {
                    (true, _) => room,
                    (false, false) => Grant::UNLIMITED,
                    // Under pressure the first is still served up to a fixed size, as a pop's
                    // first message is: a consumer's offsets are what lets consumption
                    // resume (review s21 lead C1).
                    (false, true) => Grant {
                        bytes: room.bytes.max(PRESSED_NAMED_FETCH_BYTES),
                        ..room
                    },
                };
                let (out, spent) =
                    crate::reads::kafka_groups::fetch(self.st, group, Some(ps), granted);
                self.cycle.answer_bytes = self.cycle.answer_bytes.saturating_add(spent.bytes);
                self.cycle.named_fetch_served |= spent.entries > 0;
                out
            }
            // A whole group's offsets (an admin's listConsumerGroupOffsets): under the cycle's
            // admin-read grant, refused whole past it (review s19 kafka H2).
            KafkaGroupsReq::Fetch {
                group,
                partitions: None,
            } => {
                let granted = self.txn_read_grant();
                let (out, spent) = crate::reads::kafka_groups::fetch(self.st, group, None, granted);
                self.charge_admin_read(spent);
                out
            }
            KafkaGroupsReq::NextGeneration {
                group,
                protocol_type,
                protocol_name,
            } => {
                let cur = self.st.kafka_groups.get(group);
                let (last, old_bytes) = match cur {
                    Some(g) => (
                        g.generation,
                        group_bytes(group, &g.protocol_type, &g.protocol_name),
                    ),
                    None => (0, 0),
                };
                if cur.is_none() {
                    self.kafka_room_for_group()?;
                }
                let grow =
                    group_bytes(group, protocol_type, protocol_name).saturating_sub(old_bytes);
                self.kafka_room_for_bytes(grow)?;
                // Generations wrap as Kafka's do at i32::MAX (never negative: -1 means none).
                let generation = if last == i32::MAX { 1 } else { last + 1 };
                self.emit(Effect::KafkaGeneration {
                    group,
                    generation,
                    protocol_type,
                    protocol_name,
                });
                KafkaGroupsOutcome::Generation(generation)
            }
            KafkaGroupsReq::List => {
                let granted = self.txn_read_grant();
                let (out, spent) = crate::reads::kafka_groups::list(self.st, granted);
                self.charge_admin_read(spent);
                out
            }
            KafkaGroupsReq::Describe { group } => {
                KafkaGroupsOutcome::Group(self.st.kafka_groups.info(group))
            }
            // Bounded by the request: at most 1 000 rows of short strings.
            KafkaGroupsReq::Infos { groups } => KafkaGroupsOutcome::Infos(
                groups
                    .iter()
                    .map(|g| self.st.kafka_groups.info(g))
                    .collect(),
            ),
            KafkaGroupsReq::Delete { groups } => {
                let mut out = Vec::with_capacity(groups.len());
                for g in groups {
                    let found = self.st.kafka_groups.get(g).is_some();
                    if found {
                        self.emit(Effect::KafkaGroupDelete { group: g });
                    }
                    out.push(found);
                }
                KafkaGroupsOutcome::Deleted(out)
            }
            KafkaGroupsReq::OffsetDelete { group, partitions } => {
                let mut out = Vec::with_capacity(partitions.len());
                for (t, p) in partitions {
                    let r = check_partition(t, *p);
                    if r == KafkaPartitionResult::Ok
                        && self.st.kafka_groups.committed(group, t, *p).is_some()
                    {
                        self.emit(Effect::KafkaOffsetDelete {
                            group,
                            topic: t,
                            partition: *p,
                        });
                    }
                    out.push(r);
                }
                KafkaGroupsOutcome::OffsetsDeleted(out)
            }
        })
    }

    fn kafka_room_for_group(&self) -> Result<(), QueenError> {
        self.kafka_room_for_groups(1)
    }

    /// Room for `new` more group rows under [`MAX_KAFKA_GROUPS`].
    pub(super) fn kafka_room_for_groups(&self, new: usize) -> Result<(), QueenError> {
        if self.st.kafka_groups.len().saturating_add(new) > MAX_KAFKA_GROUPS {
            return Err(kafka_groups_full(&format!(
                "the tenant holds {MAX_KAFKA_GROUPS} Kafka groups, the cap"
            )));
        }
        Ok(())
    }

    pub(super) fn kafka_room_for_bytes(&self, grow: usize) -> Result<(), QueenError> {
        if self.st.kafka_groups.bytes().saturating_add(grow) > MAX_KAFKA_GROUP_BYTES {
            return Err(kafka_groups_full(&format!(
                "the tenant's Kafka groups hold {MAX_KAFKA_GROUP_BYTES} bytes, the cap"
            )));
        }
        Ok(())
    }

    /// One committed offset's checks, shared by OffsetCommit and TxnOffsetCommit.
    pub(super) fn kafka_offset_check(&self, o: &KafkaOffsetCommit) -> KafkaPartitionResult {
        match check_partition(&o.topic, o.partition) {
            // Kafka refuses a commit to a topic it does not have (librdkafka's 0030
            // checks it); keeping it would also let a client grow group rows at will
            // under names no topic will ever read.
            KafkaPartitionResult::Ok if !self.st.queue_by_name.contains_key(&o.topic) => {
                KafkaPartitionResult::InvalidTopic
            }
            KafkaPartitionResult::Ok if o.metadata.len() > MAX_KAFKA_OFFSET_METADATA_BYTES => {
                KafkaPartitionResult::MetadataTooLarge
            }
            r => r,
        }
    }

    /// Judges every partition first; the whole commit is refused (retriable) before any
    /// effect when the caps cannot take it, so a refusal changes nothing.
    fn kafka_commit(
        &mut self,
        group: &str,
        offsets: &[KafkaOffsetCommit],
    ) -> Result<Vec<KafkaPartitionResult>, QueenError> {
        let results: Vec<KafkaPartitionResult> =
            offsets.iter().map(|o| self.kafka_offset_check(o)).collect();
        let mut grow = 0usize;
        let mut seen = HashSet::new();
        for (o, r) in offsets.iter().zip(&results) {
            if *r == KafkaPartitionResult::Ok && seen.insert((o.topic.as_str(), o.partition)) {
                grow = grow.saturating_add(offset_bytes(&o.topic, &o.metadata));
            }
        }
        if grow > 0 {
            if self.st.kafka_groups.get(group).is_none() {
                self.kafka_room_for_group()?;
                grow = grow.saturating_add(group_bytes(group, "", ""));
            }
            self.kafka_room_for_bytes(grow)?;
        }
        for (o, r) in offsets.iter().zip(&results) {
            if *r == KafkaPartitionResult::Ok {
                self.emit(Effect::KafkaOffsetPut {
                    group,
                    topic: &o.topic,
                    partition: o.partition,
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: &o.metadata,
                });
            }
        }
        Ok(results)
    }
}
