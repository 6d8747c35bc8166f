//! A binary body (QPB1 push, QTB1 transaction) decoded at the door. What decoding will
//! allocate past the body (decompressed groups, names copied into every item) is measured from
//! the body's heads and reserved against the connections' share of the memory budget
//! (`crate::reserve`) before anything is decompressed: a full share is a retriable 503, not
//! tens of megabytes per connection nobody counted. A big body is decoded, and its payloads
//! checked, on a blocking thread so the async workers keep serving.

use bytes::Bytes;
use queenmq_protocol::binary::{self, expansion, BinaryError, Limits};
use queenmq_protocol::{PushItem, QueenError};

use crate::error::ApiError;
use crate::reserve::Reserved;
use crate::{body, AppState};

/// Bodies whose decoding touches more than this go to a blocking thread.
const BLOCKING: usize = 256 << 10;

/// A decoded body with the room reserved for it, held until the request is done with it.
pub(crate) struct Decoded<T> {
    pub(crate) body: T,
    pub(crate) _room: Option<Reserved>,
}

pub(crate) async fn push(
    app: &AppState,
    bytes: Bytes,
) -> Result<Decoded<binary::push::PushBody>, ApiError> {
    decode(app, bytes, expansion::push, binary::push::decode, |b| {
        &b.items
    })
    .await
}

pub(crate) async fn transaction(
    app: &AppState,
    bytes: Bytes,
) -> Result<Decoded<binary::txn::TxnBody>, ApiError> {
    decode(
        app,
        bytes,
        expansion::transaction,
        binary::txn::decode,
        |t| &t.items,
    )
    .await
}

async fn decode<T: Send + 'static>(
    app: &AppState,
    bytes: Bytes,
    measure: fn(&[u8], Limits) -> Result<usize, BinaryError>,
    decode: fn(&Bytes, Limits) -> Result<T, BinaryError>,
    items: fn(&T) -> &[PushItem],
) -> Result<Decoded<T>, ApiError> {
    let limits = body::binary_limits(&app.opts);
    let need = measure(&bytes, limits).map_err(|e| ApiError(e.into()))?;
    let room = app.room.take(need).await?;
    let big = bytes.len().saturating_add(need) > BLOCKING;
    let work = move || -> Result<T, ApiError> {
        let body = decode(&bytes, limits).map_err(|e| ApiError(e.into()))?;
        crate::push::check_binary_items(items(&body))?;
        Ok(body)
    };
    let body = match big {
        true => tokio::task::spawn_blocking(work).await.map_err(|e| {
            ApiError(QueenError::new(
                queenmq_protocol::ErrorCode::Internal,
                format!("decoding the body failed: {e}"),
            ))
        })??,
        false => work()?,
    };
    Ok(Decoded { body, _room: room })
}
