//! Key/value and lock requests and answers (spec/native-api.md §2.13, §2.14, the `kv` rider of
//! §2.8). Values travel as JSON text: the engine stores and returns them verbatim and parses
//! only what it must judge (an `incr` counter, a permit's owner).

/// How long a written row lives. Every write names one: a put never inherits an expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvExpiry {
    Seconds(u64),
    Forever,
}

#[derive(Debug, Clone, PartialEq)]
pub enum KvOp {
    Get {
        ns: String,
        key: String,
    },
    GetMany {
        ns: String,
        keys: Vec<String>,
    },
    GetPrefix {
        ns: String,
        prefix: String,
        after: Option<String>,
        limit: usize,
        keys_only: bool,
    },
    /// `put`, or `putIfAbsent` when `if_absent` (which is `expect: 0` with its own reason).
    Put {
        ns: String,
        key: String,
        value: String,
        expiry: KvExpiry,
        expect: Option<u64>,
        if_absent: bool,
        required: bool,
    },
    Delete {
        ns: String,
        key: String,
        expect: Option<u64>,
        required: bool,
    },
    Incr {
        ns: String,
        key: String,
        delta: i64,
        min: Option<i64>,
        max: Option<i64>,
        expiry: KvExpiry,
        required: bool,
    },
    Check {
        ns: String,
        key: String,
        expect: u64,
        required: bool,
    },
}

impl KvOp {
    pub fn ns_key(&self) -> (&str, &str) {
        match self {
            KvOp::Get { ns, key }
            | KvOp::Put { ns, key, .. }
            | KvOp::Delete { ns, key, .. }
            | KvOp::Incr { ns, key, .. }
            | KvOp::Check { ns, key, .. } => (ns, key),
            KvOp::GetMany { ns, .. } => (ns, ""),
            KvOp::GetPrefix { ns, prefix, .. } => (ns, prefix),
        }
    }

    /// Whether a lost precondition of this op refuses its whole call.
    pub fn required(&self) -> bool {
        match self {
            KvOp::Put { required, .. }
            | KvOp::Delete { required, .. }
            | KvOp::Incr { required, .. }
            | KvOp::Check { required, .. } => *required,
            _ => false,
        }
    }

    pub fn is_write(&self) -> bool {
        matches!(
            self,
            KvOp::Put { .. } | KvOp::Delete { .. } | KvOp::Incr { .. }
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvReq {
    pub ops: Vec<KvOp>,
}

/// A live row as a reader sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct KvRowView {
    pub key: String,
    /// JSON text; `None` for a keys-only listing.
    pub value: Option<String>,
    pub version: u64,
    pub expires_at_us: Option<i64>,
    pub updated_at_us: i64,
}

/// Why a write or check did not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvRefusal {
    Exists,
    Version,
    Absent,
    Limit,
    Type,
}

impl KvRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            KvRefusal::Exists => "exists",
            KvRefusal::Version => "version",
            KvRefusal::Absent => "absent",
            KvRefusal::Limit => "limit",
            KvRefusal::Type => "type",
        }
    }
}

/// The verdict of a write or check: on success the new (or checked) version and value, on a
/// refusal the current ones (version 0 and no value when there is no live row).
#[derive(Debug, Clone, PartialEq)]
pub struct KvWriteResult {
    pub applied: bool,
    pub reason: Option<KvRefusal>,
    pub version: u64,
    pub value: Option<String>,
    pub expires_at_us: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum KvResult {
    Get(Option<KvRowView>),
    GetMany {
        rows: Vec<KvRowView>,
        missing: Vec<String>,
        /// The call's answer budget ran out: keys after the last answered one are in neither
        /// list.
        truncated: bool,
    },
    GetPrefix {
        rows: Vec<KvRowView>,
        truncated: bool,
        next_after: Option<String>,
    },
    Write(KvWriteResult),
}

/// A `required` op that did not hold: nothing of the call was applied.
#[derive(Debug, Clone, PartialEq)]
pub struct KvPrecondition {
    /// Index of the op among the call's KV ops (the door turns it into the flat index).
    pub index: usize,
    pub reason: KvRefusal,
    pub version: u64,
    pub value: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum KvOutcome {
    Results(Vec<KvResult>),
    Precondition(KvPrecondition),
}

#[derive(Debug, Clone, PartialEq)]
pub enum LockOp {
    Acquire {
        name: String,
        ttl_seconds: u64,
        owner: String,
        limit: u32,
    },
    Renew {
        name: String,
        token: u64,
        ttl_seconds: u64,
        slot: u32,
        owner: Option<String>,
    },
    Release {
        name: String,
        token: u64,
        slot: u32,
    },
    Get {
        name: String,
    },
}

impl LockOp {
    pub fn name(&self) -> &str {
        match self {
            LockOp::Acquire { name, .. }
            | LockOp::Renew { name, .. }
            | LockOp::Release { name, .. }
            | LockOp::Get { name } => name,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LockReq {
    pub ops: Vec<LockOp>,
}

/// One permit as `get` and refusals list it.
#[derive(Debug, Clone, PartialEq)]
pub struct LockHolder {
    pub slot: u32,
    pub owner: String,
    pub token: u64,
    pub since_us: i64,
    pub expires_at_us: Option<i64>,
    pub renewed_at_us: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum LockResult {
    Acquired {
        slot: u32,
        token: u64,
        owner: String,
        already: bool,
    },
    /// Every slot is held by somebody else (`held` for a lock, `contended` for a semaphore).
    Refused {
        contended: bool,
        holders: Vec<LockHolder>,
    },
    Renewed {
        slot: u32,
        token: u64,
    },
    Lost {
        holders: Vec<LockHolder>,
    },
    Released {
        released: bool,
        slot: u32,
    },
    Holders(Vec<LockHolder>),
}

/// The namespace permits live in: a permit IS the row `<name>#<slot>` there.
pub const LOCKS_NS: &str = "queen-locks";

/// The namespace the Kafka door keeps each topic's partition count in (its floor): a KV
/// write there would change a topic's partition count behind the door's checks.
pub const KAFKA_PARTITIONS_NS: &str = "queen-kafka-partitions";

/// The namespace the Kafka door keeps the topic configs that have no queue option in
/// (`crate::kafka_topic_configs`): a KV write there would change a topic's produce bound
/// behind the door's range checks.
pub const KAFKA_TOPIC_CONFIGS_NS: &str = "queen-kafka-topic-configs";

/// The namespace the streams runtime (/streams/v1) keeps its query registry and state rows
/// in: a KV write there would bypass the query's reset fence and the cycle's atomicity.
pub const STREAMS_NS: &str = "queen-streams";

/// A row `purging/<query_id>` of [`STREAMS_NS`] asks the engine to delete every row under
/// `row/<query_id>/`, a bounded number per cycle, then the marker: a reset's purge survives
/// the client going away and the broker restarting.
pub const STREAMS_PURGE_PREFIX: &str = "purging/";

/// The prefix of every state row of a streams query id.
pub fn streams_rows_prefix(query_id: &str) -> String {
    format!("row/{query_id}/")
}

/// The query id a state row of [`STREAMS_NS`] belongs to (`row/<query_id>/...`).
pub fn streams_row_query(key: &str) -> Option<&str> {
    key.strip_prefix("row/")?.split_once('/').map(|(q, _)| q)
}

/// A bound on what one streams query's state rows (every partition's) may hold, set by the
/// streams door from its config (`streams_state_max_keys`, `streams_state_max_bytes`): a
/// cycle whose writes would take the query past either is refused whole. A cycle that does
/// not grow the state passes, so a query over a lowered bound can still shrink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateCap {
    pub query_id: String,
    pub max_keys: u64,
    /// Counted as the KV cap counts a row (`row_bytes`: namespace, key, value, overhead).
    pub max_bytes: u64,
}

/// Namespaces the KV API may read but never write: each is written by the one door that
/// keeps its invariants.
pub const READ_ONLY_NAMESPACES: [(&str, &str); 4] = [
    (LOCKS_NS, "/locks"),
    (KAFKA_PARTITIONS_NS, "the Kafka port"),
    (KAFKA_TOPIC_CONFIGS_NS, "the Kafka port"),
    (STREAMS_NS, "/streams/v1"),
];

/// The key of a permit's row.
pub fn permit_key(name: &str, slot: u32) -> String {
    format!("{name}#{slot}")
}
