//! One Kafka connection: read a frame, answer it, repeat. Any framing or header error, and
//! any request this door cannot answer in its own layout, closes the connection with a log
//! line — what a Kafka broker does too — and never touches another connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use tokio::io::{AsyncRead, AsyncWrite, BufWriter};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::header::{self, RequestHeader};
use crate::prelogin::PreLogin;
use crate::sasl::{self, Login};
use crate::wire::Reader;
use crate::{
    admin, api_versions, fetch, frame, group, init_producer_id, list_offsets, metadata, produce,
    txn, Door, Shared,
};

/// What a handler decided for one request.
pub enum Reply {
    /// Send this response body (the header is added here).
    Send { version: i16, body: BytesMut },
    /// Send nothing (Produce with acks=0).
    Nothing,
    /// Close the connection, with the reason logged.
    Close(String),
    /// Send this response, keeping its reserved room (`answer_room`) until it is written.
    Held {
        version: i16,
        body: BytesMut,
        room: crate::answer_room::Held,
    },
    /// Send this response, then close (a refused login).
    Last {
        version: i16,
        body: BytesMut,
        why: String,
    },
}

impl Reply {
    /// This reply keeping `room` until its frame is written (a reply sent as is; any
    /// other, such as a close, gives the room back at once).
    pub fn holding(self, room: crate::answer_room::Held) -> Reply {
        match self {
            Reply::Send { version, body } => Reply::Held {
                version,
                body,
                room,
            },
            other => other,
        }
    }
}

/// Who the connection acts as: nobody yet while a login is required, else a door.
enum Who {
    /// Boxed: the login's state (SCRAM's messages) is larger than a door's handle.
    LoggingIn(Box<Login>),
    Door(Arc<Door>),
}

pub async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    shared: Arc<Shared>,
    stream: S,
    peer: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
    mut prelogin: Option<PreLogin>,
) {
    let _open = OpenConnection::counted();
    let (mut rd, wr) = tokio::io::split(stream);
    let mut wr = BufWriter::new(wr);
    let (idle, io) = (shared.cfg.idle_timeout, shared.cfg.io_timeout);
    // A connection that has not logged in holds a connection slot for nobody yet: every
    // step of its login — each frame's length and body, the password check, the answer —
    // must end by this deadline, not within the idle or I/O timeouts.
    let login_by = Instant::now() + shared.cfg.handshake_timeout;
    let mut who = match &shared.users {
        Some(_) => Who::LoggingIn(Box::default()),
        None => Who::Door(Arc::new(shared.door(shared.cfg.ctx.clone()))),
    };
    let mut frames_before_login = 0usize;
    loop {
        let logging_in = matches!(who, Who::LoggingIn(_));
        // Each step's deadline: the login's while logging in, else a fresh I/O timeout.
        let by = |logged_in_wait: Duration| {
            if logging_in {
                login_by
            } else {
                Instant::now() + logged_in_wait
            }
        };
        if logging_in {
            frames_before_login += 1;
            // A timeout polls its future before its clock: bytes already buffered would
            // be served after the deadline without this check.
            if Instant::now() >= login_by {
                tracing::debug!(%peer, "kafka connection closed: no SASL login in time");
                break;
            }
            if frames_before_login > sasl::MAX_FRAMES_BEFORE_LOGIN {
                tracing::debug!(%peer, "kafka connection closed: too many requests before login");
                break;
            }
        }
        // A connection that has not logged in may only send small frames: it cannot make
        // the node set room aside for a big request before it is known.
        let max = if logging_in {
            sasl::MAX_FRAME_BEFORE_LOGIN.min(shared.cfg.max_request_bytes)
        } else {
            shared.cfg.max_request_bytes
        };
        let next = tokio::select! {
            f = tokio::time::timeout_at(by(idle), frame::read_len(&mut rd, max)) => f,
            _ = shutdown.changed() => break,
        };
        let len = match next {
            Ok(Ok(Some(n))) => n,
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                closed(&shared, peer, logging_in, &format!("bad frame: {e}"));
                metrics::counter!("queen_kafka_bad_frames_total").increment(1);
                break;
            }
            Err(_) => {
                if logging_in {
                    tracing::debug!(%peer, "kafka connection closed: no SASL login in time");
                } else {
                    tracing::debug!(%peer, "kafka connection closed: idle");
                }
                break;
            }
        };
        // Room for the request before its bytes are read: the node's request bytes stay
        // bounded however many connections announce big frames. Held until it is answered.
        // Frames before login take none: at most MAX_FRAME_BEFORE_LOGIN bytes, at most
        // MAX_FRAMES_BEFORE_LOGIN of them, one at a time per connection, and those
        // connections are capped by `max_prelogin_connections` — a fixed side budget that
        // strangers cannot use to starve logged-in clients' produce requests.
        let _room = if logging_in {
            None
        } else {
            let want = u32::try_from(crate::kib(len)).unwrap_or(u32::MAX);
            let room = shared.inflight.clone().acquire_many_owned(want);
            match tokio::time::timeout_at(by(io), room).await {
                Ok(Ok(permit)) => Some(permit),
                _ => {
                    tracing::info!(%peer, len, "kafka connection closed: no room for its request in time");
                    break;
                }
            }
        };
        let body = match tokio::time::timeout_at(by(io), frame::read_body(&mut rd, len)).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                closed(&shared, peer, logging_in, &format!("bad frame: {e}"));
                metrics::counter!("queen_kafka_bad_frames_total").increment(1);
                break;
            }
            Err(_) if logging_in => {
                tracing::debug!(%peer, len, "kafka connection closed: no SASL login in time");
                break;
            }
            Err(_) => {
                tracing::info!(%peer, len, "kafka connection closed: request body too slow");
                break;
            }
        };
        // After a v0 SaslHandshake the tokens come bare, without a request header.
        if let Who::LoggingIn(login) = &mut who {
            if login.raw() {
                let (out, user) = match check_token(&shared, login, body, peer, login_by).await {
                    sasl::Token::Continue(out) => (out, None),
                    sasl::Token::Success(out, user) => (out, Some(user)),
                    sasl::Token::Failed(why) => {
                        tracing::debug!(%peer, "kafka connection closed: {why}");
                        break;
                    }
                    sasl::Token::Busy => {
                        tracing::debug!(%peer, "kafka connection closed: {}", sasl::kdf::BUSY);
                        break;
                    }
                };
                let sent = tokio::time::timeout_at(by(io), frame::write_frame(&mut wr, &out)).await;
                if !matches!(sent, Ok(Ok(()))) {
                    break;
                }
                if let Some(user) = user {
                    who = Who::Door(Arc::new(shared.user_door(&user)));
                    prelogin = None;
                }
                continue;
            }
        }
        let (hdr, reply) = match header::decode(body) {
            Ok((hdr, reader)) => {
                let reply = match &mut who {
                    Who::Door(door) => dispatch(door, &hdr, reader, peer).await,
                    Who::LoggingIn(login) => {
                        let (reply, user) =
                            before_login(&shared, login, &hdr, reader, peer, login_by).await;
                        if let Some(user) = user {
                            tracing::debug!(%peer, user = %user.name, tenant = %user.tenant, "kafka login");
                            who = Who::Door(Arc::new(shared.user_door(&user)));
                            prelogin = None;
                        }
                        reply
                    }
                };
                (hdr, reply)
            }
            Err(e) => {
                closed(
                    &shared,
                    peer,
                    logging_in,
                    &format!("bad request header: {e}"),
                );
                break;
            }
        };
        let (version, body, then_close, _room) = match reply {
            Reply::Nothing => continue,
            Reply::Send { version, body } => (version, body, None, None),
            Reply::Held {
                version,
                body,
                room,
            } => (version, body, None, Some(room)),
            Reply::Last { version, body, why } => (version, body, Some(why), None),
            Reply::Close(why) if logging_in => {
                // Strangers' refusals are counted and logged, rate-limited, by the login;
                // one line per connection here would let them flood the log.
                tracing::debug!(%peer, api = hdr.api_key, version = hdr.api_version, "kafka connection closed: {why}");
                break;
            }
            Reply::Close(why) => {
                tracing::info!(%peer, api = hdr.api_key, version = hdr.api_version, client = ?hdr.client_id, "kafka connection closed: {why}");
                break;
            }
        };
        let head = match response_header(&hdr, version) {
            Ok(head) => head,
            Err(e) => {
                tracing::warn!(%peer, api = hdr.api_key, error = %e, "kafka response did not encode");
                break;
            }
        };
        // The header and the body go out as they are: a body of tens of MB is not copied
        // behind its header (review s17 lead H1).
        let sent = frame::write_frame_parts(&mut wr, &head, &body);
        match tokio::time::timeout_at(by(io), sent).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "kafka write failed");
                break;
            }
            Err(_) => {
                closed(
                    &shared,
                    peer,
                    logging_in,
                    "the client does not read its answers",
                );
                break;
            }
        }
        if let Some(why) = then_close {
            if logging_in {
                tracing::debug!(%peer, api = hdr.api_key, "kafka connection closed: {why}");
            } else {
                tracing::info!(%peer, api = hdr.api_key, client = ?hdr.client_id, "kafka connection closed: {why}");
            }
            break;
        }
    }
    drop(prelogin);
}

/// Counts a connection in `queen_kafka_connections` while it lives: a stranger evicted by
/// the pre-login gate is dropped mid-`serve`, and must leave the gauge too.
struct OpenConnection;

impl OpenConnection {
    fn counted() -> Self {
        metrics::gauge!("queen_kafka_connections").increment(1.0);
        OpenConnection
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics::gauge!("queen_kafka_connections").decrement(1.0);
    }
}

/// What a connection that must log in may send: ApiVersions and the SASL exchange. Anything
/// else closes it, as Kafka does.
async fn before_login(
    shared: &Shared,
    login: &mut Login,
    hdr: &RequestHeader,
    reader: Option<Reader>,
    peer: SocketAddr,
    login_by: Instant,
) -> (Reply, Option<Arc<sasl::User>>) {
    let (Some(api), Some(reader)) = (hdr.api, reader) else {
        return (
            Reply::Close(format!(
                "api key {} before SASL authentication",
                hdr.api_key
            )),
            None,
        );
    };
    metrics::counter!("queen_kafka_requests_total", "api" => api_name(api)).increment(1);
    let v = hdr.api_version;
    match api {
        ApiKey::ApiVersions => (api_versions::answer(v, true), None),
        ApiKey::SaslHandshake if sasl::HANDSHAKE_VERSIONS.contains(&v) => {
            (login.handshake(v, reader), None)
        }
        ApiKey::SaslAuthenticate if sasl::AUTHENTICATE_VERSIONS.contains(&v) => {
            match login.authenticate(v, reader) {
                Ok(bytes) => {
                    sasl::answer(v, check_token(shared, login, bytes, peer, login_by).await)
                }
                Err(reply) => (reply, None),
            }
        }
        _ => (
            Reply::Close(format!("{api:?} v{v} before SASL authentication")),
            None,
        ),
    }
}

/// Logs why a connection closed: a stranger's reason (one it can cause at will, as often as
/// it likes) through the rate-limited log, a logged-in client's at info.
fn closed(shared: &Shared, peer: SocketAddr, logging_in: bool, why: &str) {
    if logging_in {
        shared.strangers.note(peer, why);
    } else {
        tracing::info!(%peer, "kafka connection closed: {why}");
    }
}

/// Checks one SASL token: a PLAIN password on the blocking pool under the node's limit,
/// SCRAM's cheap steps here. A failure is counted, logged (rate-limited) and answered late,
/// the later the more this peer IP failed recently (but by the login deadline).
async fn check_token(
    shared: &Shared,
    login: &mut Login,
    bytes: Bytes,
    peer: SocketAddr,
    login_by: Instant,
) -> sasl::Token {
    let Some(users) = shared.users.clone() else {
        login.refuse();
        return sasl::Token::Failed("no SASL users".into());
    };
    let token = if login.costly() {
        shared.kdf.token(login, users, bytes, login_by).await
    } else {
        login.token(&users, &bytes)
    };
    match &token {
        sasl::Token::Failed(why) => {
            shared
                .auth_failures
                .record(peer, login.mechanism(), login.tried(), why);
            let delay = shared.backoff.failed(peer.ip(), std::time::Instant::now());
            tokio::time::sleep_until(login_by.min(Instant::now() + delay)).await;
        }
        // A success forgives nothing: the back-off only ever delays failures, and a
        // success from the same address (another account, a neighbour behind the NAT)
        // must not reset the delay an attacker earned.
        sasl::Token::Success(..) | sasl::Token::Continue(_) | sasl::Token::Busy => {}
    }
    token
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
        ApiKey::ApiVersions => api_versions::answer(hdr.api_version, door.sasl),
        // Logged in already: Kafka re-authenticates only with connections.max.reauth.ms,
        // which this broker does not offer.
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate if door.sasl => {
            Reply::Close("a second SASL authentication on one connection".into())
        }
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
        ApiKey::DeleteRecords if admin::delete_records::VERSIONS.contains(&hdr.api_version) => {
            admin::delete_records::answer(door, hdr.api_version, reader).await
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
        _ if txn::is_txn_api(api, hdr.api_version) => {
            txn::dispatch(door, api, hdr.api_version, reader).await
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
    "sasl_handshake",
    "sasl_authenticate",
    "init_producer_id",
    "alter_configs",
    "incremental_alter_configs",
    "describe_cluster",
    "describe_log_dirs",
    "delete_records",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "txn_offset_commit",
    "describe_producers",
    "describe_transactions",
    "list_transactions",
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
        ApiKey::SaslHandshake => "sasl_handshake",
        ApiKey::SaslAuthenticate => "sasl_authenticate",
        ApiKey::InitProducerId => "init_producer_id",
        ApiKey::AlterConfigs => "alter_configs",
        ApiKey::IncrementalAlterConfigs => "incremental_alter_configs",
        ApiKey::DescribeCluster => "describe_cluster",
        ApiKey::DescribeLogDirs => "describe_log_dirs",
        ApiKey::DeleteRecords => "delete_records",
        ApiKey::AddPartitionsToTxn => "add_partitions_to_txn",
        ApiKey::AddOffsetsToTxn => "add_offsets_to_txn",
        ApiKey::EndTxn => "end_txn",
        ApiKey::TxnOffsetCommit => "txn_offset_commit",
        ApiKey::DescribeProducers => "describe_producers",
        ApiKey::DescribeTransactions => "describe_transactions",
        ApiKey::ListTransactions => "list_transactions",
        _ => "other",
    }
}

/// The response header for `version` of the request's API (the body follows it).
fn response_header(hdr: &RequestHeader, version: i16) -> Result<BytesMut, String> {
    let api = hdr.api.ok_or("no api key")?;
    let header_version = api.response_header_version(version);
    let rh = ResponseHeader::default().with_correlation_id(hdr.correlation_id);
    let mut out = BytesMut::with_capacity(8);
    rh.encode(&mut out, header_version)
        .map_err(|e| format!("response header: {e}"))?;
    Ok(out)
}

/// Encodes `msg` at `version` into a reply, or closes the connection when it cannot be
/// encoded (a field set that the version lacks: a bug here, never the client's fault).
pub fn encode<M: Encodable>(msg: &M, version: i16) -> Reply {
    // Sized up front: a buffer grown by doubling holds up to twice the answer, and both
    // blocks at once while it moves.
    let size = match msg.compute_size(version) {
        Ok(n) => n,
        Err(e) => return Reply::Close(format!("response v{version} did not encode: {e}")),
    };
    let mut body = BytesMut::with_capacity(size);
    match msg.encode(&mut body, version) {
        Ok(()) => Reply::Send { version, body },
        Err(e) => Reply::Close(format!("response v{version} did not encode: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A served API counted as `other` reads, on a dashboard, as refused requests.
    #[test]
    fn every_served_api_has_its_own_label() {
        for (key, _, _) in api_versions::served(true) {
            let name = api_name(key);
            assert_ne!(name, "other", "{key:?}");
            assert!(API_NAMES.contains(&name), "{key:?}");
        }
    }
}
