//! The Queen HTTP API (spec/native-api.md): JSON bodies ↔ bus commands. This crate knows
//! HTTP and JSON; it never sees storage, Raft or the engine.

mod ack;
mod auth;
mod body;
mod error;
mod groups;
mod health;
mod http_metrics;
mod json_out;
mod pop;
mod push;
mod queues;
mod reads;
mod router;
mod txn;

use std::future::Future;
use std::sync::Arc;

use queenmq_protocol::Bus;

pub use error::ApiError;

#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// HS256 secret; JWT auth is on when set.
    pub jwt_secret: Option<String>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
}

impl Default for ApiOptions {
    fn default() -> Self {
        ApiOptions {
            jwt_secret: None,
            max_body_bytes: 64 << 20,
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub bus: Arc<dyn Bus>,
    pub opts: Arc<ApiOptions>,
}

/// Serves the API on a bound listener until `shutdown` resolves, then drains in-flight requests.
pub async fn run(
    listener: tokio::net::TcpListener,
    bus: Arc<dyn Bus>,
    opts: ApiOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router::router(AppState {
        bus,
        opts: Arc::new(opts),
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
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
