//! The binary wire forms of the Queen HTTP API (docs/binary-forms.md): the QPB1 push body, the
//! QTB1 transaction body and the QPF1 framed pop answer. Decoders check every length against
//! what is left of the input, and every count against its cap, before anything is sized from
//! it; zstd output is read through a cap, so a small body cannot expand without bound.

pub mod expansion;
pub mod frames;
#[doc(hidden)]
pub mod fuzzing;
pub mod pop_frames;
pub mod push;
mod reader;
pub mod txn;
mod zstd_capped;

use crate::{ErrorCode, QueenError};

/// `Content-Type` of the QPB1 push and QTB1 transaction bodies.
pub const PUSH_CONTENT_TYPE: &str = "application/x-queen-push";
/// `Content-Type` of the QPF1 framed pop answer.
pub const POP_CONTENT_TYPE: &str = "application/x-queen-pop";

/// What one binary body may hold: the same caps the JSON body of the route has.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest body after decompression (the route's body cap).
    pub max_bytes: usize,
    /// The most messages in one body (the route's item cap).
    pub max_items: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BinaryError {
    #[error("malformed binary body: {0}")]
    Malformed(String),
    #[error("binary body too large: {0}")]
    TooLarge(String),
}

impl BinaryError {
    fn malformed(what: impl Into<String>) -> Self {
        BinaryError::Malformed(what.into())
    }
}

impl From<BinaryError> for QueenError {
    fn from(e: BinaryError) -> Self {
        let code = match e {
            BinaryError::Malformed(_) => ErrorCode::BadRequest,
            BinaryError::TooLarge(_) => ErrorCode::PayloadTooLarge,
        };
        QueenError::new(code, e.to_string())
    }
}
