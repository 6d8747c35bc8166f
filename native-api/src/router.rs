//! The route table of the Queen HTTP API.

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, MethodRouter};
use axum::{Extension, Router};
use queenmq_protocol::{rows, CommandMeta, ErrorCode};
use serde_json::json;

use crate::{
    ack, auth, cluster_admin, dlq_admin, ephemeral, forward, groups, health, http_metrics, kv,
    locks, node_metrics, offset_reads, pop, push, queues, reads, streams, timers, txn, AppState,
};

/// Every route names the row of the command table its handler sends, and [`auth::needs`]
/// checks the caller's roles against that row before the body is read. Routes of features this
/// broker does not implement send no command: they need a valid token only, and answer
/// `unsupported` whatever the caller's roles.
pub(crate) fn router(app: AppState, forwarder: Option<Arc<forward::Forwarder>>) -> Router {
    let routes = Router::new()
        .route("/health", sends(&rows::HEALTH, get(health::health)))
        .route("/ready", sends(&rows::HEALTH, get(health::ready)))
        .route("/metrics", sends(&rows::METRICS, get(health::metrics_json)))
        .route(
            "/metrics/prometheus",
            sends(&rows::METRICS, get(health::metrics_text)),
        )
        .route(
            "/api/v1/configure",
            sends(&rows::CONFIGURE, post(queues::configure)),
        )
        .route(
            "/api/v1/resources/queues/{q}",
            sends(&rows::DELETE_QUEUE, delete(queues::delete)),
        )
        .route(
            "/api/v1/resources/queues/{q}",
            sends(&rows::READ, get(reads::queue)),
        )
        .route("/api/v1/push", sends(&rows::PUSH, post(push::push)))
        .route(
            "/api/v1/pop/queue/{q}",
            sends(&rows::POP, get(pop::pop_queue)),
        )
        .route(
            "/api/v1/pop/queue/{q}/partition/{p}",
            sends(&rows::POP, get(pop::pop_partition)),
        )
        .route("/api/v1/pop", sends(&rows::POP, get(pop::pop_labels)))
        .route("/api/v1/ack", sends(&rows::ACK, post(ack::ack_one)))
        .route("/api/v1/ack/batch", sends(&rows::ACK, post(ack::ack_batch)))
        .route(
            "/api/v1/lease/{id}/extend",
            sends(&rows::EXTEND_LEASE, post(ack::extend)),
        )
        .route(
            "/api/v1/transaction",
            sends(&rows::TRANSACTION, post(txn::transaction)),
        )
        .route("/api/v1/traces", sends(&rows::TRACE, post(reads::trace)))
        .route("/api/v1/dlq", sends(&rows::READ, get(reads::dlq)))
        .route(
            "/api/v1/fetch",
            sends(&rows::READ, post(offset_reads::fetch)),
        )
        .route(
            "/api/v1/partitions/changed",
            sends(&rows::READ, post(offset_reads::changed)),
        )
        .route(
            "/api/v1/consumer-groups",
            sends(&rows::READ, get(reads::groups)),
        )
        .route(
            "/api/v1/consumer-groups/lagging",
            sends(&rows::READ, get(reads::lagging)),
        )
        .route(
            "/api/v1/consumer-groups/{g}",
            sends(&rows::GROUP_DELETE, delete(groups::delete_all)),
        )
        .route(
            "/api/v1/consumer-groups/{g}",
            sends(&rows::READ, get(reads::group)),
        )
        .route(
            "/api/v1/consumer-groups/{g}/subscription",
            sends(&rows::GROUP_SUBSCRIPTION, post(groups::subscription)),
        )
        .route(
            "/api/v1/consumer-groups/{g}/queues/{q}",
            sends(&rows::GROUP_DELETE, delete(groups::delete_one)),
        )
        .route(
            "/api/v1/consumer-groups/{g}/queues/{q}/seek",
            sends(&rows::GROUP_SEEK, post(groups::seek)),
        )
        .route(
            "/api/v1/resources/overview",
            sends(&rows::READ, get(reads::overview)),
        )
        .route(
            "/api/v1/resources/namespaces",
            sends(&rows::READ, get(reads::namespaces)),
        )
        .route(
            "/api/v1/resources/tasks",
            sends(&rows::READ, get(reads::tasks)),
        )
        .route(
            "/api/v1/resources/queues",
            sends(&rows::READ, get(reads::queues)),
        )
        .route(
            "/api/v1/resources/queues/{q}/depth",
            sends(&rows::READ, get(reads::depth)),
        )
        .route(
            "/api/v1/resources/partitions",
            sends(&rows::READ, get(reads::partitions)),
        )
        .route("/api/v1/messages", sends(&rows::READ, get(reads::messages)))
        .route(
            "/api/v1/messages/{p}/{t}",
            sends(&rows::READ, get(reads::message)),
        )
        .route(
            "/api/v1/messages/{p}/{t}",
            sends(&rows::DLQ_ADMIN, delete(dlq_admin::delete_message)),
        )
        .route(
            "/api/v1/messages/{p}/{t}/retry",
            sends(&rows::DLQ_ADMIN, post(dlq_admin::retry_message)),
        )
        .route(
            "/api/v1/traces/names",
            sends(&rows::READ, get(reads::trace_names)),
        )
        .route(
            "/api/v1/traces/by-name/{name}",
            sends(&rows::READ, get(reads::traces_by_name)),
        )
        .route(
            "/api/v1/traces/{p}/{t}",
            sends(&rows::READ, get(reads::traces_for)),
        )
        .route("/api/v1/status", sends(&rows::READ, get(reads::status)))
        .route(
            "/api/v1/status/queues",
            sends(&rows::READ, get(reads::status_queues)),
        )
        .route(
            "/api/v1/status/queues/{q}",
            sends(&rows::READ, get(reads::status_queue)),
        )
        .route(
            "/api/v1/stats/refresh",
            sends(&rows::STATS_REFRESH, post(health::stats_refresh)),
        )
        .route(
            "/api/v1/dlq",
            sends(&rows::DLQ_PURGE, delete(dlq_admin::purge)),
        )
        .route(
            "/api/v1/status/analytics",
            sends(&rows::READ, get(reads::analytics)),
        )
        .route(
            "/api/v1/analytics/system-metrics",
            sends(&rows::NODE_METRICS, get(node_metrics::system)),
        )
        .route(
            "/api/v1/analytics/worker-metrics",
            sends(&rows::NODE_METRICS, get(node_metrics::worker)),
        )
        // The reference dashboard's other series (queue-lag, queue-ops, ...): outside the
        // client inventory of spec native-api §2.1, not kept by this broker.
        .route("/api/v1/analytics/{what}", get(health::unsupported))
        // Membership operations (docs/cluster.md): admin only; the changes are relayed to
        // the leader, the view is this node's own.
        .route(
            "/api/v1/cluster",
            sends(&rows::CLUSTER_VIEW, get(cluster_admin::view)),
        )
        .route(
            "/api/v1/cluster/learners",
            sends(&rows::CLUSTER_ADMIN, post(cluster_admin::add_learner)),
        )
        .route(
            "/api/v1/cluster/voters",
            sends(&rows::CLUSTER_ADMIN, post(cluster_admin::promote)),
        )
        .route(
            "/api/v1/cluster/members/{id}",
            sends(&rows::CLUSTER_ADMIN, delete(cluster_admin::remove)),
        )
        .route("/api/v1/kv", sends(&rows::KV, post(kv::kv)))
        .route("/api/v1/locks", sends(&rows::LOCKS, post(locks::locks)))
        .route("/api/v1/timers", sends(&rows::TIMERS, post(timers::post)))
        .route("/api/v1/timers/{q}", sends(&rows::READ, get(timers::list)))
        .route(
            "/api/v1/timers/{q}/{*key}",
            sends(&rows::TIMERS, delete(timers::cancel)),
        )
        .route(
            "/api/v1/timers/{q}/{*key}",
            sends(&rows::READ, get(timers::peek)),
        )
        .route(
            "/api/v1/ephemeral/configure",
            sends(&rows::EPHEMERAL_CONFIGURE, post(ephemeral::configure)),
        )
        .route(
            "/api/v1/ephemeral/reset",
            sends(&rows::EPHEMERAL_CONFIGURE, post(ephemeral::reset)),
        )
        .route(
            "/api/v1/ephemeral/queue/{q}",
            sends(&rows::EPHEMERAL_DELETE, delete(ephemeral::delete)),
        )
        .route(
            "/api/v1/ephemeral/push",
            sends(&rows::PUSH, post(ephemeral::push)),
        )
        .route(
            "/api/v1/ephemeral/pop",
            sends(&rows::POP, get(ephemeral::pop)),
        )
        .route(
            "/api/v1/ephemeral/ack",
            sends(&rows::ACK, post(ephemeral::ack)),
        )
        .route(
            "/api/v1/ephemeral/queues",
            sends(&rows::READ, get(ephemeral::queues)),
        )
        .route(
            "/api/v1/ephemeral/queues/{q}/depth",
            sends(&rows::READ, get(ephemeral::depth)),
        )
        // The streams runtime reads and writes what a transaction does (its pushes and acks).
        .route(
            "/streams/v1/queries",
            sends(&rows::TRANSACTION, post(streams::queries)),
        )
        .route(
            "/streams/v1/state/get",
            sends(&rows::TRANSACTION, post(streams::state_get)),
        )
        .route(
            "/streams/v1/cycle",
            sends(&rows::TRANSACTION, post(streams::cycle)),
        )
        .route("/streams/v1/{*rest}", post(health::unsupported))
        .fallback(no_route);
    // A cluster member's routes find the relay to the leader in the request (forward::layer).
    let routes = match forwarder {
        Some(f) => routes.layer(Extension(f)),
        None => routes,
    };
    routes
        .layer(middleware::from_fn_with_state(app.clone(), auth::layer))
        .layer(middleware::from_fn(http_metrics::record))
        .with_state(app)
}

/// The route's handlers (added so far) send commands of `row`: callers whose roles do not
/// grant it are refused before the handler runs; on a cluster follower, what the leader must
/// answer is relayed to it once the roles are checked (the leader checks them again).
fn sends(row: &'static CommandMeta, handlers: MethodRouter<AppState>) -> MethodRouter<AppState> {
    handlers
        .route_layer(middleware::from_fn_with_state(row, forward::layer))
        .route_layer(middleware::from_fn_with_state(row, auth::needs))
}

async fn no_route(req: Request) -> Response {
    let path = req.uri().path().to_string();
    (
        crate::error::status_of(ErrorCode::NoSuchRoute),
        axum::Json(json!({
            "code": ErrorCode::NoSuchRoute.as_str(),
            "error": "not found",
            "path": path,
        })),
    )
        .into_response()
}
