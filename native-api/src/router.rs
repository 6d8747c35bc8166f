//! The route table of the Queen HTTP API.

use axum::extract::Request;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use queenmq_protocol::ErrorCode;
use serde_json::json;

use crate::{ack, auth, groups, health, http_metrics, pop, push, queues, reads, txn, AppState};

pub fn router(app: AppState) -> Router {
    Router::new()
        .route("/health", get(health::health))
        .route("/ready", get(health::ready))
        .route("/metrics", get(health::metrics_json))
        .route("/metrics/prometheus", get(health::metrics_text))
        .route("/api/v1/configure", post(queues::configure))
        .route(
            "/api/v1/resources/queues/{q}",
            delete(queues::delete).get(reads::queue),
        )
        .route("/api/v1/push", post(push::push))
        .route("/api/v1/pop/queue/{q}", get(pop::pop_queue))
        .route(
            "/api/v1/pop/queue/{q}/partition/{p}",
            get(pop::pop_partition),
        )
        .route("/api/v1/pop", get(pop::pop_labels))
        .route("/api/v1/ack", post(ack::ack_one))
        .route("/api/v1/ack/batch", post(ack::ack_batch))
        .route("/api/v1/lease/{id}/extend", post(ack::extend))
        .route("/api/v1/transaction", post(txn::transaction))
        .route("/api/v1/traces", post(reads::trace))
        .route("/api/v1/dlq", get(reads::dlq))
        .route("/api/v1/consumer-groups", get(reads::groups))
        .route("/api/v1/consumer-groups/lagging", get(reads::lagging))
        .route(
            "/api/v1/consumer-groups/{g}",
            delete(groups::delete_all).get(reads::group),
        )
        .route(
            "/api/v1/consumer-groups/{g}/subscription",
            post(groups::subscription),
        )
        .route(
            "/api/v1/consumer-groups/{g}/queues/{q}",
            delete(groups::delete_one),
        )
        .route(
            "/api/v1/consumer-groups/{g}/queues/{q}/seek",
            post(groups::seek),
        )
        .route("/api/v1/resources/overview", get(reads::overview))
        .route("/api/v1/resources/namespaces", get(reads::namespaces))
        .route("/api/v1/resources/tasks", get(reads::tasks))
        .route("/api/v1/resources/queues", get(reads::queues))
        .route("/api/v1/resources/queues/{q}/depth", get(reads::depth))
        .route("/api/v1/resources/partitions", get(reads::partitions))
        .route("/api/v1/messages", get(reads::messages))
        .route(
            "/api/v1/messages/{p}/{t}",
            get(reads::message).delete(health::unsupported),
        )
        .route("/api/v1/messages/{p}/{t}/retry", post(health::unsupported))
        .route("/api/v1/traces/names", get(reads::trace_names))
        .route("/api/v1/traces/by-name/{name}", get(reads::traces_by_name))
        .route("/api/v1/traces/{p}/{t}", get(reads::traces_for))
        .route("/api/v1/status", get(reads::status))
        .route("/api/v1/status/queues", get(reads::status_queues))
        .route("/api/v1/status/queues/{q}", get(reads::status_queue))
        .route("/api/v1/stats/refresh", post(health::stats_refresh))
        .route("/api/v1/dlq", delete(health::unsupported))
        .route("/api/v1/status/analytics", get(health::unsupported))
        .route("/api/v1/analytics/{what}", get(health::unsupported))
        .route("/api/v1/fetch", post(health::unsupported))
        .route("/api/v1/partitions/changed", post(health::unsupported))
        .route("/api/v1/kv", post(health::unsupported))
        .route("/api/v1/locks", post(health::unsupported))
        .route("/api/v1/timers", post(health::unsupported))
        .route(
            "/api/v1/timers/{*rest}",
            get(health::unsupported).delete(health::unsupported),
        )
        .route(
            "/api/v1/ephemeral/{*rest}",
            get(health::unsupported)
                .post(health::unsupported)
                .delete(health::unsupported),
        )
        .route("/streams/v1/{*rest}", post(health::unsupported))
        .fallback(no_route)
        .layer(middleware::from_fn_with_state(app.clone(), auth::layer))
        .layer(middleware::from_fn(http_metrics::record))
        .with_state(app)
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
