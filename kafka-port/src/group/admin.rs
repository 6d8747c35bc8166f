//! FindCoordinator, ListGroups, DescribeGroups and DeleteGroups. This node coordinates every
//! group; the list joins the live groups of the coordinator with the durable ones.

use std::collections::BTreeMap;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as CoordinatorEntry;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsResponse, DescribeGroupsResponse, FindCoordinatorResponse, GroupId,
    ListGroupsResponse,
};
use queenmq_protocol::kafka_groups::*;

use super::durable;
use super::members::{array, group_names, s};
use crate::connection::{encode, Reply};
use crate::errors as e;
use crate::wire::{Malformed, Reader};
use crate::Door;

pub const FIND_VERSIONS: std::ops::RangeInclusive<i16> = 0..=6;
pub const LIST_VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;
pub const DESCRIBE_VERSIONS: std::ops::RangeInclusive<i16> = 0..=5;
pub const DELETE_VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;

/// FindCoordinator key types: a group id, a transactional id.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

pub async fn find_coordinator(door: &Door, version: i16, mut r: Reader) -> Reply {
    let decoded = (|| -> Result<_, Malformed> {
        if version >= 4 {
            let key_type = r.i8()?;
            let keys = super::members::capped_array(
                &mut r,
                MAX_KAFKA_GROUPS_PER_REQUEST,
                "FindCoordinator names more than 1000 keys",
                |r| r.string(),
            )?
            .unwrap_or_default();
            r.skip_tags()?;
            Ok((key_type, keys))
        } else {
            let key = r.string()?;
            let key_type = if version >= 1 { r.i8()? } else { 0 };
            r.skip_tags()?;
            Ok((key_type, vec![key]))
        }
    })();
    let (key_type, keys) = match decoded {
        Ok(d) => d,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let cfg = &door.cfg;
    // This node coordinates every group and every transactional id of the tenant.
    let code = if key_type == KEY_TYPE_GROUP || key_type == KEY_TYPE_TRANSACTION {
        e::NONE
    } else {
        e::INVALID_REQUEST
    };
    let (node, host, port) = if code == e::NONE {
        (
            cfg.node_id,
            cfg.advertised_host.as_str(),
            i32::from(cfg.advertised_port),
        )
    } else {
        (-1, "", -1)
    };
    let resp = if version >= 4 {
        let entries = keys
            .iter()
            .map(|k| {
                CoordinatorEntry::default()
                    .with_key(s(k))
                    .with_node_id(BrokerId(node))
                    .with_host(s(host))
                    .with_port(port)
                    .with_error_code(code)
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(entries)
    } else {
        let resp = FindCoordinatorResponse::default()
            .with_error_code(code)
            .with_node_id(BrokerId(node))
            .with_host(s(host))
            .with_port(port);
        if version >= 1 && code != e::NONE {
            resp.with_error_message(Some(s("unknown coordinator key type")))
        } else {
            resp
        }
    };
    encode(&resp, version)
}

/// Durable groups by id, or the engine's refusal as a Kafka code.
async fn durable_groups(door: &Door) -> Result<BTreeMap<String, KafkaGroupInfo>, i16> {
    match durable::call(door, KafkaGroupsReq::List).await {
        Ok(KafkaGroupsOutcome::Groups(gs)) => {
            Ok(gs.into_iter().map(|g| (g.group.clone(), g)).collect())
        }
        Ok(_) => Err(e::UNKNOWN_SERVER_ERROR),
        Err(err) => Err(e::group_refusal(&err)),
    }
}

pub async fn list(door: &Door, version: i16, mut r: Reader) -> Reply {
    let decoded = (|| -> Result<_, Malformed> {
        let states = if version >= 4 {
            array(&mut r, |r| r.string())?.unwrap_or_default()
        } else {
            Vec::new()
        };
        if version >= 5 {
            let _types = array(&mut r, |r| r.string())?;
        }
        r.skip_tags()?;
        Ok(states)
    })();
    let states = match decoded {
        Ok(d) => d,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let mut all: BTreeMap<String, (String, &'static str)> = BTreeMap::new();
    match durable_groups(door).await {
        Ok(gs) => {
            for (id, g) in gs {
                all.insert(id, (g.protocol_type, "Empty"));
            }
        }
        // Refused (a user without the group role) or failed: no live group either, or
        // the answer would list what the error code says may not be listed.
        Err(code) => {
            return encode(
                &ListGroupsResponse::default().with_error_code(code),
                version,
            )
        }
    };
    for (id, g) in door.groups.lock().iter() {
        if !g.members.is_empty() || all.contains_key(id) {
            let ptype = g.protocol_type.clone().unwrap_or_default();
            all.insert(id.to_string(), (ptype, g.state.name()));
        }
    }
    let groups = all
        .into_iter()
        .filter(|(_, (_, state))| {
            states.is_empty() || states.iter().any(|s| s.eq_ignore_ascii_case(state))
        })
        .map(|(id, (ptype, state))| {
            let g = ListedGroup::default()
                .with_group_id(GroupId(s(&id)))
                .with_protocol_type(s(&ptype));
            let g = if version >= 4 {
                g.with_group_state(s(state))
            } else {
                g
            };
            if version >= 5 {
                g.with_group_type(s("classic"))
            } else {
                g
            }
        })
        .collect();
    encode(
        &ListGroupsResponse::default()
            .with_error_code(e::NONE)
            .with_groups(groups),
        version,
    )
}

fn decode_describe(version: i16, r: &mut Reader) -> Result<Vec<String>, Malformed> {
    let groups = group_names(r)?;
    if version >= 3 {
        let _ops = r.bool()?;
    }
    r.skip_tags()?;
    Ok(groups)
}

pub async fn describe(door: &Door, version: i16, mut r: Reader) -> Reply {
    let groups = match decode_describe(version, &mut r) {
        Ok(d) => d,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let durable = durable_groups(door).await;
    let out = groups
        .iter()
        .map(|id| {
            let base = DescribedGroup::default().with_group_id(GroupId(s(id)));
            if !valid_group_id(id) {
                return base.with_error_code(e::INVALID_GROUP_ID);
            }
            if let Err(code) = &durable {
                return base.with_error_code(*code);
            }
            let live = door.groups.lock();
            match live.get(id) {
                Some(g) if !g.members.is_empty() => {
                    let pname = g.protocol_name.clone().unwrap_or_default();
                    let stable = g.state == super::machine::GroupState::Stable;
                    let members = g
                        .members
                        .values()
                        .map(|m| {
                            let meta = m
                                .protocols
                                .iter()
                                .find(|(n, _)| *n == pname)
                                .map(|(_, b)| b.clone())
                                .unwrap_or_default();
                            let d = DescribedGroupMember::default()
                                .with_member_id(s(&m.id))
                                .with_client_id(s(&m.client_id))
                                .with_client_host(s(&m.client_host))
                                .with_member_metadata(if stable {
                                    meta
                                } else {
                                    Default::default()
                                })
                                .with_member_assignment(if stable {
                                    m.assignment.clone()
                                } else {
                                    Default::default()
                                });
                            if version >= 4 {
                                d.with_group_instance_id(m.instance_id.as_deref().map(s))
                            } else {
                                d
                            }
                        })
                        .collect();
                    base.with_group_state(s(g.state.name()))
                        .with_protocol_type(s(g.protocol_type.as_deref().unwrap_or("")))
                        .with_protocol_data(s(if stable { &pname } else { "" }))
                        .with_members(members)
                }
                _ => match durable.as_ref().ok().and_then(|d| d.get(id)) {
                    Some(g) => base
                        .with_group_state(s("Empty"))
                        .with_protocol_type(s(&g.protocol_type)),
                    None => base.with_group_state(s("Dead")),
                },
            }
        })
        .collect();
    encode(&DescribeGroupsResponse::default().with_groups(out), version)
}

pub async fn delete_groups(door: &Door, version: i16, mut r: Reader) -> Reply {
    let decoded = (|| -> Result<_, Malformed> {
        let groups = group_names(&mut r)?;
        r.skip_tags()?;
        Ok(groups)
    })();
    let groups = match decoded {
        Ok(d) => d,
        Err(err) => return Reply::Close(err.to_string()),
    };
    let mut codes: Vec<i16> = Vec::with_capacity(groups.len());
    let mut to_delete = Vec::new();
    for g in &groups {
        let code = if !valid_group_id(g) {
            e::INVALID_GROUP_ID
        } else if door.groups.lock().has_members(g) {
            e::NON_EMPTY_GROUP
        } else {
            to_delete.push(g.clone());
            e::NONE
        };
        codes.push(code);
    }
    let mut found = Vec::new();
    for chunk in to_delete.chunks(MAX_KAFKA_GROUPS_PER_REQUEST) {
        match durable::call(
            door,
            KafkaGroupsReq::Delete {
                groups: chunk.to_vec(),
            },
        )
        .await
        {
            Ok(KafkaGroupsOutcome::Deleted(f)) if f.len() == chunk.len() => found.extend(
                f.into_iter()
                    .map(|f| if f { e::NONE } else { e::GROUP_ID_NOT_FOUND }),
            ),
            Ok(_) => found.extend(chunk.iter().map(|_| e::UNKNOWN_SERVER_ERROR)),
            Err(err) => found.extend(chunk.iter().map(|_| e::group_refusal(&err))),
        }
    }
    let mut found = found.into_iter();
    let results = groups
        .iter()
        .zip(codes)
        .map(|(g, code)| {
            let code = if code == e::NONE {
                found.next().unwrap_or(e::UNKNOWN_SERVER_ERROR)
            } else {
                code
            };
            DeletableGroupResult::default()
                .with_group_id(GroupId(s(g)))
                .with_error_code(code)
        })
        .collect();
    encode(
        &DeleteGroupsResponse::default().with_results(results),
        version,
    )
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, BytesMut};

    use super::*;

    fn describe_v0(names: &[&str]) -> Reader {
        let mut b = BytesMut::new();
        b.put_i32(names.len() as i32);
        for n in names {
            b.put_i16(n.len() as i16);
            b.put_slice(n.as_bytes());
        }
        Reader::new(b.freeze(), false)
    }

    #[test]
    fn describe_answers_each_group_once_and_refuses_past_the_group_cap() {
        let named = decode_describe(0, &mut describe_v0(&["a", "b", "a", "a", "c"]));
        assert_eq!(named, Ok(vec!["a".into(), "b".into(), "c".into()]));
        let many = vec!["g"; MAX_KAFKA_GROUPS_PER_REQUEST + 1];
        assert!(decode_describe(0, &mut describe_v0(&many)).is_err());
        let most = vec!["g"; MAX_KAFKA_GROUPS_PER_REQUEST];
        assert_eq!(
            decode_describe(0, &mut describe_v0(&most)).map(|v| v.len()),
            Ok(1)
        );
    }
}
