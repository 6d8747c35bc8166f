//! The Queen API's JSON for the engine's typed answers (spec/native-api.md): field names, ISO
//! times and the constant fields the reference broker shows live here, not in the engine.

mod admin;
mod groups;
mod messages;
mod node;
mod node_metrics;
mod queues;

pub use admin::{configured, deleted, group_admin, traced};
pub use node::{health, metrics, ready, STATS_LIVE};
pub use node_metrics::{system as node_system, worker as node_worker};

use queenmq_protocol::{ErrorCode, Outcome, PageInfo, QueenError, ReadAnswer};
use serde_json::{json, Value};

use crate::error::ApiError;

pub fn read(a: &ReadAnswer) -> Value {
    match a {
        ReadAnswer::Queues(qs) => queues::list(qs),
        ReadAnswer::Queue(d) => queues::doc(d),
        ReadAnswer::Depth(d) => queues::depth(d),
        ReadAnswer::Overview(o) => queues::overview(o),
        ReadAnswer::Namespaces(rows) => json!({ "namespaces": queues::labels(rows, "namespace") }),
        ReadAnswer::Tasks(rows) => json!({ "tasks": queues::labels(rows, "task") }),
        ReadAnswer::Partitions(p) => queues::partitions(p),
        ReadAnswer::Status(s) => queues::status(s),
        ReadAnswer::Message(m) => messages::doc(m),
        ReadAnswer::Messages(p) => messages::page(p),
        ReadAnswer::Dlq(p) => messages::dlq(p),
        ReadAnswer::TraceNames(t) => messages::trace_names(t),
        ReadAnswer::TracesByName(t) => messages::traces_page(t),
        ReadAnswer::TracesForMessage(t) => json!({ "traces": messages::traces(t) }),
        ReadAnswer::ConsumerGroups(gs) => groups::list(gs),
        ReadAnswer::ConsumerGroup(g) => groups::one(g),
        ReadAnswer::Lagging(rows) => groups::lagging(rows),
        ReadAnswer::Timer(_) | ReadAnswer::Timers(_) => crate::timers::render_read(a),
        ReadAnswer::Fetch(a) => crate::offset_reads::render_fetch(a),
        ReadAnswer::Changed(a) => crate::offset_reads::render_changed(a),
        ReadAnswer::Offsets(found) => json!(found
            .iter()
            .map(|f| json!({ "offset": f.offset, "timestampUs": f.time_us }))
            .collect::<Vec<_>>()),
        ReadAnswer::Analytics(s) => analytics(s),
        // Asked by the Kafka door only; the colliding name of each asked one, or null.
        ReadAnswer::TopicCollisions(hits) => json!(hits),
        // Asked by the Kafka door only (DescribeTransactions and kin); never routed here.
        ReadAnswer::KafkaTxns(_) => json!(null),
    }
}

/// The shape of the reference broker's `get_analytics_v1`.
fn analytics(s: &queenmq_protocol::AnalyticsSeries) -> serde_json::Value {
    let points: Vec<_> = s
        .points
        .iter()
        .map(|(at, n)| json!({ "timestamp": crate::iso_ms(*at), "messages": n }))
        .collect();
    json!({
        "dataPoints": points,
        "interval": s.interval.name(),
        "from": crate::iso_ms(s.from_us),
        "to": crate::iso_ms(s.to_us),
    })
}

/// A route got the answer of another command: a bug between this door and the engine, never
/// the client's fault.
pub fn unexpected(o: &Outcome) -> ApiError {
    let what = match o {
        Outcome::Configured(_) => "configure",
        Outcome::Deleted(_) => "delete",
        Outcome::Pushed(_) => "push",
        Outcome::Popped(_) => "pop",
        Outcome::Acked(_) => "ack",
        Outcome::LeaseExtended(_) => "lease extension",
        Outcome::Transaction(_) => "transaction",
        Outcome::Traced(_) => "trace",
        Outcome::Timers(_) => "timers",
        Outcome::GroupAdmin(_) => "group administration",
        Outcome::DlqAdmin(_) => "dead-letter administration",
        Outcome::Read(_) => "read",
        Outcome::Health(_) => "health",
        Outcome::Metrics(_) => "metrics",
        Outcome::NodeMetrics(_) => "node metrics",
        Outcome::StatsLive => "stats refresh",
        Outcome::Text(_) => "text",
        Outcome::Kv(_) => "kv",
        Outcome::Locks(_) => "locks",
        Outcome::KafkaGroups(_) => "kafka groups",
        Outcome::KafkaProducerId(_) | Outcome::KafkaProduced(_) => "kafka producers",
        Outcome::KafkaRecordsDeleted(_) => "kafka delete records",
        Outcome::KafkaTxn(_) => "kafka transactions",
        Outcome::EphemeralConfig(_) => "ephemeral configuration",
        Outcome::TenantDeclared => "tenant declaration",
    };
    ApiError(QueenError::new(
        ErrorCode::Internal,
        format!("the engine answered this route with a {what} outcome"),
    ))
}

/// `{limit, offset, total}` of a paged listing.
fn page(p: PageInfo) -> Value {
    json!({"limit": p.limit, "offset": p.offset, "total": p.total})
}

/// Stored JSON text as a JSON value (null if it does not parse, as it always did).
pub(crate) fn raw_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or(Value::Null)
}
