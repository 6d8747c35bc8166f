//! The Queen HTTP API (spec/native-api.md): JSON bodies ↔ bus commands. This crate knows
//! HTTP and JSON; it never sees storage, Raft or the engine.

mod ack;
mod answer;
mod auth;
mod binary_body;
mod body;
mod capped;
pub mod cluster_admin;
mod cluster_carry;
mod dlq_admin;
mod ephemeral;
pub mod ephemeral_door;
pub mod ephemeral_wait;
mod error;
mod forward;
mod groups;
mod health;
mod http_metrics;
mod json_out;
mod kv;
mod kv_ops;
mod locks;
mod meter;
mod node_metrics;
mod offset_reads;
mod pop;
mod push;
mod queue_options;
mod queues;
mod reads;
mod render;
mod reserve;
mod router;
mod serve;
mod streams;
#[cfg(test)]
mod test_pool;
mod timed_io;
mod timers;
mod tls_stream;
mod txn;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use queenmq_protocol::Bus;

pub use error::ApiError;
pub use forward::{ForwardOptions, Leader, LeaderLookup, FORWARDED};
pub use meter::ConnectionMeter;

#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// HS256 secret; JWT auth is on when set.
    pub jwt_secret: Option<String>,
    /// When set, a token must carry this audience in `aud`.
    pub jwt_audience: Option<String>,
    /// Whether `/metrics` and `/metrics/prometheus` need a token (only when auth is on).
    pub metrics_require_auth: bool,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// A request head must arrive within this time of its first byte (or of the connection).
    pub header_timeout: Duration,
    /// A request body must arrive whole within this time once its handler starts reading it.
    pub body_timeout: Duration,
    /// A kept-alive connection idle this long between requests is closed; also the bound on a
    /// client that stops reading its answer.
    pub idle_timeout: Duration,
    /// Most connections served at once; past it, accepts wait.
    pub max_connections: usize,
    /// Connections beyond `max_connections` kept for `/health`, `/ready` and the metrics.
    pub probe_reserve_connections: usize,
    /// Bytes per second a client must read its answer at, measured over `write_rate_window`
    /// of the door waiting on it; 0: no minimum (only the idle timeout).
    pub min_write_rate: u64,
    pub write_rate_window: Duration,
    /// Told of connections and requests, so the owner can count what they hold.
    pub meter: Option<Arc<dyn ConnectionMeter>>,
    /// Most items in one push (and in all push operations of one transaction).
    pub max_push_items: usize,
    /// Most acknowledgements in one ack batch.
    pub max_ack_items: usize,
    /// Most operations in one transaction.
    pub max_txn_ops: usize,
    /// Largest trace `data` (as JSON text).
    pub max_trace_bytes: usize,
    /// What one streams query's state rows may hold: rows, and bytes as the KV cap counts
    /// them (docs/api.md "Streams runtime").
    pub streams_state_max_keys: u64,
    pub streams_state_max_bytes: u64,
    /// The RAM store of ephemeral queues; None answers their routes 501 `unsupported`.
    pub ephemeral: Option<Arc<dyn ephemeral_door::EphemeralDoor>>,
    /// The membership operations of a cluster member; None (a single node) answers
    /// `/api/v1/cluster` 501 `unsupported`.
    pub cluster: Option<Arc<dyn cluster_admin::ClusterAdmin>>,
    /// A cluster member's relay to the leader (docs/cluster.md "Forwarding"); None on a
    /// single node: every request is answered here.
    pub forward: Option<ForwardOptions>,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions {
            jwt_secret: None,
            jwt_audience: None,
            metrics_require_auth: true,
            max_body_bytes: 64 << 20,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            probe_reserve_connections: 16,
            min_write_rate: 16 << 10,
            write_rate_window: Duration::from_secs(10),
            meter: None,
            max_push_items: 10_000,
            max_ack_items: 10_000,
            max_txn_ops: 10_000,
            max_trace_bytes: 64 << 10,
            streams_state_max_keys: 1_000_000,
            streams_state_max_bytes: 64 << 20,
            ephemeral: None,
            cluster: None,
            forward: None,
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub bus: Arc<dyn Bus>,
    pub opts: Arc<ApiOptions>,
    /// Where handlers of possibly big answers reserve memory before building them.
    pub(crate) room: Arc<reserve::Room>,
}

/// Serves the API on a bound listener (over TLS when `tls` is set) until `shutdown` resolves,
/// then drains in-flight requests.
pub async fn run(
    listener: tokio::net::TcpListener,
    bus: Arc<dyn Bus>,
    opts: ApiOptions,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let answers = answer::Answers::new(opts.meter.clone());
    let room_bytes = opts.meter.as_ref().map_or(0, |m| m.answer_room());
    let room = reserve::Room::new(answers.clone(), room_bytes, reserve::WAIT);
    let limits = serve::DoorLimits {
        timeouts: timed_io::Timeouts {
            header: opts.header_timeout,
            idle: opts.idle_timeout,
            min_write_rate: opts.min_write_rate,
            rate_window: opts.write_rate_window,
        },
        max_connections: opts.max_connections,
        probe_reserve: opts.probe_reserve_connections,
        meter: opts.meter.clone(),
        answers,
        tls,
    };
    forward::register_series();
    let forwarder = opts.forward.as_ref().map(|f| {
        Arc::new(forward::Forwarder::new(
            f,
            opts.max_body_bytes,
            opts.body_timeout,
            opts.idle_timeout,
            opts.meter.clone(),
        ))
    });
    let app = router::router(
        AppState {
            bus,
            opts: Arc::new(opts),
            room,
        },
        forwarder,
    );
    serve::serve(listener, app, limits, shutdown).await
}

/// Sends a command over the bus and maps a refusal to its HTTP answer.
pub(crate) async fn call(
    app: &AppState,
    ctx: queenmq_protocol::RequestCtx,
    cmd: queenmq_protocol::Command,
) -> Result<queenmq_protocol::Outcome, ApiError> {
    app.bus.call(ctx, cmd).await.map_err(ApiError)
}

pub(crate) fn iso_ms(us: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

pub(crate) fn parse_iso(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_micros())
}
