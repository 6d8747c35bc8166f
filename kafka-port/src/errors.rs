//! Kafka error codes we answer, and how an engine refusal maps onto them.

use queenmq_protocol::{ErrorCode, QueenError};

pub const NONE: i16 = 0;
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const LEADER_NOT_AVAILABLE: i16 = 5;
/// Retriable: clients refresh their metadata and retry the partition.
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const REQUEST_TIMED_OUT: i16 = 7;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
/// Retriable: the broker's disk is full (or failed); the producer retries the partition.
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const INVALID_RECORD: i16 = 87;
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const INVALID_TXN_STATE: i16 = 48;
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
pub const UNKNOWN_PRODUCER_ID: i16 = 59;
pub const UNKNOWN_TOPIC_ID: i16 = 100;
// Fetch sessions (fetch_sessions/): the client starts a new session on either.
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
pub const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
// Consumer groups (group/).
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// Retriable: the client asks FindCoordinator again and goes to the node it names (a
/// cluster's follower, for a coordinator API the leader answers).
pub const NOT_COORDINATOR: i16 = 16;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const INVALID_GROUP_ID: i16 = 24;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const INVALID_REQUEST: i16 = 42;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const MEMBER_ID_REQUIRED: i16 = 79;
pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
pub const FENCED_INSTANCE_ID: i16 = 82;
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;

/// A group call the engine refused: the user's roles (GROUP_AUTHORIZATION_FAILED, which the
/// client reports instead of retrying), else busy or full (COORDINATOR_NOT_AVAILABLE,
/// retried).
pub fn group_refusal(err: &QueenError) -> i16 {
    match err.code {
        ErrorCode::Unauthorized | ErrorCode::Forbidden => GROUP_AUTHORIZATION_FAILED,
        _ => coordinator_refusal(err, COORDINATOR_NOT_AVAILABLE),
    }
}

/// A coordinator API (group or transaction) refused by the engine: on a cluster's follower
/// (`NotLeader`) NOT_COORDINATOR, after which clients find the coordinator again (the
/// leader); any other refusal `otherwise`, the API's own retriable code.
pub fn coordinator_refusal(err: &QueenError, otherwise: i16) -> i16 {
    match err.code {
        ErrorCode::NotLeader => NOT_COORDINATOR,
        _ => otherwise,
    }
}

pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const POLICY_VIOLATION: i16 = 44;
pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
pub const PRODUCER_FENCED: i16 = 90;

/// The Kafka code for an engine refusal. Retriable conditions (the broker is busy or cannot
/// write now) get REQUEST_TIMED_OUT, which every client retries; bad names get
/// INVALID_TOPIC_EXCEPTION, which none does; a full disk NOT_LEADER_OR_FOLLOWER, retriable
/// by every client (KAFKA_STORAGE_ERROR only where the request's version knows it:
/// `from_queen_in`).
pub fn from_queen(e: &QueenError) -> i16 {
    from_queen_in(e, false)
}

/// As `from_queen`, for a request whose version knows KAFKA_STORAGE_ERROR (Produce v4+, Fetch
/// v6+: Kafka sends it to no older one, whose clients would not retry an unknown code).
pub fn from_queen_in(e: &QueenError, storage_error_known: bool) -> i16 {
    match e.code {
        ErrorCode::NotFound => UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::BadName | ErrorCode::BadRequest => INVALID_TOPIC_EXCEPTION,
        ErrorCode::PayloadTooLarge => MESSAGE_TOO_LARGE,
        ErrorCode::Unavailable | ErrorCode::RequestTimeout => REQUEST_TIMED_OUT,
        // Retriable in Kafka too: the producer retries the partition once space is freed.
        ErrorCode::StorageFull if storage_error_known => KAFKA_STORAGE_ERROR,
        ErrorCode::StorageFull => NOT_LEADER_OR_FOLLOWER,
        // A follower of a cluster: the client refreshes its metadata and retries.
        ErrorCode::NotLeader => NOT_LEADER_OR_FOLLOWER,
        ErrorCode::Unauthorized | ErrorCode::Forbidden => TOPIC_AUTHORIZATION_FAILED,
        ErrorCode::NoSuchRoute
        | ErrorCode::Unsupported
        | ErrorCode::Internal
        | ErrorCode::TransactionRolledBack
        | ErrorCode::Conflict => UNKNOWN_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_is_retriable_and_bad_names_are_not() {
        assert_eq!(
            from_queen(&QueenError::unavailable("memory")),
            REQUEST_TIMED_OUT
        );
        assert_eq!(
            from_queen(&QueenError::new(ErrorCode::BadName, "x")),
            INVALID_TOPIC_EXCEPTION
        );
        assert_eq!(
            from_queen(&QueenError::not_found("q")),
            UNKNOWN_TOPIC_OR_PARTITION
        );
        let follower = QueenError::not_leader(None);
        assert_eq!(from_queen(&follower), NOT_LEADER_OR_FOLLOWER);
        assert_eq!(group_refusal(&follower), NOT_COORDINATOR);
        assert_eq!(
            group_refusal(&QueenError::unavailable("busy")),
            COORDINATOR_NOT_AVAILABLE
        );
        assert_eq!(
            coordinator_refusal(&follower, COORDINATOR_LOAD_IN_PROGRESS),
            NOT_COORDINATOR
        );
        let full = QueenError::new(ErrorCode::StorageFull, "disk");
        assert_eq!(from_queen_in(&full, true), KAFKA_STORAGE_ERROR);
        assert_eq!(
            from_queen(&full),
            NOT_LEADER_OR_FOLLOWER,
            "an older request gets a code its client knows and retries"
        );
    }
}
