//! One Kafka connection: read a frame, answer it, repeat. Any framing or header error, and
//! any request this door cannot answer in its own layout, closes the connection with a log
//! line — what a Kafka broker does too — and never touches another connection.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use tokio::io::BufWriter;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::header::{self, RequestHeader};
use crate::wire::Reader;
use crate::{
    admin, api_versions, fetch, frame, group, init_producer_id, list_offsets, metadata, produce,
    Door,
};

/// What a handler decided for one request.
pub enum Reply {
    /// Send this response body (the header is added here).
    Send { version: i16, body: BytesMut },
    /// Send nothing (Produce with acks=0).
    Nothing,
    /// Close the connection, with the reason logged.
    Close(String),
}

pub async fn serve(
    door: Arc<Door>,
    stream: TcpStream,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    metrics::gauge!("queen_kafka_connections").increment(1.0);
    let (mut rd, wr) = stream.into_split();
    let mut wr = BufWriter::new(wr);
    let max = door.cfg.max_request_bytes;
    let (idle, io) = (door.cfg.idle_timeout, door.cfg.io_timeout);
    loop {
        let next = tokio::select! {
            f = tokio::time::timeout(idle, frame::read_len(&mut rd, max)) => f,
            _ = shutdown.changed() => break,
        };
        let len = match next {
            Ok(Ok(Some(n))) => n,
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                tracing::info!(%peer, error = %e, "kafka connection closed: bad frame");
                metrics::counter!("queen_kafka_bad_frames_total").increment(1);
                break;
            }
            Err(_) => {
                tracing::debug!(%peer, "kafka connection closed: idle");
                break;
            }
        };
        // Room for the request before its bytes are read: the node's request bytes stay
        // bounded however many connections announce big frames. Held until it is answered.
        let want = u32::try_from(crate::kib(len)).unwrap_or(u32::MAX);
        let room = door.inflight.clone().acquire_many_owned(want);
        let _room = match tokio::time::timeout(io, room).await {
            Ok(Ok(permit)) => permit,
            _ => {
                tracing::info!(%peer, len, "kafka connection closed: no room for its request in time");
                break;
            }
        };
        let body = match tokio::time::timeout(io, frame::read_body(&mut rd, len)).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                tracing::info!(%peer, error = %e, "kafka connection closed: bad frame");
                metrics::counter!("queen_kafka_bad_frames_total").increment(1);
                break;
            }
            Err(_) => {
                tracing::info!(%peer, len, "kafka connection closed: request body too slow");
                break;
            }
        };
        let (hdr, reply) = match header::decode(body) {
            Ok((hdr, reader)) => {
                let reply = dispatch(&door, &hdr, reader, peer).await;
                (hdr, reply)
            }
            Err(e) => {
                tracing::info!(%peer, error = %e, "kafka connection closed: bad request header");
                break;
            }
        };
        match reply {
            Reply::Nothing => {}
            Reply::Send { version, body } => {
                let out = match with_header(&hdr, version, body) {
                    Ok(out) => out,
                    Err(e) => {
                        tracing::warn!(%peer, api = hdr.api_key, error = %e, "kafka response did not encode");
                        break;
                    }
                };
                match tokio::time::timeout(io, frame::write_frame(&mut wr, &out)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "kafka write failed");
                        break;
                    }
                    Err(_) => {
                        tracing::info!(%peer, "kafka connection closed: the client does not read its answers");
                        break;
                    }
                }
            }
            Reply::Close(why) => {
                tracing::info!(%peer, api = hdr.api_key, version = hdr.api_version, client = ?hdr.client_id, "kafka connection closed: {why}");
                break;
            }
        }
    }
    metrics::gauge!("queen_kafka_connections").decrement(1.0);
}

async fn dispatch(
    door: &Door,
    hdr: &RequestHeader,
    reader: Option<Reader>,
    peer: SocketAddr,
) -> Reply {
    let (Some(api), Some(reader)) = (hdr.api, reader) else {
        return Reply::Close(format!("unknown api key {}", hdr.api_key));
    };
    metrics::counter!("queen_kafka_requests_total", "api" => api_name(api)).increment(1);
    match api {
        ApiKey::ApiVersions => api_versions::answer(hdr.api_version),
        ApiKey::Metadata if metadata::VERSIONS.contains(&hdr.api_version) => {
            metadata::answer(door, hdr.api_version, reader).await
        }
        ApiKey::Produce if produce::VERSIONS.contains(&hdr.api_version) => {
            produce::answer(door, hdr.api_version, reader).await
        }
        ApiKey::Fetch if fetch::VERSIONS.contains(&hdr.api_version) => {
            fetch::answer(door, hdr.api_version, reader).await
        }
        ApiKey::ListOffsets if list_offsets::VERSIONS.contains(&hdr.api_version) => {
            list_offsets::answer(door, hdr.api_version, reader).await
        }
        ApiKey::CreateTopics if admin::create_topics::VERSIONS.contains(&hdr.api_version) => {
            admin::create_topics::answer(door, hdr.api_version, reader).await
        }
        ApiKey::DeleteTopics if admin::delete_topics::VERSIONS.contains(&hdr.api_version) => {
            admin::delete_topics::answer(door, hdr.api_version, reader).await
        }
        ApiKey::CreatePartitions
            if admin::create_partitions::VERSIONS.contains(&hdr.api_version) =>
        {
            admin::create_partitions::answer(door, hdr.api_version, reader).await
        }
        ApiKey::InitProducerId if init_producer_id::VERSIONS.contains(&hdr.api_version) => {
            init_producer_id::answer(door, hdr.api_version, reader).await
        }
        ApiKey::DescribeConfigs if admin::describe_configs::VERSIONS.contains(&hdr.api_version) => {
            admin::describe_configs::answer(door, hdr.api_version, reader).await
        }
        ApiKey::AlterConfigs if admin::alter_configs::VERSIONS.contains(&hdr.api_version) => {
            admin::alter_configs::answer(door, hdr.api_version, reader).await
        }
        ApiKey::IncrementalAlterConfigs
            if admin::alter_configs::INCREMENTAL_VERSIONS.contains(&hdr.api_version) =>
        {
            admin::alter_configs::answer_incremental(door, hdr.api_version, reader).await
        }
        ApiKey::DescribeCluster if admin::describe_cluster::VERSIONS.contains(&hdr.api_version) => {
            admin::describe_cluster::answer(door, hdr.api_version, reader)
        }
        ApiKey::DescribeLogDirs
            if admin::describe_log_dirs::VERSIONS.contains(&hdr.api_version) =>
        {
            admin::describe_log_dirs::answer(door, hdr.api_version, reader).await
        }
        _ if group::is_group_api(api, hdr.api_version) => {
            group::dispatch(door, api, hdr, reader, peer).await
        }
        // Not advertised in ApiVersions; the other layouts have no top-level error code.
        _ => Reply::Close(format!(
            "{api:?} v{} is not served (see ApiVersions)",
            hdr.api_version
        )),
    }
}

/// Every value of the `api` label of `queen_kafka_requests_total`.
pub const API_NAMES: &[&str] = &[
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "offset_delete",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "describe_configs",
    "init_producer_id",
    "other",
];

fn api_name(api: ApiKey) -> &'static str {
    match api {
        ApiKey::ApiVersions => "api_versions",
        ApiKey::Metadata => "metadata",
        ApiKey::Produce => "produce",
        ApiKey::Fetch => "fetch",
        ApiKey::ListOffsets => "list_offsets",
        ApiKey::FindCoordinator => "find_coordinator",
        ApiKey::JoinGroup => "join_group",
        ApiKey::SyncGroup => "sync_group",
        ApiKey::Heartbeat => "heartbeat",
        ApiKey::LeaveGroup => "leave_group",
        ApiKey::OffsetCommit => "offset_commit",
        ApiKey::OffsetFetch => "offset_fetch",
        ApiKey::OffsetDelete => "offset_delete",
        ApiKey::ListGroups => "list_groups",
        ApiKey::DescribeGroups => "describe_groups",
        ApiKey::DeleteGroups => "delete_groups",
        ApiKey::CreateTopics => "create_topics",
        ApiKey::DeleteTopics => "delete_topics",
        ApiKey::CreatePartitions => "create_partitions",
        ApiKey::DescribeConfigs => "describe_configs",
        ApiKey::InitProducerId => "init_producer_id",
        _ => "other",
    }
}

/// The response header for `version` of the request's API, then the body.
fn with_header(hdr: &RequestHeader, version: i16, body: BytesMut) -> Result<Bytes, String> {
    let api = hdr.api.ok_or("no api key")?;
    let header_version = api.response_header_version(version);
    let rh = ResponseHeader::default().with_correlation_id(hdr.correlation_id);
    let mut out = BytesMut::with_capacity(8 + body.len());
    rh.encode(&mut out, header_version)
        .map_err(|e| format!("response header: {e}"))?;
    out.extend_from_slice(&body);
    Ok(out.freeze())
}

/// Encodes `msg` at `version` into a reply, or closes the connection when it cannot be
/// encoded (a field set that the version lacks: a bug here, never the client's fault).
pub fn encode<M: Encodable>(msg: &M, version: i16) -> Reply {
    let mut body = BytesMut::new();
    match msg.encode(&mut body, version) {
        Ok(()) => Reply::Send { version, body },
        Err(e) => Reply::Close(format!("response v{version} did not encode: {e}")),
    }
}
