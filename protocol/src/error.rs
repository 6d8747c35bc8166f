//! Errors that cross the bus. Codes are stable strings and numbers: a code is never reused for
//! another meaning, and doors map them to HTTP statuses (and later Kafka error codes) at the edge.

use std::fmt;

/// Stable error codes. The numeric value is part of the contract: never renumber, never reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ErrorCode {
    /// The request is malformed: bad JSON, wrong types, missing fields, bad values.
    BadRequest = 1,
    /// The request body exceeds the configured limit.
    PayloadTooLarge = 2,
    /// No route matches the method and path.
    NoSuchRoute = 3,
    /// Authentication is required or the token is invalid.
    Unauthorized = 4,
    /// The token is valid but its role does not allow the route.
    Forbidden = 5,
    /// The named resource (queue, message, group) does not exist.
    NotFound = 6,
    /// The broker cannot serve now (shutting down, storage failed, no leader).
    Unavailable = 7,
    /// The feature exists in the API but this broker does not implement it yet.
    Unsupported = 8,
    /// An internal invariant failed; the request changed nothing.
    Internal = 9,
    /// A transaction bundle was refused whole.
    TransactionRolledBack = 10,
    /// A queue or partition name is not acceptable.
    BadName = 11,
    /// The client did not send its request (body) within the door's time limit.
    RequestTimeout = 12,
    /// The request names something real but the state forbids it now: an expired or foreign
    /// lease, a message already committed or not delivered, a partition rewound earlier in
    /// the same call.
    Conflict = 13,
    /// The data directory's file system is under its free-space reserve: writes that add
    /// data are refused until space is freed (retriable; reads still answer).
    StorageFull = 14,
    /// This node of a cluster does not lead its Raft group: the request was not planned
    /// here (retriable against the leader, which `QueenError::leader` names when known).
    NotLeader = 15,
}

impl ErrorCode {
    /// The stable string form used in JSON error bodies (`code`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::NoSuchRoute => "no_such_route",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Unsupported => "unsupported",
            ErrorCode::Internal => "internal",
            ErrorCode::TransactionRolledBack => "transaction_rolled_back",
            ErrorCode::BadName => "bad_name",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::Conflict => "conflict",
            ErrorCode::StorageFull => "storage_full",
            ErrorCode::NotLeader => "not_leader",
        }
    }
}

/// An error answered to a request. `message` is a sentence for people; `code` is for programs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct QueenError {
    pub code: ErrorCode,
    pub message: String,
    /// With `NotLeader`: the leader, when this node knows one.
    pub leader: Option<LeaderHint>,
}

/// Where a client should send what a follower refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderHint {
    pub id: u64,
    /// Its HTTP address (`peer_http`), when configured.
    pub url: Option<String>,
}

impl QueenError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        QueenError {
            code,
            message: message.into(),
            leader: None,
        }
    }
    /// A follower's refusal: nothing was planned or written here.
    pub fn not_leader(leader: Option<LeaderHint>) -> Self {
        let message = match &leader {
            Some(l) => format!(
                "this node does not lead the cluster; node {} does: send the request there",
                l.id
            ),
            None => "this node does not lead the cluster and no leader is known yet; retry \
                     later"
                .to_string(),
        };
        QueenError {
            code: ErrorCode::NotLeader,
            message,
            leader,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }
}

impl fmt::Display for QueenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
