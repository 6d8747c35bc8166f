//! Dead-letter administration: delete or replay one dead-lettered message, purge the DLQ.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use queenmq_protocol::{limits, Command, DlqAdminOutcome, DlqAdminReq, Outcome, RequestCtx};
use serde_json::json;

use crate::error::ApiError;
use crate::{call, render, AppState};

async fn run(app: AppState, ctx: RequestCtx, req: DlqAdminReq) -> Result<Response, ApiError> {
    match call(&app, ctx, Command::DlqAdmin(req)).await? {
        Outcome::DlqAdmin(o) => Ok(Json(answer(&o)).into_response()),
        other => Err(render::unexpected(&other)),
    }
}

fn answer(o: &DlqAdminOutcome) -> serde_json::Value {
    match o {
        DlqAdminOutcome::Deleted {
            partition_id,
            transaction_id,
            rows,
        } => json!({
            "success": true,
            "deleted": true,
            "partitionId": partition_id.to_string(),
            "transactionId": transaction_id,
            "dlqRows": rows,
        }),
        DlqAdminOutcome::Retried {
            queue,
            partition,
            partition_id,
            transaction_id,
            new_transaction_id,
            queued,
            rows,
        } => json!({
            "success": true,
            "retried": true,
            "queue": queue,
            "partition": partition,
            "partitionId": partition_id.to_string(),
            "transactionId": transaction_id,
            "newTransactionId": new_transaction_id,
            "status": if *queued { "queued" } else { "duplicate" },
            "dlqRows": rows,
        }),
        DlqAdminOutcome::Purged { queue, rows } => json!({
            "success": true,
            "queue": queue,
            "deleted": rows,
        }),
    }
}

/// The request of a one-message route, its ids checked: a delete, or a retry.
fn one_message(
    partition_id: String,
    transaction_id: String,
    retry: bool,
) -> Result<DlqAdminReq, ApiError> {
    limits::check_name("partitionId", &partition_id)?;
    // A transaction id is as long as a push may make it, not a name's limit.
    if transaction_id.len() > usize::from(u16::MAX) {
        return Err(ApiError::bad("transactionId is longer than 65535 bytes"));
    }
    Ok(if retry {
        DlqAdminReq::Retry {
            partition_id,
            transaction_id,
        }
    } else {
        DlqAdminReq::Delete {
            partition_id,
            transaction_id,
        }
    })
}

pub async fn delete_message(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((pid, txn)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    run(app, ctx, one_message(pid, txn, false)?).await
}

pub async fn retry_message(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Path((pid, txn)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    run(app, ctx, one_message(pid, txn, true)?).await
}

pub async fn purge(
    State(app): State<AppState>,
    Extension(ctx): Extension<RequestCtx>,
    Query(p): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let q = crate::reads::dlq_query(&p)?;
    match q.queue.as_deref() {
        Some(name) => limits::check_name("queue", name)?,
        None => return Err(ApiError::bad("queue is required")),
    }
    run(app, ctx, DlqAdminReq::Purge(q)).await
}
