//! OffsetCommit, OffsetFetch and OffsetDelete. The coordinator judges the member and
//! generation; the engine stores the offsets and answers once the entry is committed.

use std::collections::{HashMap, HashSet};

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    GroupId, OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::kafka_groups::*;

use super::durable;
use super::members::{array, capped_array, dedup_by_key, s};
use crate::answer_room::{Gathered, Held};
use crate::connection::{encode, Reply};
use crate::errors as e;
use crate::wire::{Malformed, Reader};
use crate::Door;

pub const COMMIT_VERSIONS: std::ops::RangeInclusive<i16> = 2..=9;
pub const FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 1..=9;
pub const DELETE_VERSIONS: std::ops::RangeInclusive<i16> = 0..=0;

pub type Topics<T> = Vec<(String, Vec<T>)>;

/// A topic name as a request carries it, refused past Kafka's own limit: every partition of
/// the request later carries a copy, so an unbounded name multiplies the request's size.
fn topic_name(r: &mut Reader) -> Result<String, Malformed> {
    let name = r.string()?;
    if name.len() > MAX_KAFKA_TOPIC_BYTES {
        return Err(Malformed("topic name longer than 249 bytes"));
    }
    Ok(name)
}

/// Counts the partitions a request names while it is decoded; past the cap the request is
/// refused whole (not split), so a commit stays one atomic engine entry.
struct PartitionBudget(usize);

impl PartitionBudget {
    fn new() -> Self {
        PartitionBudget(MAX_KAFKA_OFFSETS_PER_REQUEST)
    }

    fn take(&mut self, n: usize) -> Result<(), Malformed> {
        self.0 = self
            .0
            .checked_sub(n)
            .ok_or(Malformed("request names more than 10000 partitions"))?;
        Ok(())
    }
}

struct CommitReq {
    group: String,
    generation: i32,
    member: String,
    instance: Option<String>,
    topics: Topics<(i32, i64, i32, String)>,
}

fn decode_commit(version: i16, r: &mut Reader) -> Result<CommitReq, Malformed> {
    let group = r.string()?;
    let generation = r.i32()?;
    let member = r.string()?;
    let instance = if version >= 7 {
        r.nullable_string()?
    } else {
        None
    };
    if (2..=4).contains(&version) {
        let _retention_ms = r.i64()?;
    }
    let mut budget = PartitionBudget::new();
    let topics = array(r, |r| {
        let name = topic_name(r)?;
        let parts = array(r, |r| {
            budget.take(1)?;
            let index = r.i32()?;
            let offset = r.i64()?;
            let epoch = if version >= 6 { r.i32()? } else { -1 };
            let metadata = r.nullable_string()?.unwrap_or_default();
            r.skip_tags()?;
            Ok((index, offset, epoch, metadata))
        })?
        .unwrap_or_default();
        r.skip_tags()?;
        Ok((name, parts))
    })?
    .unwrap_or_default();
    r.skip_tags()?;
    Ok(CommitReq {
        group,
        generation,
        member,
        instance,
        topics,
    })
}

/// A commit's offsets as the engine takes them, in request order (OffsetCommit and
/// TxnOffsetCommit alike): (partition, offset, leader epoch, metadata) per topic.
pub fn flatten(topics: &Topics<(i32, i64, i32, String)>) -> Vec<KafkaOffsetCommit> {
    topics
        .iter()
        .flat_map(|(t, parts)| {
            parts.iter().map(|(p, o, epoch, m)| KafkaOffsetCommit {
                topic: t.clone(),
                partition: *p,
                offset: *o,
                leader_epoch: *epoch,
                metadata: m.clone(),
            })
        })
        .collect()
}

fn partition_code(r: KafkaPartitionResult) -> i16 {
    match r {
        KafkaPartitionResult::Ok => e::NONE,
        KafkaPartitionResult::MetadataTooLarge => e::OFFSET_METADATA_TOO_LARGE,
        KafkaPartitionResult::InvalidTopic => e::UNKNOWN_TOPIC_OR_PARTITION,
    }
}

pub async fn commit(door: &Door, version: i16, mut r: Reader) -> Reply {
    let req = match decode_commit(version, &mut r) {
        Ok(req) => req,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let flat = flatten(&req.topics);
    let gate = if !valid_group_id(&req.group) {
        Err(e::INVALID_GROUP_ID)
    } else if door.not_coordinator() {
        // A follower's in-memory generations are not the group's: it would answer
        // ILLEGAL_GENERATION, which the Java client's commitSync throws instead of finding the
        // coordinator again (review s22 kmeta M4).
        Err(e::NOT_COORDINATOR)
    } else {
        door.groups.lock().may_commit(
            &req.group,
            req.generation,
            &req.member,
            req.instance.as_deref(),
            door.groups.now(),
        )
    };
    let mut codes: Vec<i16> = Vec::with_capacity(flat.len());
    match gate {
        Err(code) => codes.resize(flat.len(), code),
        Ok(()) => {
            // One engine call per bounded chunk; each is answered after it commits.
            for chunk in flat.chunks(MAX_KAFKA_OFFSETS_PER_REQUEST) {
                let call = KafkaGroupsReq::Commit {
                    group: req.group.clone(),
                    offsets: chunk.to_vec(),
                };
                match durable::call(door, call).await {
                    Ok(KafkaGroupsOutcome::Committed(rs)) if rs.len() == chunk.len() => {
                        codes.extend(rs.into_iter().map(partition_code))
                    }
                    Ok(_) => codes.extend(chunk.iter().map(|_| e::UNKNOWN_SERVER_ERROR)),
                    Err(err) => codes.extend(chunk.iter().map(|_| commit_error(&err))),
                }
            }
        }
    }
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .iter()
        .map(|(t, parts)| {
            OffsetCommitResponseTopic::default()
                .with_name(TopicName(s(t)))
                .with_partitions(
                    parts
                        .iter()
                        .map(|(p, ..)| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(*p)
                                .with_error_code(codes.next().unwrap_or(e::UNKNOWN_SERVER_ERROR))
                        })
                        .collect(),
                )
        })
        .collect();
    encode(
        &OffsetCommitResponse::default().with_topics(topics),
        version,
    )
}

/// A refused commit: busy or full is COORDINATOR_NOT_AVAILABLE, which clients retry.
fn commit_error(err: &queenmq_protocol::QueenError) -> i16 {
    use queenmq_protocol::ErrorCode;
    match err.code {
        ErrorCode::Unavailable | ErrorCode::RequestTimeout => e::COORDINATOR_NOT_AVAILABLE,
        ErrorCode::Unauthorized | ErrorCode::Forbidden => e::GROUP_AUTHORIZATION_FAILED,
        ErrorCode::NotLeader => e::NOT_COORDINATOR,
        _ => e::from_queen(err),
    }
}

/// One group of an OffsetFetch: its id and the partitions asked (`None`: all).
pub(super) type FetchGroup = (String, Option<Topics<i32>>);

#[cfg(test)]
pub(super) fn decode_fetch(version: i16, r: &mut Reader) -> Result<Vec<FetchGroup>, Malformed> {
    decode_fetch_stable(version, r).map(|(groups, _)| groups)
}

/// The groups asked and whether the client requires stable offsets (v7+, KIP-447).
fn decode_fetch_stable(version: i16, r: &mut Reader) -> Result<(Vec<FetchGroup>, bool), Malformed> {
    let mut budget = PartitionBudget::new();
    let mut topics = |r: &mut Reader| {
        array(r, |r| {
            let name = topic_name(r)?;
            let parts = array(r, |r| {
                budget.take(1)?;
                r.i32()
            })?
            .unwrap_or_default();
            r.skip_tags()?;
            Ok((name, parts))
        })
    };
    let groups = if version >= 8 {
        capped_array(
            r,
            MAX_KAFKA_GROUPS_PER_REQUEST,
            "OffsetFetch names more than 1000 groups",
            |r| {
                let id = r.string()?;
                if version >= 9 {
                    let _member = r.nullable_string()?;
                    let _epoch = r.i32()?;
                }
                let t = topics(r)?;
                r.skip_tags()?;
                Ok((id, t))
            },
        )?
        .unwrap_or_default()
    } else {
        let id = r.string()?;
        vec![(id, topics(r)?)]
    };
    let require_stable = version >= 7 && r.bool()?;
    r.skip_tags()?;
    // A group named twice is answered once (its first listing): every answer may carry the
    // group's whole table, so repeats would multiply the response. Likewise a partition named
    // twice (review s20 M2): each mention would be read and copied again.
    let groups = dedup_by_key(groups, |(id, _)| id.as_str())
        .into_iter()
        .map(|(id, topics)| (id, topics.map(dedup_partitions)))
        .collect();
    Ok((groups, require_stable))
}

/// Each (topic, partition) once, where it was first named, as Kafka answers (its coordinator
/// keys the partitions it reads); a topic all of whose partitions were named before is
/// dropped, one named with no partitions is kept.
fn dedup_partitions(topics: Topics<i32>) -> Topics<i32> {
    let mut seen = std::collections::HashSet::new();
    topics
        .into_iter()
        .filter_map(|(name, parts)| {
            let asked = parts.len();
            let kept: Vec<i32> = parts
                .into_iter()
                .filter(|p| seen.insert((name.clone(), *p)))
                .collect();
            (asked == 0 || !kept.is_empty()).then_some((name, kept))
        })
        .collect()
}

/// Per partition, in order: whether an open transaction holds a pending offset of the
/// group there; `Err` with a group-level code when the read is refused.
async fn pending(door: &Door, group: &str, asked: Vec<(String, i32)>) -> Result<Vec<bool>, i16> {
    use queenmq_protocol::kafka_txn_reads::{KafkaTxnRead, KafkaTxnReadAnswer};
    use queenmq_protocol::{Command, Outcome, ReadAnswer, ReadReq};
    let mut out = Vec::with_capacity(asked.len());
    for chunk in asked.chunks(queenmq_protocol::kafka_txn_reads::MAX_PRODUCER_PARTITIONS) {
        let q = KafkaTxnRead::PendingOffsets {
            group: group.to_string(),
            partitions: chunk.to_vec(),
        };
        match door
            .bus
            .call(door.ctx.clone(), Command::Read(ReadReq::KafkaTxns(q)))
            .await
        {
            Ok(Outcome::Read(ReadAnswer::KafkaTxns(KafkaTxnReadAnswer::Pending(v))))
                if v.len() == chunk.len() =>
            {
                out.extend(v)
            }
            Ok(_) => return Err(e::UNKNOWN_SERVER_ERROR),
            Err(err) => return Err(commit_error(&err)),
        }
    }
    Ok(out)
}

/// Marks each partition whose offset is pending in an open transaction UNSTABLE_OFFSET_COMMIT
/// (retriable; its offset is not shown), as Kafka answers a `require_stable` fetch.
fn mark_unstable(topics: &mut Topics<Fetched>, unstable: &[bool]) {
    let mut flags = unstable.iter();
    for (_, parts) in topics.iter_mut() {
        for (_, c, code) in parts.iter_mut() {
            if flags.next().copied().unwrap_or(false) {
                *c = None;
                *code = e::UNSTABLE_OFFSET_COMMIT;
            }
        }
    }
}

fn asked_pairs(topics: &Topics<Fetched>) -> Vec<(String, i32)> {
    topics
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |(p, _, _)| (t.clone(), *p)))
        .collect()
}

/// A partition's answer: its index, its committed offset, its error code.
pub(super) type Fetched = (i32, Option<KafkaCommitted>, i16);

/// The group's pending partitions, read before its offsets (every partition asked); the
/// set is complete unless more than `MAX_ENTRIES_PER_ANSWER` are pending. The set is held
/// across the offsets' read, so its room is reserved first (review s18 kafka H1: up to
/// 100 000 names of up to 249 bytes); without room it is dropped at once and the group
/// answered COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
async fn group_pending(door: &Door, group: &str) -> Result<(PendingSet, bool, Held), i16> {
    use queenmq_protocol::kafka_txn_reads::{KafkaTxnRead, KafkaTxnReadAnswer};
    use queenmq_protocol::{Command, Outcome, ReadAnswer, ReadReq};
    let q = KafkaTxnRead::GroupPending {
        group: group.to_string(),
    };
    match door
        .bus
        .call(door.ctx.clone(), Command::Read(ReadReq::KafkaTxns(q)))
        .await
    {
        Ok(Outcome::Read(ReadAnswer::KafkaTxns(KafkaTxnReadAnswer::GroupPending {
            pairs,
            complete,
        }))) => match door.answers.take(pending_held(&pairs)) {
            Some(room) => Ok((pairs.into_iter().collect(), complete, room)),
            None => Err(e::COORDINATOR_LOAD_IN_PROGRESS),
        },
        // Past the engine cycle's grant the set is refused whole, never cut (review s19
        // kafka H1); clients retry this code.
        Ok(Outcome::Read(ReadAnswer::KafkaTxns(KafkaTxnReadAnswer::GroupPendingOverBudget))) => {
            Err(e::COORDINATOR_LOAD_IN_PROGRESS)
        }
        Ok(_) => Err(e::UNKNOWN_SERVER_ERROR),
        Err(err) => Err(commit_error(&err)),
    }
}

type PendingSet = HashSet<(String, i32)>;

/// What a group's pending set holds from the engine's answer to the end of the fetch: the
/// answer's pairs, then the set's (a pair, a name and the table's slot each).
pub fn pending_held(pairs: &[(String, i32)]) -> usize {
    const PER_PAIR: usize = 2 * std::mem::size_of::<(String, i32)>() + 16;
    pairs
        .iter()
        .map(|(t, _)| PER_PAIR.saturating_add(t.len()))
        .fold(0, usize::saturating_add)
}

/// What was pending before the offsets were read: per asked partition, or the group's
/// pending partitions (whether that is all of them, and their reserved room).
enum Before {
    Asked(Vec<bool>),
    Group(PendingSet, bool, Held),
}

/// [`fetch_group`], then, when the client requires stable offsets, each partition with an
/// offset pending in an open transaction answered UNSTABLE_OFFSET_COMMIT. The pending
/// offsets are checked before the committed ones are read, so a transaction that commits
/// in between shows its committed offset, never the one before it marked stable (review
/// s16 kafka L1). With every partition asked, the group's pending partitions are read
/// first; only past `MAX_ENTRIES_PER_ANSWER` of them are the rest checked after the read.
async fn fetch_group_stable(
    door: &Door,
    group: &str,
    asked: &Option<Topics<i32>>,
    require_stable: bool,
) -> (i16, Topics<Fetched>) {
    if !require_stable || !valid_group_id(group) {
        return fetch_group(door, group, asked).await;
    }
    let before = match asked {
        Some(ts) => {
            let pairs: Vec<(String, i32)> = ts
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
                .collect();
            match pending(door, group, pairs).await {
                Ok(v) => Before::Asked(v),
                Err(code) => return (code, Vec::new()),
            }
        }
        None => match group_pending(door, group).await {
            Ok((held, complete, room)) => Before::Group(held, complete, room),
            Err(code) => return (code, Vec::new()),
        },
    };
    let (code, mut topics) = fetch_group(door, group, asked).await;
    if code != e::NONE {
        return (code, topics);
    }
    let unstable = match before {
        Before::Asked(v) => v,
        Before::Group(held, true, _room) => asked_pairs(&topics)
            .into_iter()
            .map(|pair| held.contains(&pair))
            .collect(),
        Before::Group(held, false, _room) => match pending(door, group, asked_pairs(&topics)).await
        {
            Ok(after) => asked_pairs(&topics)
                .into_iter()
                .zip(after)
                .map(|(pair, late)| late || held.contains(&pair))
                .collect(),
            Err(code) => return (code, Vec::new()),
        },
    };
    mark_unstable(&mut topics, &unstable);
    (code, topics)
}

/// Every committed offset asked for, grouped by topic in the request's order (or in the
/// engine's order when every partition was asked), plus a group-level error.
async fn fetch_group(
    door: &Door,
    group: &str,
    asked: &Option<Topics<i32>>,
) -> (i16, Topics<Fetched>) {
    if !valid_group_id(group) {
        return (e::INVALID_GROUP_ID, Vec::new());
    }
    let partitions: Option<Vec<(String, i32)>> = asked.as_ref().map(|ts| {
        ts.iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
            .collect()
    });
    let mut found: Vec<KafkaCommitted> = Vec::new();
    let chunks: Vec<Option<Vec<(String, i32)>>> = match &partitions {
        None => vec![None],
        Some(ps) => ps
            .chunks(MAX_KAFKA_OFFSETS_PER_REQUEST)
            .map(|c| Some(c.to_vec()))
            .collect(),
    };
    for chunk in chunks {
        let call = KafkaGroupsReq::Fetch {
            group: group.to_string(),
            partitions: chunk,
        };
        match durable::call(door, call).await {
            Ok(KafkaGroupsOutcome::Fetched(rows)) => found.extend(rows),
            // Past the engine cycle's grant the offsets are refused whole, never cut (review
            // s19 kafka H2); Java's consumer and admin client and librdkafka retry this code for
            // OffsetFetch.
            Ok(KafkaGroupsOutcome::OverBudget) => {
                return (e::COORDINATOR_LOAD_IN_PROGRESS, Vec::new())
            }
            Ok(_) => return (e::UNKNOWN_SERVER_ERROR, Vec::new()),
            Err(err) => return (commit_error(&err), Vec::new()),
        }
    }
    let out = match asked {
        Some(ts) => {
            let mut by: HashMap<(String, i32), KafkaCommitted> = found
                .into_iter()
                .map(|c| ((c.topic.clone(), c.partition), c))
                .collect();
            ts.iter()
                .map(|(t, ps)| {
                    let parts = ps
                        .iter()
                        .map(|p| (*p, by.remove(&(t.clone(), *p)), e::NONE))
                        .collect();
                    (t.clone(), parts)
                })
                .collect()
        }
        None => {
            let mut out: Topics<Fetched> = Vec::new();
            for c in found {
                match out.last_mut() {
                    Some((t, parts)) if *t == c.topic => {
                        parts.push((c.partition, Some(c), e::NONE))
                    }
                    _ => out.push((c.topic.clone(), vec![(c.partition, Some(c), e::NONE)])),
                }
            }
            out
        }
    };
    (e::NONE, out)
}

fn offset_and_meta(c: Option<KafkaCommitted>) -> (i64, i32, String) {
    match c {
        Some(c) => (c.offset, c.leader_epoch, c.metadata),
        None => (-1, -1, String::new()),
    }
}

/// What one group's answer holds from the engine's rows to the written frame: each row's
/// topic and, moved from row to message, its metadata once there and once in the frame,
/// beside the fixed parts (review s19 kafka H2).
fn fetched_held(topics: &Topics<Fetched>) -> usize {
    const PER_ROW: usize = std::mem::size_of::<Fetched>()
        + std::mem::size_of::<KafkaCommitted>()
        + std::mem::size_of::<OffsetFetchResponsePartitions>()
        + 32;
    topics
        .iter()
        .flat_map(|(t, parts)| {
            parts.iter().map(move |(_, c, _)| {
                let meta = c.as_ref().map_or(0, |c| c.metadata.len());
                PER_ROW
                    .saturating_add(t.len())
                    .saturating_add(meta.saturating_mul(2))
            })
        })
        .fold(0, usize::saturating_add)
}

/// Each group's answer, or, where the door has no room left to hold it, the group refused
/// COORDINATOR_LOAD_IN_PROGRESS (retriable, as past the engine's grant): its rows go at
/// once, and the room of the groups kept is held until the frame is written.
pub(super) async fn fetch_groups(
    door: &Door,
    groups: &[FetchGroup],
    require_stable: bool,
) -> (Vec<(String, (i16, Topics<Fetched>))>, Held) {
    let mut room = Gathered::new();
    let mut answers = Vec::with_capacity(groups.len());
    for (group, asked) in groups {
        let (code, topics) = fetch_group_stable(door, group, asked, require_stable).await;
        let answer = if room.take(&door.answers, fetched_held(&topics)) {
            (code, topics)
        } else {
            (e::COORDINATOR_LOAD_IN_PROGRESS, Vec::new())
        };
        answers.push((group.clone(), answer));
    }
    (answers, room.held())
}

pub async fn fetch(door: &Door, version: i16, mut r: Reader) -> Reply {
    let (groups, require_stable) = match decode_fetch_stable(version, &mut r) {
        Ok(g) => g,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let (answers, room) = fetch_groups(door, &groups, require_stable).await;
    let resp = if version >= 8 {
        let out = answers
            .into_iter()
            .map(|(group, (code, topics))| {
                let topics = topics
                    .into_iter()
                    .map(|(t, parts)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(s(&t)))
                            .with_partitions(
                                parts
                                    .into_iter()
                                    .map(|(p, c, code)| {
                                        let (o, epoch, m) = offset_and_meta(c);
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_error_code(code)
                                            .with_committed_offset(o)
                                            .with_committed_leader_epoch(epoch)
                                            .with_metadata(Some(StrBytes::from_string(m)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(GroupId(s(&group)))
                    .with_topics(topics)
                    .with_error_code(code)
            })
            .collect();
        OffsetFetchResponse::default().with_groups(out)
    } else {
        let (code, topics) = answers
            .into_iter()
            .next()
            .map(|(_, a)| a)
            .unwrap_or((e::NONE, Vec::new()));
        // v0-1 have no group-level error: each asked partition carries it, as Kafka answers
        // them; an empty list would read as "nothing committed" and reset the consumer
        // (review s20 kafka H1).
        let topics = match (version < 2 && code != e::NONE, groups.first()) {
            (true, Some((_, Some(asked)))) => asked
                .iter()
                .map(|(t, ps)| (t.clone(), ps.iter().map(|p| (*p, None, code)).collect()))
                .collect(),
            _ => topics,
        };
        let topics = topics
            .into_iter()
            .map(|(t, parts)| {
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(s(&t)))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(p, c, code)| {
                                let (o, epoch, m) = offset_and_meta(c);
                                let part = OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_error_code(code)
                                    .with_committed_offset(o)
                                    .with_metadata(Some(StrBytes::from_string(m)));
                                // The field exists from v5 on.
                                if version >= 5 {
                                    part.with_committed_leader_epoch(epoch)
                                } else {
                                    part
                                }
                            })
                            .collect(),
                    )
            })
            .collect();
        let resp = OffsetFetchResponse::default().with_topics(topics);
        if version >= 2 {
            resp.with_error_code(code)
        } else {
            resp
        }
    };
    encode(&resp, version).holding(room)
}

fn decode_delete(r: &mut Reader) -> Result<(String, Topics<i32>), Malformed> {
    let group = r.string()?;
    let mut budget = PartitionBudget::new();
    let topics = array(r, |r| {
        let name = topic_name(r)?;
        let parts = array(r, |r| {
            budget.take(1)?;
            r.i32()
        })?
        .unwrap_or_default();
        Ok((name, parts))
    })?
    .unwrap_or_default();
    Ok((group, topics))
}

pub async fn delete(door: &Door, version: i16, mut r: Reader) -> Reply {
    let (group, topics) = match decode_delete(&mut r) {
        Ok(d) => d,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let flat: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
        .collect();
    let mut top = e::NONE;
    let mut codes = Vec::with_capacity(flat.len());
    if !valid_group_id(&group) {
        top = e::INVALID_GROUP_ID;
    } else {
        for chunk in flat.chunks(MAX_KAFKA_OFFSETS_PER_REQUEST) {
            let known = durable::call(
                door,
                KafkaGroupsReq::Describe {
                    group: group.clone(),
                },
            )
            .await;
            if matches!(known, Ok(KafkaGroupsOutcome::Group(None))) {
                top = e::GROUP_ID_NOT_FOUND;
                break;
            }
            let call = KafkaGroupsReq::OffsetDelete {
                group: group.clone(),
                partitions: chunk.to_vec(),
            };
            match durable::call(door, call).await {
                Ok(KafkaGroupsOutcome::OffsetsDeleted(rs)) => {
                    codes.extend(rs.into_iter().map(partition_code))
                }
                Ok(_) => top = e::UNKNOWN_SERVER_ERROR,
                Err(err) => top = commit_error(&err),
            }
        }
    }
    let mut codes = codes.into_iter();
    let out = topics
        .iter()
        .map(|(t, ps)| {
            OffsetDeleteResponseTopic::default()
                .with_name(TopicName(s(t)))
                .with_partitions(
                    ps.iter()
                        .map(|p| {
                            OffsetDeleteResponsePartition::default()
                                .with_partition_index(*p)
                                .with_error_code(codes.next().unwrap_or(e::NONE))
                        })
                        .collect(),
                )
        })
        .collect();
    encode(
        &OffsetDeleteResponse::default()
            .with_error_code(top)
            .with_topics(out),
        version,
    )
}

#[cfg(test)]
#[path = "offsets_stable_tests.rs"]
mod stable_tests;
#[cfg(test)]
#[path = "offsets_tests.rs"]
mod tests;
