//! The typed configuration and its validation.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::keys::{self, Kind, GIB, KIB, MIB};

/// The effective configuration of one `queen` process.
///
/// Built by [`super::load`] from defaults, `queen.toml`, `QUEEN_*` variables and
/// flags, then checked by [`Config::validate`]. `deny_unknown_fields` makes a
/// misspelled or removed key fail the start instead of being ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where segments, the state store and checkpoints live.
    pub data_dir: PathBuf,
    /// The native HTTP API listener (`ip:port`; port 0 picks a free port).
    pub http_addr: SocketAddr,
    /// HS256 secret for bearer tokens; `None` turns authentication off.
    pub jwt_secret: Option<Secret>,
    /// The AES-256 key (64 hex digits) that seals the payloads of queues with
    /// `encryptionEnabled`; `None` refuses such queues (docs/configuration.md).
    pub encryption_key: Option<Secret>,
    /// Largest accepted HTTP request body.
    pub max_body_bytes: u64,
    /// Size at which a log segment file is rolled.
    pub segment_bytes: u64,
    /// Whether the log's dead segments are deleted after checkpoints (docs/storage-format.md
    /// "Space reclamation"); while `<data_dir>/RECLAIM_PAUSED` exists none is.
    pub reclaim_enabled: bool,
    /// Whether the compactor copies the live messages of old pinned segments forward so
    /// reclamation can delete them (docs/storage-format.md "Pinning and the compactor");
    /// nothing is copied while reclamation is off either.
    pub compaction_enabled: bool,
    /// Free bytes kept on the data directory's file system: under them, writes that add data
    /// are refused 507 `storage_full` (retriable) until space is freed; 0 turns that off.
    pub min_free_disk_bytes: u64,
    /// Most commands planned into one group commit.
    pub commit_max_batch: u64,
    /// Most payload bytes planned into one group commit.
    pub commit_max_bytes: u64,
    /// Memory for recently committed log entries, so pops of fresh messages skip the disk.
    pub entry_cache_bytes: u64,
    /// Seconds between state checkpoints into the state store.
    pub checkpoint_interval_secs: u64,
    /// Milliseconds between the starts of two retention sweeps.
    pub retention_interval_ms: u64,
    /// Seconds SIGTERM waits for the drain before aborting what is left.
    pub shutdown_grace_secs: u64,
    /// When set, bearer tokens must carry this audience (`aud`).
    pub jwt_audience: Option<String>,
    /// Whether `/metrics` and `/metrics/prometheus` need a token; unset means "yes when
    /// `jwt_secret` is set" (see [`Config::metrics_need_token`]).
    pub metrics_require_auth: Option<bool>,
    /// A request head must arrive within this many ms.
    pub http_header_timeout_ms: u64,
    /// A request body must arrive whole within this many ms.
    pub http_body_timeout_ms: u64,
    /// A kept-alive connection idle this many ms is closed.
    pub http_idle_timeout_ms: u64,
    /// Most HTTP connections served at once; past it, accepts wait.
    pub http_max_connections: u64,
    /// Most items in one push (and across the push operations of one transaction).
    pub max_push_items: u64,
    /// Most acknowledgements in one ack batch.
    pub max_ack_items: u64,
    /// Most operations in one transaction.
    pub max_txn_ops: u64,
    /// Transaction ids each group's dedup hot table keeps in memory; older ones of the window
    /// go to the id files (`<data_dir>/ids`, issue 12). 0: derived from the memory budget
    /// (`Memory::dedup_hot_ids`). Always on: there is no "off".
    pub dedup_hot_ids: u64,
    /// Bytes of the node's dedup window filters, all groups together: each group draws half
    /// of what is left at its first spill; 0: an eighth of the memory budget, at most 512 MiB.
    pub dedup_filter_bytes: u64,
    /// Largest trace `data`, as JSON text.
    pub max_trace_bytes: u64,
    /// Partitions one push or transaction may create (more is refused whole, 413).
    pub max_new_partitions_per_request: u64,
    /// Long-poll pops parked at once on this node (more are answered 503).
    pub max_long_polls: u64,
    /// State rows one streams query may hold (every partition's); a cycle past it is 413.
    pub streams_state_max_keys: u64,
    /// Bytes one streams query's state rows may hold (as the KV cap counts them).
    pub streams_state_max_bytes: u64,
    /// Ephemeral (RAM) queues answer; off: every ephemeral route answers 503
    /// `ephemeral_disabled`.
    pub ephemeral_enabled: bool,
    /// Bytes all ephemeral queues of this node hold at most; past it pushes get 503
    /// `ephemeral_unavailable`.
    pub ephemeral_max_bytes: u64,
    /// Bytes one tenant's ephemeral queues hold at most (403 `ephemeral_quota_exceeded`
    /// past it); 0: no share, one tenant may use the whole node cap.
    pub ephemeral_tenant_max_bytes: u64,
    /// An ephemeral queue created by a push or pop (never configured) is removed after this
    /// many seconds without use.
    pub ephemeral_implicit_idle_s: u64,
    /// Seconds between two samples of the process (CPU, memory, requests) kept for
    /// `/api/v1/analytics/system-metrics` and `/worker-metrics`.
    pub metrics_sample_s: u64,
    /// Samples kept in memory; the oldest goes past it (history is lost on restart).
    pub metrics_history_samples: u64,
    /// Groups this node runs at most, `default` included: a token naming one more tenant is
    /// refused (403: retrying cannot help, the operator raises the cap).
    pub max_tenants: u64,
    /// Log lines as JSON objects instead of human text.
    pub log_json: bool,
    /// Whether the heap may use transparent huge pages (memory/huge_pages.rs): off by
    /// default, since a 2 MiB page stays resident whole while one small block lives in it.
    pub transparent_huge_pages: bool,
    /// `tracing` filter directives, e.g. `info` or `info,queenmq_raft=debug`.
    pub log: String,
    /// Start even when recovery finds acknowledged data damaged or missing, dropping it (and
    /// logging exactly what at ERROR). Off: such a start is refused. docs/storage-format.md.
    #[serde(default)]
    pub accept_data_loss: bool,
    /// The node's memory budget; 0 derives it from the cgroup limit or RAM (docs/memory.md).
    pub memory_limit_bytes: u64,
    /// Bytes per second a client must read its answer at once the door waits on it; 0: off.
    pub http_min_write_rate_bytes: u64,
    /// The waiting time over which `http_min_write_rate_bytes` is measured, in ms.
    pub http_write_rate_window_ms: u64,
    /// Connections beyond `http_max_connections` kept for health probes and metrics.
    pub http_probe_reserve_connections: u64,
    /// Whether the Kafka listener runs. While `jwt_secret` is set it runs only with SASL
    /// users (`kafka_sasl_users_file`): it must not be a way around the HTTP API's
    /// authentication.
    pub kafka_enabled: bool,
    /// The Kafka listener (`ip:port`; port 0 picks a free port).
    pub kafka_addr: SocketAddr,
    /// The `host:port` Metadata tells clients to connect to; unset: `kafka_addr`, with
    /// 127.0.0.1 for an unspecified IP and the port actually bound.
    pub kafka_advertised_addr: Option<String>,
    /// Largest Kafka request frame, checked before the frame is read.
    pub kafka_max_request_bytes: u64,
    /// Partitions a topic shows at least, and gets when Metadata auto-creates it.
    pub kafka_default_partitions: u64,
    /// PEM certificate chain of the HTTP listener; with `tls_key_file` it speaks HTTPS only.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the HTTP listener.
    pub tls_key_file: Option<PathBuf>,
    /// PEM certificate chain of the Kafka listener; with `kafka_tls_key_file` it speaks
    /// TLS only (clients use SSL or SASL_SSL).
    pub kafka_tls_cert_file: Option<PathBuf>,
    /// PEM private key of the Kafka listener.
    pub kafka_tls_key_file: Option<PathBuf>,
    /// The Kafka port's SASL users (TOML, `[[user]]` tables; docs/kafka-compat.md
    /// "Security"). When it names any, every Kafka connection must log in.
    pub kafka_sasl_users_file: Option<PathBuf>,
    /// A Kafka producer id idle this long is forgotten (Kafka's `producer.id.expiration.ms`).
    pub kafka_producer_id_expiration_ms: u64,
    /// Producer states a tenant keeps at most; past it a new producer's first batch evicts
    /// the state idle longest, or is refused (retriable) when none is idle long enough.
    pub kafka_max_producer_ids: u64,
    /// The least idleness that lets a producer state be evicted at the cap.
    pub kafka_producer_evict_min_idle_ms: u64,
    /// Aborted Kafka transactions one partition remembers (its index in RAM,
    /// docs/kafka-transactions.md); an abort that would add one past it is refused, retriable.
    pub kafka_max_aborted_per_partition: u64,
    /// Transactional ids a tenant keeps (Kafka's coordinator rows); past it a new id's
    /// InitProducerId is refused, retriable.
    pub kafka_max_transactional_ids: u64,
    /// Transactions open at once per tenant; past it a new one is refused, retriable.
    pub kafka_max_open_transactions: u64,
    /// Partitions (and groups, and pending offsets) one transaction may hold.
    pub kafka_max_partitions_per_transaction: u64,
    /// The longest `transaction.timeout.ms` a producer may ask (Kafka's
    /// `transaction.max.timeout.ms`).
    pub kafka_transaction_max_timeout_ms: u64,
    /// A transactional id with no open transaction and nothing done this long is forgotten
    /// (Kafka's `transactional.id.expiration.ms`).
    pub kafka_transactional_id_expiration_ms: u64,
    /// Kafka connections that have not finished TLS and SASL login yet, at once (only with
    /// TLS or SASL on); one more is closed at accept.
    pub kafka_max_prelogin_connections: u64,
    /// Of those, from one source IP.
    pub kafka_max_prelogin_connections_per_ip: u64,
    /// Says that the HTTP API runs without authentication on purpose while the Kafka port
    /// asks SASL logins (`kafka_sasl_users_file` set, `jwt_secret` not): without it that
    /// start is refused, as anyone reaching the HTTP port would act as admin on the tenant
    /// the Kafka users' data lives in.
    pub http_auth_disabled: bool,
    /// Kafka fetch sessions (KIP-227) the node keeps at most (Kafka's
    /// `max.incremental.fetch.session.cache.slots`); 0 answers every fetch sessionless.
    pub kafka_fetch_session_slots: u64,
    /// The shared secret of the nodes of a cluster (at least 32 bytes); unset: single node.
    pub cluster_token: Option<Secret>,
    /// This node's Raft listener (the cluster port), with peers set.
    pub cluster_addr: Option<SocketAddr>,
    /// This node's id in `peers`; 1 for a single node.
    pub node_id: u64,
    /// Every member of the cluster as `id=host:port` (Raft listeners), comma-separated.
    pub peers: Option<String>,
    /// Start as a node joining a running group: never initialise the membership, wait to be
    /// added (docs/cluster.md "Membership operations"). A wiped node must start with it, or
    /// the lowest id of `peers` would found a second group.
    #[serde(default)]
    pub cluster_join: bool,
    /// Each member's HTTP address as `id=http://host:port`, comma-separated: what a follower
    /// names as `leaderUrl` when it refuses a write. Optional; ids must be in `peers`.
    pub peer_http: Option<String>,
    /// Each member's Kafka advertised address as `id=host:port`, comma-separated: the brokers
    /// a member's Kafka Metadata lists, and where it sends Kafka clients for the leader.
    /// Optional; ids must be in `peers`.
    pub peer_kafka: Option<String>,
    /// A cluster member catches a peer that fell behind its reclaimed log up by snapshot (the
    /// durable checkpoint and its records), and reclaims its log under a multi-node
    /// membership behind openraft's purge; false: it never reclaims while clustered (the
    /// behaviour before session 28). On by default since session 28. Ignored on a single
    /// node. Refused together with `cluster_tenant_groups`.
    #[serde(default)]
    pub cluster_snapshot_catch_up: bool,
    /// With `cluster_snapshot_catch_up`, the log entries kept below the snapshot: a peer less
    /// far behind is caught up by appends.
    pub cluster_snapshot_keep_entries: u64,
    /// A cluster member serves tenants other than `default`, each in a Raft group of its own
    /// declared through the `default` group (docs/cluster.md "Tenants"); on by default since
    /// session 33. False: a clustered start is refused while `<data_dir>/tenants` holds a
    /// group and other tenants are answered 501 (a roll from an older build pins it false
    /// until every node runs this one: docs/deploy.md). Ignored on a single node.
    #[serde(default)]
    pub cluster_tenant_groups: bool,
    /// A cluster member's Raft heartbeat, which openraft also takes as the whole timeout of
    /// one append to a follower (its fsync included): it must exceed the followers' worst
    /// fsync. Ignored on a single node.
    pub cluster_heartbeat_ms: u64,
    /// A cluster member's election timeout: a follower that hears nothing from the leader for
    /// a random time between this and twice this calls an election; a leader not acknowledged
    /// by a majority for this long stops planning. Ignored on a single node.
    pub cluster_election_timeout_ms: u64,
    /// Requests a cluster follower relays to the leader at once; past it 503 `unavailable`.
    /// Ignored on a single node.
    pub forward_max_inflight: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./queen-data"),
            http_addr: SocketAddr::from(([0, 0, 0, 0], 6632)),
            jwt_secret: None,
            encryption_key: None,
            max_body_bytes: 64 * MIB,
            segment_bytes: 64 * MIB,
            reclaim_enabled: true,
            compaction_enabled: true,
            min_free_disk_bytes: 256 * MIB,
            commit_max_batch: 4_096,
            commit_max_bytes: 4 * MIB,
            entry_cache_bytes: 64 * MIB,
            checkpoint_interval_secs: 30,
            retention_interval_ms: 1_000,
            shutdown_grace_secs: 25,
            jwt_audience: None,
            metrics_require_auth: None,
            http_header_timeout_ms: 10_000,
            http_body_timeout_ms: 30_000,
            http_idle_timeout_ms: 60_000,
            http_max_connections: 10_000,
            max_push_items: 10_000,
            max_ack_items: 10_000,
            max_txn_ops: 10_000,
            // Today's behaviour (every id of the window in memory) until the spill runs off
            // the engine's lock and the filters are sized per group (review s26 dedup H1-H3).
            dedup_hot_ids: 0,
            dedup_filter_bytes: 0,
            max_trace_bytes: 64 * KIB,
            max_new_partitions_per_request: 10_000,
            max_long_polls: 20_000,
            streams_state_max_keys: 1_000_000,
            streams_state_max_bytes: 64 * MIB,
            ephemeral_enabled: true,
            ephemeral_max_bytes: 256 * MIB,
            ephemeral_tenant_max_bytes: 0,
            ephemeral_implicit_idle_s: 300,
            metrics_sample_s: 10,
            metrics_history_samples: 8_640,
            max_tenants: 64,
            log_json: false,
            transparent_huge_pages: true,
            log: "info".to_owned(),
            accept_data_loss: false,
            memory_limit_bytes: 0,
            http_min_write_rate_bytes: 16 * KIB,
            http_write_rate_window_ms: 10_000,
            http_probe_reserve_connections: 16,
            kafka_enabled: true,
            kafka_addr: SocketAddr::from(([0, 0, 0, 0], 9092)),
            kafka_advertised_addr: None,
            tls_cert_file: None,
            tls_key_file: None,
            kafka_tls_cert_file: None,
            kafka_tls_key_file: None,
            kafka_sasl_users_file: None,
            kafka_max_request_bytes: 100 * MIB,
            kafka_default_partitions: 1,
            kafka_producer_id_expiration_ms:
                queenmq_protocol::kafka_producers::DEFAULT_PRODUCER_ID_EXPIRATION_MS,
            kafka_max_producer_ids: queenmq_protocol::kafka_producers::DEFAULT_MAX_PRODUCER_IDS,
            kafka_max_aborted_per_partition:
                queenmq_protocol::kafka_txns::DEFAULT_MAX_ABORTED_PER_PARTITION,
            kafka_max_transactional_ids:
                queenmq_protocol::kafka_txns::DEFAULT_MAX_TRANSACTIONAL_IDS,
            kafka_max_open_transactions:
                queenmq_protocol::kafka_txns::DEFAULT_MAX_OPEN_TRANSACTIONS,
            kafka_max_partitions_per_transaction:
                queenmq_protocol::kafka_txns::DEFAULT_MAX_PARTITIONS_PER_TRANSACTION,
            kafka_transaction_max_timeout_ms: u64::from(
                queenmq_protocol::kafka_txns::DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
            ),
            kafka_transactional_id_expiration_ms:
                queenmq_protocol::kafka_txns::DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
            kafka_producer_evict_min_idle_ms:
                queenmq_protocol::kafka_producers::DEFAULT_PRODUCER_EVICT_MIN_IDLE_MS,
            kafka_max_prelogin_connections: 64,
            kafka_max_prelogin_connections_per_ip: 16,
            http_auth_disabled: false,
            kafka_fetch_session_slots: 1_000,
            cluster_token: None,
            cluster_addr: None,
            node_id: 1,
            peers: None,
            cluster_join: false,
            cluster_snapshot_catch_up: true,
            cluster_tenant_groups: true,
            cluster_snapshot_keep_entries: queenmq_raft::KEEP_BELOW_SNAPSHOT,
            peer_http: None,
            peer_kafka: None,
            cluster_heartbeat_ms: 500,
            cluster_election_timeout_ms: 5_000,
            forward_max_inflight: 1_024,
        }
    }
}

impl Config {
    /// Checks every value against its allowed range and shape.
    ///
    /// Returns the first problem found, naming the key.
    pub fn validate(&self) -> Result<(), ValueError> {
        for spec in keys::KEYS {
            if let Kind::Uint { min, max } = spec.kind {
                let value = self.uint(spec.name);
                if !(min..=max).contains(&value) {
                    return Err(ValueError::OutOfRange {
                        key: spec.name,
                        value,
                        min,
                        max,
                    });
                }
            }
        }
        let least_hot = queenmq_engine::state::MIN_HOT_IDS as u64;
        if self.dedup_hot_ids != 0 && self.dedup_hot_ids < least_hot {
            return Err(ValueError::Bad {
                key: "dedup_hot_ids",
                message: format!(
                    "= {} is below {least_hot} (a table that small writes a file per push); \
                     use 0 to derive it from the memory budget",
                    self.dedup_hot_ids
                ),
            });
        }
        if self.dedup_filter_bytes != 0 {
            let f = queenmq_engine::dedup_filter::FilterConfig {
                bytes: self.dedup_filter_bytes,
                ..Default::default()
            };
            if let Err(e) = f.validate() {
                return Err(ValueError::Bad {
                    key: "dedup_filter_bytes",
                    message: format!("= {}: {e}", self.dedup_filter_bytes),
                });
            }
        }
        if self.memory_limit_bytes != 0 && self.memory_limit_bytes < 32 * MIB {
            return Err(ValueError::Bad {
                key: "memory_limit_bytes",
                message: format!(
                    "= {} is below the 32 MiB a broker needs; use 0 to derive it",
                    self.memory_limit_bytes
                ),
            });
        }
        if self.memory_limit_bytes != 0 {
            crate::memory::budget::Budget::derive(self.memory_limit_bytes, None, None)
                .check_metrics_ring(
                    self.metrics_history_samples,
                    crate::node_metrics::SAMPLE_BYTES,
                )
                .map_err(|message| ValueError::Bad {
                    key: "metrics_history_samples",
                    message,
                })?;
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(ValueError::Bad {
                key: "data_dir",
                message: "must not be empty".into(),
            });
        }
        if let Some(secret) = &self.jwt_secret {
            if secret.expose().is_empty() {
                return Err(ValueError::Bad {
                    key: "jwt_secret",
                    message: "is empty; leave it unset to run without authentication".into(),
                });
            }
        }
        if let Some(key) = &self.encryption_key {
            crate::encryption::parse_key(key.expose()).map_err(|message| ValueError::Bad {
                key: "encryption_key",
                message,
            })?;
        }
        self.cluster()?;
        if let Some(aud) = &self.jwt_audience {
            if aud.trim().is_empty() {
                return Err(ValueError::Bad {
                    key: "jwt_audience",
                    message: "is empty; leave it unset to accept tokens with any audience".into(),
                });
            }
        }
        if let Some(adv) = &self.kafka_advertised_addr {
            if split_host_port(adv).is_none() {
                return Err(ValueError::Bad {
                    key: "kafka_advertised_addr",
                    message: format!("must be host:port with a port above 0, got {adv:?}"),
                });
            }
        }
        for (cert, key, cert_name, key_name) in [
            (
                &self.tls_cert_file,
                &self.tls_key_file,
                "tls_cert_file",
                "tls_key_file",
            ),
            (
                &self.kafka_tls_cert_file,
                &self.kafka_tls_key_file,
                "kafka_tls_cert_file",
                "kafka_tls_key_file",
            ),
        ] {
            match (cert, key) {
                (Some(_), None) => {
                    return Err(ValueError::Bad {
                        key: cert_name,
                        message: format!("is set without {key_name}; TLS needs both"),
                    })
                }
                (None, Some(_)) => {
                    return Err(ValueError::Bad {
                        key: key_name,
                        message: format!("is set without {cert_name}; TLS needs both"),
                    })
                }
                _ => {}
            }
        }
        match (
            self.jwt_secret.is_some(),
            self.http_auth_disabled,
            self.kafka_enabled && self.kafka_sasl_users_file.is_some(),
        ) {
            (true, true, _) => {
                return Err(ValueError::Bad {
                    key: "http_auth_disabled",
                    message: "is true while jwt_secret is set; set one or the other".into(),
                })
            }
            (false, false, true) => {
                return Err(ValueError::Bad {
                    key: "kafka_sasl_users_file",
                    message: "is set but jwt_secret is not: the HTTP API would serve anyone \
                              as admin, on the tenants the Kafka users act in; set jwt_secret, \
                              or http_auth_disabled = true if the HTTP port is deliberately \
                              open (e.g. reachable from localhost only)"
                        .into(),
                })
            }
            _ => {}
        }
        if self.log.trim().is_empty() {
            return Err(ValueError::Bad {
                key: "log",
                message: "must not be empty (try \"info\")".into(),
            });
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log) {
            return Err(ValueError::Bad {
                key: "log",
                message: format!("is not a valid filter ({e}): {:?}", self.log),
            });
        }
        Ok(())
    }

    /// [`Self::retention_interval_ms`] as a duration.
    pub fn retention_interval(&self) -> Duration {
        Duration::from_millis(self.retention_interval_ms)
    }

    /// [`Self::checkpoint_interval_secs`] as a duration.
    pub fn checkpoint_interval(&self) -> Duration {
        Duration::from_secs(self.checkpoint_interval_secs)
    }

    /// [`Self::shutdown_grace_secs`] as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }

    /// The host and port Kafka clients are told to connect to, given the port the listener
    /// actually bound (`kafka_addr` may name port 0).
    pub fn kafka_advertised(&self, bound_port: u16) -> (String, u16) {
        if let Some((host, port)) = self
            .kafka_advertised_addr
            .as_deref()
            .and_then(split_host_port)
        {
            return (host, port);
        }
        let ip = self.kafka_addr.ip();
        // Clients cannot connect to 0.0.0.0 or [::]; loopback is right for one machine and
        // an explicit kafka_advertised_addr is needed beyond it. IPv4 first: librdkafka
        // resolves `localhost` to ::1 first (spec/kafka-port.md "Mapping").
        let host = if ip.is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            ip.to_string()
        };
        (host, bound_port)
    }

    /// Whether the metrics pages need a token: as configured, else exactly when authentication
    /// is on (they name every queue and consumer group, which a token-less caller should not
    /// learn from a broker that otherwise asks for one).
    pub fn metrics_need_token(&self) -> bool {
        self.metrics_require_auth
            .unwrap_or(self.jwt_secret.is_some())
    }

    /// The value of a `Kind::Uint` key by name (0 for any other name).
    pub(crate) fn uint(&self, name: &str) -> u64 {
        match name {
            "max_body_bytes" => self.max_body_bytes,
            "segment_bytes" => self.segment_bytes,
            "min_free_disk_bytes" => self.min_free_disk_bytes,
            "commit_max_batch" => self.commit_max_batch,
            "commit_max_bytes" => self.commit_max_bytes,
            "entry_cache_bytes" => self.entry_cache_bytes,
            "checkpoint_interval_secs" => self.checkpoint_interval_secs,
            "retention_interval_ms" => self.retention_interval_ms,
            "shutdown_grace_secs" => self.shutdown_grace_secs,
            "http_header_timeout_ms" => self.http_header_timeout_ms,
            "http_body_timeout_ms" => self.http_body_timeout_ms,
            "http_idle_timeout_ms" => self.http_idle_timeout_ms,
            "http_max_connections" => self.http_max_connections,
            "max_push_items" => self.max_push_items,
            "max_ack_items" => self.max_ack_items,
            "max_txn_ops" => self.max_txn_ops,
            "dedup_hot_ids" => self.dedup_hot_ids,
            "dedup_filter_bytes" => self.dedup_filter_bytes,
            "max_trace_bytes" => self.max_trace_bytes,
            "max_new_partitions_per_request" => self.max_new_partitions_per_request,
            "max_long_polls" => self.max_long_polls,
            "streams_state_max_keys" => self.streams_state_max_keys,
            "streams_state_max_bytes" => self.streams_state_max_bytes,
            "ephemeral_max_bytes" => self.ephemeral_max_bytes,
            "ephemeral_tenant_max_bytes" => self.ephemeral_tenant_max_bytes,
            "ephemeral_implicit_idle_s" => self.ephemeral_implicit_idle_s,
            "metrics_sample_s" => self.metrics_sample_s,
            "metrics_history_samples" => self.metrics_history_samples,
            "max_tenants" => self.max_tenants,
            "memory_limit_bytes" => self.memory_limit_bytes,
            "http_min_write_rate_bytes" => self.http_min_write_rate_bytes,
            "http_write_rate_window_ms" => self.http_write_rate_window_ms,
            "http_probe_reserve_connections" => self.http_probe_reserve_connections,
            "kafka_max_request_bytes" => self.kafka_max_request_bytes,
            "kafka_default_partitions" => self.kafka_default_partitions,
            "kafka_producer_id_expiration_ms" => self.kafka_producer_id_expiration_ms,
            "kafka_max_producer_ids" => self.kafka_max_producer_ids,
            "kafka_max_aborted_per_partition" => self.kafka_max_aborted_per_partition,
            "kafka_max_transactional_ids" => self.kafka_max_transactional_ids,
            "kafka_max_open_transactions" => self.kafka_max_open_transactions,
            "kafka_max_partitions_per_transaction" => self.kafka_max_partitions_per_transaction,
            "kafka_transaction_max_timeout_ms" => self.kafka_transaction_max_timeout_ms,
            "kafka_transactional_id_expiration_ms" => self.kafka_transactional_id_expiration_ms,
            "kafka_producer_evict_min_idle_ms" => self.kafka_producer_evict_min_idle_ms,
            "kafka_max_prelogin_connections" => self.kafka_max_prelogin_connections,
            "kafka_max_prelogin_connections_per_ip" => self.kafka_max_prelogin_connections_per_ip,
            "kafka_fetch_session_slots" => self.kafka_fetch_session_slots,
            "node_id" => self.node_id,
            "cluster_heartbeat_ms" => self.cluster_heartbeat_ms,
            "cluster_snapshot_keep_entries" => self.cluster_snapshot_keep_entries,
            "cluster_election_timeout_ms" => self.cluster_election_timeout_ms,
            "forward_max_inflight" => self.forward_max_inflight,
            _ => 0,
        }
    }

    /// The value of a key as `queen config print` shows it (TOML syntax, the
    /// secret replaced by `"<set>"`, `None` when unset), plus a readable size.
    pub(crate) fn display_value(&self, name: &str) -> (Option<String>, Option<String>) {
        match name {
            "data_dir" => (
                Some(toml_string(&self.data_dir.display().to_string())),
                None,
            ),
            "http_addr" => (Some(toml_string(&self.http_addr.to_string())), None),
            "jwt_secret" => (self.jwt_secret.as_ref().map(|_| toml_string("<set>")), None),
            "encryption_key" => (
                self.encryption_key.as_ref().map(|_| toml_string("<set>")),
                None,
            ),
            "log_json" => (Some(self.log_json.to_string()), None),
            "transparent_huge_pages" => (Some(self.transparent_huge_pages.to_string()), None),
            "jwt_audience" => (self.jwt_audience.as_deref().map(toml_string), None),
            "cluster_token" => (
                self.cluster_token.as_ref().map(|_| toml_string("<set>")),
                None,
            ),
            "cluster_addr" => (self.cluster_addr.map(|a| toml_string(&a.to_string())), None),
            "peers" => (self.peers.as_deref().map(toml_string), None),
            "peer_http" => (self.peer_http.as_deref().map(toml_string), None),
            "peer_kafka" => (self.peer_kafka.as_deref().map(toml_string), None),
            "metrics_require_auth" => (self.metrics_require_auth.map(|b| b.to_string()), None),
            "log" => (Some(toml_string(&self.log)), None),
            "accept_data_loss" => (Some(self.accept_data_loss.to_string()), None),
            "cluster_join" => (Some(self.cluster_join.to_string()), None),
            "cluster_snapshot_catch_up" => (Some(self.cluster_snapshot_catch_up.to_string()), None),
            "cluster_tenant_groups" => (Some(self.cluster_tenant_groups.to_string()), None),
            "kafka_enabled" => (Some(self.kafka_enabled.to_string()), None),
            "reclaim_enabled" => (Some(self.reclaim_enabled.to_string()), None),
            "compaction_enabled" => (Some(self.compaction_enabled.to_string()), None),
            "http_auth_disabled" => (Some(self.http_auth_disabled.to_string()), None),
            "ephemeral_enabled" => (Some(self.ephemeral_enabled.to_string()), None),
            "kafka_addr" => (Some(toml_string(&self.kafka_addr.to_string())), None),
            "kafka_advertised_addr" => {
                (self.kafka_advertised_addr.as_deref().map(toml_string), None)
            }
            "tls_cert_file" => (path_value(&self.tls_cert_file), None),
            "tls_key_file" => (path_value(&self.tls_key_file), None),
            "kafka_tls_cert_file" => (path_value(&self.kafka_tls_cert_file), None),
            "kafka_tls_key_file" => (path_value(&self.kafka_tls_key_file), None),
            "kafka_sasl_users_file" => (path_value(&self.kafka_sasl_users_file), None),
            other => {
                let n = self.uint(other);
                (Some(n.to_string()), human_bytes(other, n))
            }
        }
    }
}

/// `host:port` (an IPv6 host in brackets) with a port above 0.
pub(super) fn split_host_port(s: &str) -> Option<(String, u16)> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    Some((host.to_owned(), port))
}

fn path_value(p: &Option<PathBuf>) -> Option<String> {
    p.as_ref().map(|p| toml_string(&p.display().to_string()))
}

fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn human_bytes(name: &str, n: u64) -> Option<String> {
    if !name.ends_with("_bytes") {
        return None;
    }
    // The units are powers of two: "a whole number of them" is a mask test.
    let whole = |unit: u64| n >= unit && n & (unit - 1) == 0;
    let (unit, div) = if whole(GIB) {
        ("GiB", GIB)
    } else if whole(MIB) {
        ("MiB", MIB)
    } else if whole(KIB) {
        ("KiB", KIB)
    } else {
        return None;
    };
    Some(format!("{} {unit}", n / div))
}

/// A value that must never reach a log line or `Debug` output.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that needs it (token checks).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A value that parsed but is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    #[error("`{key}` = {value} is out of range {min}..={max}")]
    OutOfRange {
        key: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error("`{key}` {message}")]
    Bad { key: &'static str, message: String },
}
