//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup: decoded with the checked reader, judged by
//! the coordinator's machine, encoded by `kafka-protocol`.

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use queenmq_protocol::kafka_groups::valid_group_id;

use super::machine::{JoinAnswer, JoinArgs, SyncAnswer};
use crate::connection::{encode, Reply};
use crate::errors as e;
use crate::wire::{Malformed, Reader};
use crate::Door;

pub const JOIN_VERSIONS: std::ops::RangeInclusive<i16> = 0..=9;
pub const SYNC_VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;
pub const HEARTBEAT_VERSIONS: std::ops::RangeInclusive<i16> = 0..=4;
pub const LEAVE_VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;

pub fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A copy of bytes the coordinator keeps past the request: a view would pin the whole frame
/// (tagged-field padding included) for as long as the member lives, while its size counts
/// only the view.
fn owned(b: Option<bytes::Bytes>) -> bytes::Bytes {
    b.map(|b| bytes::Bytes::copy_from_slice(&b))
        .unwrap_or_default()
}

/// Reads an array of at most `max` elements with `each`; a longer one is refused from its
/// count, before any element is decoded.
pub fn capped_array<T>(
    r: &mut Reader,
    max: usize,
    too_many: &'static str,
    each: impl FnMut(&mut Reader) -> Result<T, Malformed>,
) -> Result<Option<Vec<T>>, Malformed> {
    capped_array_of(r, max, 1, too_many, each)
}

/// [`capped_array`] of elements at least `min_wire` bytes long each: room is made for no
/// more of them than the bytes left can hold, so a count the request does not carry costs
/// nothing (review s17 lead L3: 100 000 declared ids took 800 KB before the first was read).
pub fn capped_array_of<T>(
    r: &mut Reader,
    max: usize,
    min_wire: usize,
    too_many: &'static str,
    mut each: impl FnMut(&mut Reader) -> Result<T, Malformed>,
) -> Result<Option<Vec<T>>, Malformed> {
    let Some(n) = r.array_len()? else {
        return Ok(None);
    };
    if n > max {
        return Err(Malformed(too_many));
    }
    let mut out = Vec::with_capacity(n.min(r.remaining() / min_wire.max(1)));
    for _ in 0..n {
        out.push(each(r)?);
    }
    Ok(Some(out))
}

/// Keeps the first of each repeated key, in order: a response answers each group once,
/// so naming one large group many times cannot multiply the answer.
pub fn dedup_by_key<T>(items: Vec<T>, key: impl Fn(&T) -> &str) -> Vec<T> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        if seen.insert(key(&item).to_string()) {
            out.push(item);
        }
    }
    out
}

/// Group ids of a DescribeGroups or DeleteGroups request: capped, each answered once.
pub fn group_names(r: &mut Reader) -> Result<Vec<String>, Malformed> {
    let names = capped_array(
        r,
        queenmq_protocol::kafka_groups::MAX_KAFKA_GROUPS_PER_REQUEST,
        "request names more than 1000 groups",
        |r| r.string(),
    )?
    .unwrap_or_default();
    Ok(dedup_by_key(names, |n| n.as_str()))
}

/// Reads an array with `each`, collecting what it returns.
pub fn array<T>(
    r: &mut Reader,
    mut each: impl FnMut(&mut Reader) -> Result<T, Malformed>,
) -> Result<Option<Vec<T>>, Malformed> {
    let Some(n) = r.array_len()? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(each(r)?);
    }
    Ok(Some(out))
}

pub fn decode_join(
    version: i16,
    r: &mut Reader,
    client_id: &str,
    host: &str,
) -> Result<JoinArgs, Malformed> {
    let group = r.string()?;
    let session_ms = r.i32()?;
    let rebalance_ms = if version >= 1 { r.i32()? } else { session_ms };
    let member_id = r.string()?;
    let instance_id = if version >= 5 {
        r.nullable_string()?
    } else {
        None
    };
    let protocol_type = r.string()?;
    let protocols = array(r, |r| {
        let name = r.string()?;
        let meta = owned(r.nullable_bytes()?);
        r.skip_tags()?;
        Ok((name, meta))
    })?
    .unwrap_or_default();
    if version >= 8 {
        let _reason = r.nullable_string()?;
    }
    r.skip_tags()?;
    Ok(JoinArgs {
        group,
        member_id,
        instance_id,
        client_id: client_id.to_string(),
        client_host: host.to_string(),
        session_ms,
        rebalance_ms,
        protocol_type,
        protocols,
        require_known_member: version >= 4,
    })
}

fn join_response(version: i16, a: JoinAnswer) -> JoinGroupResponse {
    let members = a
        .members
        .into_iter()
        .map(|(id, instance, meta)| {
            let m = JoinGroupResponseMember::default()
                .with_member_id(s(&id))
                .with_metadata(meta);
            if version >= 5 {
                m.with_group_instance_id(instance.as_deref().map(s))
            } else {
                m
            }
        })
        .collect();
    let resp = JoinGroupResponse::default()
        .with_error_code(a.error)
        .with_generation_id(a.generation)
        .with_leader(s(&a.leader))
        .with_member_id(s(&a.member_id))
        .with_members(members);
    if version >= 7 {
        resp.with_protocol_type(a.protocol_type.as_deref().map(s))
            .with_protocol_name(a.protocol_name.as_deref().map(s))
    } else {
        // Not nullable before v7.
        resp.with_protocol_name(Some(s(a.protocol_name.as_deref().unwrap_or(""))))
    }
}

/// Whether the connection's user may be a group member. The coordinator acts in its own
/// context, so the member's roles are checked here, for every membership call (join, sync,
/// heartbeat, leave) as its commits are by the bus: a user whose role reaches no group must
/// not evict or stall the members of one.
fn may_join(door: &Door) -> bool {
    door.may(&queenmq_protocol::rows::KAFKA_GROUPS)
}

pub async fn join(door: &Door, version: i16, mut r: Reader, client_id: &str, host: &str) -> Reply {
    let args = match decode_join(version, &mut r, client_id, host) {
        Ok(a) => a,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let answer = if !valid_group_id(&args.group) {
        JoinAnswer::error(e::INVALID_GROUP_ID, &args.member_id)
    } else if !may_join(door) {
        JoinAnswer::error(e::GROUP_AUTHORIZATION_FAILED, &args.member_id)
    } else if door.not_coordinator() {
        JoinAnswer::error(e::NOT_COORDINATOR, &args.member_id)
    } else {
        door.groups.join(door, args).await
    };
    encode(&join_response(version, answer), version)
}

pub async fn sync(door: &Door, version: i16, mut r: Reader) -> Reply {
    let decoded = (|| -> Result<_, Malformed> {
        let group = r.string()?;
        let generation = r.i32()?;
        let member = r.string()?;
        let instance = if version >= 3 {
            r.nullable_string()?
        } else {
            None
        };
        if version >= 5 {
            let _ptype = r.nullable_string()?;
            let _pname = r.nullable_string()?;
        }
        let assignments = array(&mut r, |r| {
            let id = r.string()?;
            let a = owned(r.nullable_bytes()?);
            r.skip_tags()?;
            Ok((id, a))
        })?
        .unwrap_or_default();
        r.skip_tags()?;
        Ok((group, generation, member, instance, assignments))
    })();
    let (group, generation, member, instance, assignments) = match decoded {
        Ok(d) => d,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let answer = if !valid_group_id(&group) {
        SyncAnswer::error(e::INVALID_GROUP_ID)
    } else if !may_join(door) {
        SyncAnswer::error(e::GROUP_AUTHORIZATION_FAILED)
    } else if door.not_coordinator() {
        // As a heartbeat: the group's generation lives on the leader (review s22 kmeta M4).
        SyncAnswer::error(e::NOT_COORDINATOR)
    } else {
        let too_big = assignments.iter().map(|(_, b)| b.len()).sum::<usize>()
            > super::machine::MAX_MEMBER_BYTES * 8;
        if too_big {
            SyncAnswer::error(e::INCONSISTENT_GROUP_PROTOCOL)
        } else {
            let step = door.groups.lock().sync(
                &group,
                generation,
                &member,
                instance.as_deref(),
                assignments,
                door.groups.now(),
            );
            door.groups.sync(step).await
        }
    };
    let mut resp = SyncGroupResponse::default()
        .with_error_code(answer.error)
        .with_assignment(answer.assignment);
    if version >= 5 {
        resp = resp
            .with_protocol_type(answer.protocol_type.as_deref().map(s))
            .with_protocol_name(answer.protocol_name.as_deref().map(s));
    }
    encode(&resp, version)
}

pub async fn heartbeat(door: &Door, version: i16, mut r: Reader) -> Reply {
    let decoded = (|| -> Result<_, Malformed> {
        let group = r.string()?;
        let generation = r.i32()?;
        let member = r.string()?;
        let instance = if version >= 3 {
            r.nullable_string()?
        } else {
            None
        };
        r.skip_tags()?;
        Ok((group, generation, member, instance))
    })();
    let (group, generation, member, instance) = match decoded {
        Ok(d) => d,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let code = if !valid_group_id(&group) {
        e::INVALID_GROUP_ID
    } else if !may_join(door) {
        e::GROUP_AUTHORIZATION_FAILED
    } else if door.not_coordinator() {
        // A node that lost the lead keeps its members in memory: their next heartbeat sends
        // them to the new leader, where the group's generation lives.
        e::NOT_COORDINATOR
    } else {
        door.groups.lock().heartbeat(
            &group,
            generation,
            &member,
            instance.as_deref(),
            door.groups.now(),
        )
    };
    encode(&HeartbeatResponse::default().with_error_code(code), version)
}

pub async fn leave(door: &Door, version: i16, mut r: Reader) -> Reply {
    let decoded = (|| -> Result<_, Malformed> {
        let group = r.string()?;
        let members = if version >= 3 {
            array(&mut r, |r| {
                let id = r.string()?;
                let instance = r.nullable_string()?;
                if version >= 5 {
                    let _reason = r.nullable_string()?;
                }
                r.skip_tags()?;
                Ok((id, instance))
            })?
            .unwrap_or_default()
        } else {
            vec![(r.string()?, None)]
        };
        r.skip_tags()?;
        Ok((group, members))
    })();
    let (group, members) = match decoded {
        Ok(d) => d,
        Err(err) => return Reply::Close(err.to_string()),
    };
    if !valid_group_id(&group) {
        return encode(
            &LeaveGroupResponse::default().with_error_code(e::INVALID_GROUP_ID),
            version,
        );
    }
    if !may_join(door) {
        // Kafka's answer: the top-level error, no member list.
        return encode(
            &LeaveGroupResponse::default().with_error_code(e::GROUP_AUTHORIZATION_FAILED),
            version,
        );
    }
    if door.not_coordinator() {
        // Kafka's answer: the top-level error; the member leaves at the coordinator (review
        // s22 kmeta M4).
        return encode(
            &LeaveGroupResponse::default().with_error_code(e::NOT_COORDINATOR),
            version,
        );
    }
    let now = door.groups.now();
    let codes: Vec<i16> = {
        let mut g = door.groups.lock();
        members
            .iter()
            .map(|(id, instance)| g.leave(&group, id, instance.as_deref(), now))
            .collect()
    };
    door.groups.drive(door).await;
    let resp = if version >= 3 {
        let out = members
            .into_iter()
            .zip(&codes)
            .map(|((id, instance), code)| {
                MemberResponse::default()
                    .with_member_id(s(&id))
                    .with_group_instance_id(instance.as_deref().map(s))
                    .with_error_code(*code)
            })
            .collect();
        LeaveGroupResponse::default().with_members(out)
    } else {
        LeaveGroupResponse::default().with_error_code(codes.first().copied().unwrap_or(e::NONE))
    };
    encode(&resp, version)
}

/// Test helper: the JoinGroup answer for `a` encodes at every served version.
#[cfg(test)]
pub fn join_encodes(a: JoinAnswer) -> bool {
    let mut versions = JOIN_VERSIONS;
    versions.all(|v| matches!(encode(&join_response(v, a.clone()), v), Reply::Send { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn join_answers_encode_at_every_version() {
        let a = JoinAnswer {
            error: 0,
            generation: 3,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            leader: "m1".into(),
            member_id: "m1".into(),
            members: vec![("m1".into(), Some("i".into()), Bytes::from_static(b"x"))],
        };
        assert!(join_encodes(a));
        assert!(join_encodes(JoinAnswer::error(e::UNKNOWN_MEMBER_ID, "")));
    }

    #[test]
    fn a_v0_join_decodes_and_a_truncated_one_does_not() {
        let mut body = Vec::new();
        body.extend_from_slice(b"\x00\x01g");
        body.extend_from_slice(b"\x00\x00\x27\x10"); // 10 000 ms
        body.extend_from_slice(b"\x00\x00");
        body.extend_from_slice(b"\x00\x08consumer");
        body.extend_from_slice(b"\x00\x00\x00\x01");
        body.extend_from_slice(b"\x00\x05range");
        body.extend_from_slice(b"\x00\x00\x00\x02");
        body.extend_from_slice(b"ab");
        let mut r = Reader::new(Bytes::from(body.clone()), false);
        let a = decode_join(0, &mut r, "c", "h").expect("decodes");
        assert_eq!((a.group.as_str(), a.rebalance_ms), ("g", 10_000));
        assert_eq!(
            a.protocols,
            vec![("range".into(), Bytes::from_static(b"ab"))]
        );
        let mut short = Reader::new(Bytes::from(body[..body.len() - 1].to_vec()), false);
        assert!(decode_join(0, &mut short, "c", "h").is_err());
    }

    #[test]
    fn kept_metadata_is_a_copy_not_a_view_of_the_frame() {
        let mut body = Vec::new();
        body.extend_from_slice(b"\x00\x01g");
        body.extend_from_slice(b"\x00\x00\x27\x10");
        body.extend_from_slice(b"\x00\x00");
        body.extend_from_slice(b"\x00\x08consumer");
        body.extend_from_slice(b"\x00\x00\x00\x01");
        body.extend_from_slice(b"\x00\x05range");
        body.extend_from_slice(b"\x00\x00\x00\x02");
        body.extend_from_slice(b"ab");
        body.extend_from_slice(&[0u8; 4096]);
        let frame = Bytes::from(body);
        let range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        let a = decode_join(0, &mut Reader::new(frame.clone(), false), "c", "h").expect("decodes");
        let meta = &a.protocols[0].1;
        assert_eq!(meta.as_ref(), b"ab");
        assert!(!range.contains(&(meta.as_ptr() as usize)));
    }
}
