//! Dead-letter administration: delete one dead-lettered message's rows, replay it, or purge
//! the rows a listing filter matches (spec native-api §2.10, §2.19).

use crate::types::DlqQuery;

#[derive(Debug, Clone)]
pub enum DlqAdminReq {
    /// `DELETE /api/v1/messages/{pid}/{txn}`: the message's dead-letter rows go; a message
    /// that is not dead-lettered is not found.
    Delete {
        partition_id: String,
        transaction_id: String,
    },
    /// `POST /api/v1/messages/{pid}/{txn}/retry`: the dead-lettered message is appended again
    /// to its partition (a new message, transaction id `dlq:<pid>:<offset>`) and its
    /// dead-letter rows go.
    Retry {
        partition_id: String,
        transaction_id: String,
    },
    /// `DELETE /api/v1/dlq`: every row the filter matches goes (`limit`/`offset` unused).
    Purge(DlqQuery),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DlqAdminOutcome {
    Deleted {
        partition_id: u64,
        transaction_id: String,
        rows: usize,
    },
    Retried {
        queue: String,
        partition: String,
        partition_id: u64,
        transaction_id: String,
        /// The replay's own transaction id, and whether this retry appended it (false: an
        /// earlier retry's copy is still remembered, so this one added nothing).
        new_transaction_id: String,
        queued: bool,
        rows: usize,
    },
    Purged {
        queue: String,
        rows: usize,
    },
}
