//! Kafka consumer groups (docs/kafka-compat.md "Consumer groups"). Membership — members,
//! heartbeats, join and sync waits — is the coordinator's, in this node's memory, as in
//! Kafka: a heartbeat never becomes a log entry, and after a restart members rejoin. What
//! must survive (committed offsets, each group's last generation) is engine state, written
//! with `Command::KafkaGroups` and answered after it commits.

pub mod admin;
pub mod coordinator;
pub mod durable;
pub mod machine;
pub mod members;
pub mod offsets;
#[cfg(test)]
mod reads_room_tests;

pub use coordinator::{Coordinator, Tenants};

use std::net::SocketAddr;
use std::ops::RangeInclusive;

use kafka_protocol::messages::ApiKey;

use crate::connection::Reply;
use crate::header::RequestHeader;
use crate::wire::Reader;
use crate::Door;

/// The group APIs and the versions served (ApiVersions lists exactly these).
const SERVED: &[(ApiKey, RangeInclusive<i16>)] = &[
    (ApiKey::FindCoordinator, admin::FIND_VERSIONS),
    (ApiKey::JoinGroup, members::JOIN_VERSIONS),
    (ApiKey::SyncGroup, members::SYNC_VERSIONS),
    (ApiKey::Heartbeat, members::HEARTBEAT_VERSIONS),
    (ApiKey::LeaveGroup, members::LEAVE_VERSIONS),
    (ApiKey::OffsetCommit, offsets::COMMIT_VERSIONS),
    (ApiKey::OffsetFetch, offsets::FETCH_VERSIONS),
    (ApiKey::OffsetDelete, offsets::DELETE_VERSIONS),
    (ApiKey::ListGroups, admin::LIST_VERSIONS),
    (ApiKey::DescribeGroups, admin::DESCRIBE_VERSIONS),
    (ApiKey::DeleteGroups, admin::DELETE_VERSIONS),
];

pub fn served() -> impl Iterator<Item = (ApiKey, i16, i16)> {
    SERVED.iter().map(|(k, v)| (*k, *v.start(), *v.end()))
}

pub fn is_group_api(api: ApiKey, version: i16) -> bool {
    SERVED
        .iter()
        .any(|(k, v)| *k == api && v.contains(&version))
}

pub async fn dispatch(
    door: &Door,
    api: ApiKey,
    hdr: &RequestHeader,
    r: Reader,
    peer: SocketAddr,
) -> Reply {
    let v = hdr.api_version;
    match api {
        ApiKey::FindCoordinator => admin::find_coordinator(door, v, r).await,
        ApiKey::JoinGroup => {
            let client = hdr.client_id.as_deref().unwrap_or("");
            let host = format!("/{}", peer.ip());
            members::join(door, v, r, client, &host).await
        }
        ApiKey::SyncGroup => members::sync(door, v, r).await,
        ApiKey::Heartbeat => members::heartbeat(door, v, r).await,
        ApiKey::LeaveGroup => members::leave(door, v, r).await,
        ApiKey::OffsetCommit => offsets::commit(door, v, r).await,
        ApiKey::OffsetFetch => offsets::fetch(door, v, r).await,
        ApiKey::OffsetDelete => offsets::delete(door, v, r).await,
        ApiKey::ListGroups => admin::list(door, v, r).await,
        ApiKey::DescribeGroups => admin::describe(door, v, r).await,
        ApiKey::DeleteGroups => admin::delete_groups(door, v, r).await,
        _ => Reply::Close(format!("{api:?} is not a group api")),
    }
}
