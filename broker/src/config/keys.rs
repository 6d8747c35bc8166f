//! The table of configuration keys: one row per key, the single place that
//! names a key's environment variable, flag, type and range.

/// How a raw text value (environment, flag) is turned into a typed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Free text (paths, addresses, filter directives).
    Text,
    /// Text that must never be printed.
    Secret,
    /// An unsigned integer with an inclusive range.
    Uint { min: u64, max: u64 },
    /// `true` or `false`.
    Bool,
}

/// One configuration key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeySpec {
    /// The key in `queen.toml` and in `Config`.
    pub name: &'static str,
    /// The environment variable that sets it.
    pub env: &'static str,
    /// The command-line flag that sets it, if any (secrets have none: a flag
    /// shows up in `ps` and in shell history).
    pub flag: Option<&'static str>,
    pub kind: Kind,
}

pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = 1024 * KIB;
pub(crate) const GIB: u64 = 1024 * MIB;
/// The largest `max_body_bytes`: under the log's record limit (256 MiB), since a request is
/// planned into one log entry and an entry cannot exceed a record.
pub(crate) const MAX_BODY_BYTES: u64 = 255 * MIB;

/// Every key, in the order `queen config print` and the docs list them.
pub(crate) const KEYS: &[KeySpec] = &[
    KeySpec {
        name: "data_dir",
        env: "QUEEN_DATA_DIR",
        flag: Some("--data-dir"),
        kind: Kind::Text,
    },
    KeySpec {
        name: "http_addr",
        env: "QUEEN_HTTP_ADDR",
        flag: Some("--http-addr"),
        kind: Kind::Text,
    },
    KeySpec {
        name: "jwt_secret",
        env: "QUEEN_JWT_SECRET",
        flag: None,
        kind: Kind::Secret,
    },
    KeySpec {
        name: "encryption_key",
        env: "QUEEN_ENCRYPTION_KEY",
        flag: None,
        kind: Kind::Secret,
    },
    KeySpec {
        name: "max_body_bytes",
        env: "QUEEN_MAX_BODY_BYTES",
        flag: Some("--max-body-bytes"),
        // Below the log's 256 MiB record limit: one request becomes (part of) one log entry.
        kind: Kind::Uint {
            min: KIB,
            max: MAX_BODY_BYTES,
        },
    },
    KeySpec {
        name: "segment_bytes",
        env: "QUEEN_SEGMENT_BYTES",
        flag: None,
        kind: Kind::Uint { min: MIB, max: GIB },
    },
    KeySpec {
        name: "reclaim_enabled",
        env: "QUEEN_RECLAIM_ENABLED",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "compaction_enabled",
        env: "QUEEN_COMPACTION_ENABLED",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "min_free_disk_bytes",
        env: "QUEEN_MIN_FREE_DISK_BYTES",
        flag: None,
        // 0 turns the gate off (a real ENOSPC still fails the group, docs/storage-format.md).
        kind: Kind::Uint {
            min: 0,
            max: 1024 * GIB,
        },
    },
    KeySpec {
        name: "commit_max_batch",
        env: "QUEEN_COMMIT_MAX_BATCH",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 65_536,
        },
    },
    KeySpec {
        name: "commit_max_bytes",
        env: "QUEEN_COMMIT_MAX_BYTES",
        flag: None,
        kind: Kind::Uint {
            min: 64 * KIB,
            max: 256 * MIB,
        },
    },
    KeySpec {
        name: "entry_cache_bytes",
        env: "QUEEN_ENTRY_CACHE_BYTES",
        flag: None,
        kind: Kind::Uint {
            min: MIB,
            max: 64 * GIB,
        },
    },
    KeySpec {
        name: "checkpoint_interval_secs",
        env: "QUEEN_CHECKPOINT_INTERVAL_SECS",
        flag: None,
        kind: Kind::Uint { min: 1, max: 3_600 },
    },
    KeySpec {
        name: "retention_interval_ms",
        env: "QUEEN_RETENTION_INTERVAL_MS",
        flag: None,
        kind: Kind::Uint {
            min: 10,
            max: 3_600_000,
        },
    },
    KeySpec {
        name: "shutdown_grace_secs",
        env: "QUEEN_SHUTDOWN_GRACE_SECS",
        flag: None,
        kind: Kind::Uint { min: 1, max: 600 },
    },
    KeySpec {
        name: "jwt_audience",
        env: "QUEEN_JWT_AUDIENCE",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "metrics_require_auth",
        env: "QUEEN_METRICS_REQUIRE_AUTH",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "http_header_timeout_ms",
        env: "QUEEN_HTTP_HEADER_TIMEOUT_MS",
        flag: None,
        kind: Kind::Uint {
            min: 100,
            max: 600_000,
        },
    },
    KeySpec {
        name: "http_body_timeout_ms",
        env: "QUEEN_HTTP_BODY_TIMEOUT_MS",
        flag: None,
        kind: Kind::Uint {
            min: 100,
            max: 3_600_000,
        },
    },
    KeySpec {
        name: "http_idle_timeout_ms",
        env: "QUEEN_HTTP_IDLE_TIMEOUT_MS",
        flag: None,
        kind: Kind::Uint {
            min: 100,
            max: 3_600_000,
        },
    },
    KeySpec {
        name: "http_max_connections",
        env: "QUEEN_HTTP_MAX_CONNECTIONS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 1_000_000,
        },
    },
    KeySpec {
        name: "max_push_items",
        env: "QUEEN_MAX_PUSH_ITEMS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 1_000_000,
        },
    },
    KeySpec {
        name: "max_ack_items",
        env: "QUEEN_MAX_ACK_ITEMS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 1_000_000,
        },
    },
    KeySpec {
        name: "max_txn_ops",
        env: "QUEEN_MAX_TXN_OPS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 1_000_000,
        },
    },
    KeySpec {
        name: "dedup_hot_ids",
        env: "QUEEN_DEDUP_HOT_IDS",
        flag: None,
        // 0 derives it from the memory budget; a set value is at least MIN_HOT_IDS
        // (`validate`).
        kind: Kind::Uint {
            min: 0,
            max: 1 << 30,
        },
    },
    KeySpec {
        name: "dedup_filter_bytes",
        env: "QUEEN_DEDUP_FILTER_BYTES",
        flag: None,
        // 0 derives it; a set value is range-checked by the filters (`validate`).
        kind: Kind::Uint {
            min: 0,
            max: queenmq_engine::dedup_filter::MAX_FILTER_BYTES,
        },
    },
    KeySpec {
        name: "max_trace_bytes",
        env: "QUEEN_MAX_TRACE_BYTES",
        flag: None,
        kind: Kind::Uint {
            min: KIB,
            max: 16 * MIB,
        },
    },
    KeySpec {
        name: "max_new_partitions_per_request",
        env: "QUEEN_MAX_NEW_PARTITIONS_PER_REQUEST",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 10_000_000,
        },
    },
    KeySpec {
        name: "max_tenants",
        env: "QUEEN_MAX_TENANTS",
        flag: None,
        kind: Kind::Uint { min: 1, max: 4_096 },
    },
    KeySpec {
        name: "max_long_polls",
        env: "QUEEN_MAX_LONG_POLLS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 1_000_000,
        },
    },
    KeySpec {
        name: "ephemeral_enabled",
        env: "QUEEN_EPHEMERAL_ENABLED",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "ephemeral_max_bytes",
        env: "QUEEN_EPHEMERAL_MAX_BYTES",
        flag: None,
        kind: Kind::Uint {
            min: MIB,
            max: 64 * GIB,
        },
    },
    KeySpec {
        name: "ephemeral_tenant_max_bytes",
        env: "QUEEN_EPHEMERAL_TENANT_MAX_BYTES",
        flag: None,
        kind: Kind::Uint {
            min: 0,
            max: 64 * GIB,
        },
    },
    KeySpec {
        name: "ephemeral_implicit_idle_s",
        env: "QUEEN_EPHEMERAL_IMPLICIT_IDLE_S",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 604_800,
        },
    },
    KeySpec {
        name: "streams_state_max_keys",
        env: "QUEEN_STREAMS_STATE_MAX_KEYS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 100_000_000,
        },
    },
    KeySpec {
        name: "streams_state_max_bytes",
        env: "QUEEN_STREAMS_STATE_MAX_BYTES",
        flag: None,
        kind: Kind::Uint {
            min: 4 * KIB,
            max: 256 * MIB,
        },
    },
    KeySpec {
        name: "metrics_sample_s",
        env: "QUEEN_METRICS_SAMPLE_S",
        flag: None,
        kind: Kind::Uint { min: 1, max: 3_600 },
    },
    KeySpec {
        name: "metrics_history_samples",
        env: "QUEEN_METRICS_HISTORY_SAMPLES",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 100_000,
        },
    },
    KeySpec {
        name: "transparent_huge_pages",
        env: "QUEEN_TRANSPARENT_HUGE_PAGES",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "log_json",
        env: "QUEEN_LOG_JSON",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "log",
        env: "QUEEN_LOG",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "accept_data_loss",
        env: "QUEEN_ACCEPT_DATA_LOSS",
        flag: Some("--accept-data-loss"),
        kind: Kind::Bool,
    },
    KeySpec {
        name: "memory_limit_bytes",
        env: "QUEEN_MEMORY_LIMIT_BYTES",
        flag: None,
        // 0 derives it (docs/memory.md); a set value must be at least 32 MiB (`validate`).
        kind: Kind::Uint {
            min: 0,
            max: 16 * 1024 * GIB,
        },
    },
    KeySpec {
        name: "http_min_write_rate_bytes",
        env: "QUEEN_HTTP_MIN_WRITE_RATE_BYTES",
        flag: None,
        // 0 turns the minimum off (the idle timeout still cuts a client that reads nothing).
        kind: Kind::Uint { min: 0, max: GIB },
    },
    KeySpec {
        name: "http_write_rate_window_ms",
        env: "QUEEN_HTTP_WRITE_RATE_WINDOW_MS",
        flag: None,
        kind: Kind::Uint {
            min: 100,
            max: 3_600_000,
        },
    },
    KeySpec {
        name: "http_probe_reserve_connections",
        env: "QUEEN_HTTP_PROBE_RESERVE_CONNECTIONS",
        flag: None,
        kind: Kind::Uint { min: 0, max: 1_000 },
    },
    KeySpec {
        name: "kafka_enabled",
        env: "QUEEN_KAFKA_ENABLED",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "kafka_addr",
        env: "QUEEN_KAFKA_ADDR",
        flag: Some("--kafka-addr"),
        kind: Kind::Text,
    },
    KeySpec {
        name: "kafka_advertised_addr",
        env: "QUEEN_KAFKA_ADVERTISED_ADDR",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "kafka_max_request_bytes",
        env: "QUEEN_KAFKA_MAX_REQUEST_BYTES",
        flag: None,
        // Like max_body_bytes: one Produce becomes (part of) one log entry.
        kind: Kind::Uint {
            min: KIB,
            max: MAX_BODY_BYTES,
        },
    },
    KeySpec {
        name: "kafka_default_partitions",
        env: "QUEEN_KAFKA_DEFAULT_PARTITIONS",
        flag: None,
        // The kafka-port's MAX_TOPIC_PARTITIONS.
        kind: Kind::Uint {
            min: 1,
            max: 10_000,
        },
    },
    KeySpec {
        name: "tls_cert_file",
        env: "QUEEN_TLS_CERT_FILE",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "tls_key_file",
        env: "QUEEN_TLS_KEY_FILE",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "kafka_tls_cert_file",
        env: "QUEEN_KAFKA_TLS_CERT_FILE",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "kafka_tls_key_file",
        env: "QUEEN_KAFKA_TLS_KEY_FILE",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "kafka_sasl_users_file",
        env: "QUEEN_KAFKA_SASL_USERS_FILE",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "kafka_producer_id_expiration_ms",
        env: "QUEEN_KAFKA_PRODUCER_ID_EXPIRATION_MS",
        flag: None,
        // A second at least (tests expire producers), a year at most.
        kind: Kind::Uint {
            min: 1_000,
            max: 365 * 86_400_000,
        },
    },
    KeySpec {
        name: "kafka_max_producer_ids",
        env: "QUEEN_KAFKA_MAX_PRODUCER_IDS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 1_000_000,
        },
    },
    KeySpec {
        name: "kafka_max_aborted_per_partition",
        env: "QUEEN_KAFKA_MAX_ABORTED_PER_PARTITION",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 1_000_000,
        },
    },
    KeySpec {
        name: "kafka_max_transactional_ids",
        env: "QUEEN_KAFKA_MAX_TRANSACTIONAL_IDS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 1_000_000,
        },
    },
    KeySpec {
        name: "kafka_max_open_transactions",
        env: "QUEEN_KAFKA_MAX_OPEN_TRANSACTIONS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 100_000,
        },
    },
    KeySpec {
        name: "kafka_max_partitions_per_transaction",
        env: "QUEEN_KAFKA_MAX_PARTITIONS_PER_TRANSACTION",
        flag: None,
        // A transaction's end must fit one entry, or it can never end and pins the last
        // stable offset for ever (review M2). The key bounds its partitions, its groups and
        // its pending offsets; the end's bound (plan/kafka_txns.rs end_bound) is per
        // partition a marker (160) plus an offset (effect 64 + group id 512 + topic 249 +
        // metadata 4096) = 5081 bytes, plus 3 × (64 + 1024) for the end and re-init. The
        // entry limit is 256 MiB - 64 KiB = 268_369_920, so at most 52_818 partitions:
        // 50_000 leaves room.
        kind: Kind::Uint {
            min: 1,
            max: queenmq_protocol::kafka_txns::MAX_PARTITIONS_PER_TRANSACTION_LIMIT,
        },
    },
    KeySpec {
        name: "kafka_transaction_max_timeout_ms",
        env: "QUEEN_KAFKA_TRANSACTION_MAX_TIMEOUT_MS",
        flag: None,
        // The engine keeps timeouts in a u32 of ms; a day is far past any use.
        kind: Kind::Uint {
            min: 1_000,
            max: 86_400_000,
        },
    },
    KeySpec {
        name: "kafka_transactional_id_expiration_ms",
        env: "QUEEN_KAFKA_TRANSACTIONAL_ID_EXPIRATION_MS",
        flag: None,
        kind: Kind::Uint {
            min: 1_000,
            max: 365 * 86_400_000,
        },
    },
    KeySpec {
        name: "kafka_producer_evict_min_idle_ms",
        env: "QUEEN_KAFKA_PRODUCER_EVICT_MIN_IDLE_MS",
        flag: None,
        // 0 evicts any state at the cap (tests); a day at most, the default expiration.
        kind: Kind::Uint {
            min: 0,
            max: 86_400_000,
        },
    },
    KeySpec {
        name: "kafka_max_prelogin_connections",
        env: "QUEEN_KAFKA_MAX_PRELOGIN_CONNECTIONS",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 100_000,
        },
    },
    KeySpec {
        name: "kafka_max_prelogin_connections_per_ip",
        env: "QUEEN_KAFKA_MAX_PRELOGIN_CONNECTIONS_PER_IP",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 100_000,
        },
    },
    KeySpec {
        name: "http_auth_disabled",
        env: "QUEEN_HTTP_AUTH_DISABLED",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "kafka_fetch_session_slots",
        env: "QUEEN_KAFKA_FETCH_SESSION_SLOTS",
        flag: None,
        // 0 turns sessions off; all sessions together stay within 64 MiB whatever the count.
        kind: Kind::Uint {
            min: 0,
            max: 100_000,
        },
    },
    KeySpec {
        name: "cluster_token",
        env: "QUEEN_CLUSTER_TOKEN",
        flag: None,
        kind: Kind::Secret,
    },
    KeySpec {
        name: "cluster_addr",
        env: "QUEEN_CLUSTER_ADDR",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "node_id",
        env: "QUEEN_NODE_ID",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: u32::MAX as u64,
        },
    },
    KeySpec {
        name: "peers",
        env: "QUEEN_PEERS",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "cluster_join",
        env: "QUEEN_CLUSTER_JOIN",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "peer_http",
        env: "QUEEN_PEER_HTTP",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "peer_kafka",
        env: "QUEEN_PEER_KAFKA",
        flag: None,
        kind: Kind::Text,
    },
    KeySpec {
        name: "cluster_snapshot_catch_up",
        env: "QUEEN_CLUSTER_SNAPSHOT_CATCH_UP",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "cluster_tenant_groups",
        env: "QUEEN_CLUSTER_TENANT_GROUPS",
        flag: None,
        kind: Kind::Bool,
    },
    KeySpec {
        name: "cluster_snapshot_keep_entries",
        env: "QUEEN_CLUSTER_SNAPSHOT_KEEP_ENTRIES",
        flag: None,
        kind: Kind::Uint {
            min: 0,
            max: 1_000_000_000,
        },
    },
    KeySpec {
        name: "cluster_heartbeat_ms",
        env: "QUEEN_CLUSTER_HEARTBEAT_MS",
        flag: None,
        // At most a fifth of the election timeout's maximum (review s17 lead L1).
        kind: Kind::Uint {
            min: 50,
            max: 1_400,
        },
    },
    KeySpec {
        name: "cluster_election_timeout_ms",
        env: "QUEEN_CLUSTER_ELECTION_TIMEOUT_MS",
        flag: None,
        // 4 x this is the write limit, which must stay under the bus's 30 s answer bound so
        // a cut-off leader answers its own 503, not "a stalled disk?" (review s17 C4).
        kind: Kind::Uint {
            min: 150,
            max: 7_000,
        },
    },
    KeySpec {
        name: "forward_max_inflight",
        env: "QUEEN_FORWARD_MAX_INFLIGHT",
        flag: None,
        kind: Kind::Uint {
            min: 1,
            max: 100_000,
        },
    },
];

/// The environment variable naming the config file (the twin of `--config`).
pub(crate) const CONFIG_ENV: &str = "QUEEN_CONFIG";
/// The fallback for `log` when `QUEEN_LOG` is unset.
pub(crate) const RUST_LOG_ENV: &str = "RUST_LOG";
/// The prefix of every variable this module reads.
pub(crate) const ENV_PREFIX: &str = "QUEEN_";

pub(crate) fn spec(name: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|k| k.name == name)
}

pub(crate) fn spec_by_env(env: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|k| k.env == env)
}

/// The known key closest to `input` by edit distance, for "did you mean".
pub(crate) fn closest_key(input: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|k| (levenshtein(input, k.name), k.name))
        .filter(|(d, name)| *d <= (name.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// The known environment variable closest to `input`, for "did you mean".
pub(crate) fn closest_env(input: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|k| k.env)
        .chain(std::iter::once(CONFIG_ENV))
        .map(|env| (levenshtein(input, env), env))
        .filter(|(d, env)| *d <= (env.len() / 4).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, env)| env)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = Vec::with_capacity(b.len() + 1);
        cur.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            let best = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
            cur.push(best);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Whether `name` is one of the variables Kubernetes injects for a Service
/// whose name starts with `queen` (service links): `QUEEN_SERVICE_HOST`,
/// `QUEEN_SERVICE_PORT`, `QUEEN_SERVICE_PORT_<PORTNAME>`, `QUEEN_PORT`,
/// `QUEEN_PORT_6632_TCP`, `QUEEN_PORT_6632_TCP_{PROTO,PORT,ADDR}`, and the
/// same with any infix (`QUEEN_HEADLESS_SERVICE_HOST` for `queen-headless`).
///
/// Such names are skipped without a warning. To keep a real typo from hiding
/// behind this rule, `*_PORT` and `*_PORT_<n>_<proto>` only count when their
/// value has the shape Kubernetes gives them (`tcp://10.0.0.1:6632`).
pub(crate) fn is_kubernetes_service_link(name: &str, value: &str) -> bool {
    let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('_').collect();
    let is_url = |v: &str| {
        ["tcp://", "udp://", "sctp://"]
            .iter()
            .any(|p| v.starts_with(p))
    };
    // ..._SERVICE_HOST, ..._SERVICE_PORT, ..._SERVICE_PORT_<NAME...>
    if let Some(i) = parts.iter().position(|p| *p == "SERVICE") {
        match parts.get(i + 1..) {
            Some(["HOST"]) => return true,
            Some(["PORT", ..]) => return value.parse::<u16>().is_ok(),
            _ => {}
        }
    }
    // ..._PORT = tcp://ip:port and ..._PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]
    for (i, p) in parts.iter().enumerate() {
        if *p != "PORT" {
            continue;
        }
        match parts.get(i + 1..) {
            Some([]) => return is_url(value),
            Some([port, proto]) if is_port(port) && is_proto(proto) => return is_url(value),
            Some([port, proto, "PROTO" | "PORT" | "ADDR"]) if is_port(port) && is_proto(proto) => {
                return true
            }
            _ => {}
        }
    }
    false
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn is_proto(s: &str) -> bool {
    matches!(s, "TCP" | "UDP" | "SCTP")
}
