//! The Kafka door of QueenMQ (spec/kafka-port.md): Kafka clients connect to port 9092 and
//! their requests become the same bus commands the Queen HTTP API sends.
//!
//! One task per connection reads a frame, answers it, then reads the next, so answers leave
//! in request order as the protocol requires. Requests and record batches are decoded by
//! [`wire`] and [`records`] with every client-sent count checked before use; responses are
//! encoded by the `kafka-protocol` crate.
//!
//! With users configured, a connection logs in with SASL first ([`sasl`]) and then acts as
//! its user; the listener may also speak TLS ([`Security`]).
//!
//! This slice serves ApiVersions, Metadata, Produce, ListOffsets, Fetch, the classic
//! consumer-group APIs, CreateTopics, DeleteTopics, CreatePartitions and DescribeConfigs
//! (docs/kafka-compat.md).

pub mod admin;
pub mod answer_room;
pub mod api_versions;
pub mod cluster;
pub mod codecs;
pub mod collisions;
#[cfg(test)]
mod collisions_tests;
pub mod connection;
pub mod errors;
pub mod fetch;
pub mod fetch_sessions;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod group;
pub mod header;
pub mod init_producer_id;
pub mod list_offsets;
pub mod mapping;
pub mod metadata;
pub mod offset_reads;
pub mod prelogin;
pub mod produce;
pub mod quiet_log;
pub mod records;
pub mod sasl;
#[cfg(test)]
mod test_door;
pub mod topics;
pub mod txn;
pub mod unmapping;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use queenmq_protocol::{Bus, RequestCtx};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// What the listener needs to know; the broker fills it from its configuration.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// This broker's node id in Metadata answers.
    pub node_id: i32,
    /// The host clients are told to connect to.
    pub advertised_host: String,
    pub advertised_port: u16,
    /// Largest request frame; a longer announced length closes the connection unread.
    pub max_request_bytes: usize,
    /// Partitions a topic shows at least (and auto-creation gives it).
    pub default_partitions: u32,
    /// Idempotent producers idle this long are forgotten (`kafka_producer_id_expiration_ms`).
    pub producer_id_expiration_ms: u64,
    /// Producer states kept at most (`kafka_max_producer_ids`).
    pub max_producer_ids: u64,
    /// Producer states younger than this are never evicted at the cap
    /// (`kafka_producer_evict_min_idle_ms`).
    pub producer_evict_min_idle_ms: u64,
    /// The transaction coordinator's bounds (`kafka_transaction_max_timeout_ms` and the
    /// caps of docs/kafka-transactions.md).
    pub txn_limits: queenmq_protocol::kafka_txns::TxnLimits,
    /// Records one Produce request may carry (the HTTP door's `max_push_items`).
    pub max_records: usize,
    /// Connections served at once; one more is closed at accept.
    pub max_connections: usize,
    /// Of those, connections that have not finished TLS and login yet, at once
    /// (`kafka_max_prelogin_connections`); only with TLS or SASL on.
    pub max_prelogin_connections: usize,
    /// Of those, from one source IP (`kafka_max_prelogin_connections_per_ip`).
    pub max_prelogin_per_ip: usize,
    /// Request bytes held by all connections at once (frames being read or answered): a
    /// frame waits for room before its body is read. At least `max_request_bytes`.
    pub inflight_bytes: usize,
    /// Room for the big admin answers being written (DescribeProducers,
    /// DescribeTransactions; [`answer_room`]), out of the memory budget's connections share.
    pub answer_bytes: usize,
    /// A connection with no request for this long is closed (Kafka's
    /// `connections.max.idle.ms` default).
    pub idle_timeout: Duration,
    /// A frame's body must arrive, and an answer be taken by the client, within this.
    pub io_timeout: Duration,
    /// A TLS handshake, and then a SASL login, must each end within this (a connection
    /// slot is held meanwhile).
    pub handshake_timeout: Duration,
    /// Who the requests of a connection act as when no SASL users are configured (the
    /// broker then starts the port only with HTTP authentication off, with an open context).
    pub ctx: RequestCtx,
    /// The data directory, shown as the broker's one log dir (DescribeLogDirs).
    pub log_dir: String,
    /// Fetch sessions kept at most (`kafka_fetch_session_slots`; 0: none, every fetch is
    /// answered sessionless).
    pub fetch_session_slots: usize,
    /// The cluster this node is a member of (`node_id` is then its Raft node id); `None` on
    /// a single node, whose answers name this node alone.
    pub cluster: Option<Arc<dyn cluster::ClusterView>>,
}

/// How connections are secured: TLS on the socket, SASL logins on top.
#[derive(Default, Clone)]
pub struct Security {
    /// Every connection speaks TLS first; the handshake must end within `handshake_timeout`.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// When set, every connection logs in as one of these users before anything else.
    pub users: Option<Arc<sasl::Users>>,
}

/// What every connection shares.
pub struct Shared {
    pub bus: Arc<dyn Bus>,
    pub cfg: Arc<KafkaConfig>,
    /// Room for request bytes, in KiB (`inflight_bytes`).
    pub inflight: Arc<Semaphore>,
    /// Room for big answers (`answer_bytes`).
    pub answers: Arc<answer_room::AnswerRoom>,
    /// Each tenant's group coordinator.
    pub tenants: group::Tenants,
    pub users: Option<Arc<sasl::Users>>,
    /// PLAIN password checks running at once.
    pub kdf: sasl::kdf::KdfLimit,
    /// Delays of failed logins per source IP.
    pub backoff: sasl::backoff::Backoff,
    /// Failed logins: their counter and rate-limited log.
    pub auth_failures: sasl::failures::FailureLog,
    /// The node's fetch sessions (KIP-227), each its user's.
    pub fetch_sessions: Arc<fetch_sessions::FetchSessions>,
    /// Why connections that had not logged in closed (bad frames, failed TLS handshakes):
    /// rate-limited, as strangers cause these at will.
    pub strangers: quiet_log::QuietLog,
}

impl Shared {
    /// A connection's door acting as `ctx`.
    pub fn door(&self, ctx: RequestCtx) -> Door {
        Door {
            bus: self.bus.clone(),
            cfg: self.cfg.clone(),
            inflight: self.inflight.clone(),
            answers: self.answers.clone(),
            groups: self.tenants.get(&ctx.tenant),
            fetch_sessions: self.fetch_sessions.clone(),
            sasl: self.users.is_some(),
            ctx,
        }
    }

    /// The door of a connection logged in as `user`: its tenant, its roles.
    pub fn user_door(&self, user: &sasl::User) -> Door {
        self.door(RequestCtx {
            tenant: user.tenant.clone(),
            principal: Some(user.name.clone()),
            access: queenmq_protocol::Access::Roles(user.roles.clone()),
        })
    }
}

/// One connection's view: the shared state and who it acts as.
pub struct Door {
    pub bus: Arc<dyn Bus>,
    pub cfg: Arc<KafkaConfig>,
    /// Who this connection's requests act as (tenant and roles).
    pub ctx: RequestCtx,
    /// Room for request bytes, in KiB (`inflight_bytes`).
    pub inflight: Arc<Semaphore>,
    /// Room for big answers (`answer_bytes`), held until they are written.
    pub answers: Arc<answer_room::AnswerRoom>,
    /// Consumer group membership of the connection's tenant (in memory; offsets and
    /// generations are engine state).
    pub groups: Arc<group::Coordinator>,
    /// The node's fetch sessions; a connection reaches only its own user's.
    pub fetch_sessions: Arc<fetch_sessions::FetchSessions>,
    /// Whether logins are required (ApiVersions then lists the SASL APIs).
    pub sasl: bool,
}

impl Door {
    /// Whether this connection's user holds the role `row` asks. The bus checks every
    /// command again; the admin and group APIs ask first so that a validate-only request, a
    /// change to nothing, or a join (minted in the coordinator's own context) is refused too.
    pub fn may(&self, row: &queenmq_protocol::CommandMeta) -> bool {
        self.ctx.authorize(row).is_ok()
    }

    /// The connection's tenant's cluster topology; `None` when its group is not clustered.
    pub fn topology(&self) -> Option<cluster::Topology> {
        self.cfg.cluster.as_ref()?.topology(&self.ctx.tenant)
    }

    /// Whether a coordinator API must be refused NOT_COORDINATOR here: the tenant's group is
    /// clustered and this node does not lead it (FindCoordinator names the leader). When it
    /// does lead, the coordinator learns the term it leads under (`Coordinator::lead_under`).
    pub fn not_coordinator(&self) -> bool {
        self.coordinator_elsewhere().is_some()
    }

    /// `not_coordinator`'s answer with the leader it read, from one look at the topology:
    /// None when this node coordinates (or runs alone), else the leader (None: none known).
    pub fn coordinator_elsewhere(&self) -> Option<Option<i32>> {
        let view = self.cfg.cluster.as_ref()?;
        self.groups.observe(view.as_ref(), self.cfg.node_id);
        let t = self.topology()?;
        (t.leader != Some(self.cfg.node_id)).then_some(t.leader)
    }

    /// This door with its engine calls sent to `bus` (a follower's Metadata reads).
    pub fn over_bus(&self, bus: Arc<dyn Bus>) -> Door {
        Door {
            bus,
            cfg: self.cfg.clone(),
            ctx: self.ctx.clone(),
            inflight: self.inflight.clone(),
            answers: self.answers.clone(),
            groups: self.groups.clone(),
            fetch_sessions: self.fetch_sessions.clone(),
            sasl: self.sasl,
        }
    }

    /// The context that describes the tenant's topics (names, partition counts, options):
    /// any logged-in user may, as Kafka's Read and Write grants imply Describe. A write-only
    /// user must learn a topic's partitions to produce to it.
    pub fn describe_ctx(&self) -> RequestCtx {
        match &self.ctx.access {
            queenmq_protocol::Access::Roles(held) if held.is_empty() => self.ctx.clone(),
            _ => RequestCtx {
                access: queenmq_protocol::Access::Open,
                ..self.ctx.clone()
            },
        }
    }
}

/// `inflight_bytes` in the semaphore's units (KiB, so any budget fits its permit count).
pub fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024)
}

/// Accepts Kafka connections until `shutdown` turns true; open connections end with it.
pub async fn run(
    listener: TcpListener,
    bus: Arc<dyn Bus>,
    cfg: KafkaConfig,
    security: Security,
    mut shutdown: watch::Receiver<bool>,
) {
    let inflight = Arc::new(Semaphore::new(
        kib(cfg.inflight_bytes.max(cfg.max_request_bytes)).min(Semaphore::MAX_PERMITS),
    ));
    let connections = Arc::new(Semaphore::new(
        cfg.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    let shared = Arc::new(Shared {
        tenants: group::Tenants::default(),
        fetch_sessions: Arc::new(fetch_sessions::FetchSessions::new(cfg.fetch_session_slots)),
        bus,
        answers: answer_room::AnswerRoom::new(cfg.answer_bytes),
        cfg: Arc::new(cfg),
        inflight,
        users: security.users.clone(),
        kdf: sasl::kdf::KdfLimit::for_this_machine(),
        backoff: sasl::backoff::Backoff::default(),
        auth_failures: sasl::failures::FailureLog::default(),
        strangers: quiet_log::QuietLog::new("kafka connection closed before login"),
    });
    // Strangers get their own, smaller cap before they are known (TLS and login done).
    let gate = (security.tls.is_some() || security.users.is_some()).then(|| {
        prelogin::PreLoginGate::new(
            shared.cfg.max_prelogin_connections,
            shared.cfg.max_prelogin_per_ip,
        )
    });
    {
        let (shared, stop) = (shared.clone(), shutdown.clone());
        let cluster = shared
            .cfg
            .cluster
            .clone()
            .map(|view| (view, shared.cfg.node_id));
        tokio::spawn(async move {
            shared
                .tenants
                .run_timers(shared.bus.clone(), cluster, stop)
                .await
        });
    }
    // The series exist from the start (docs/metrics.md lists them; a scrape shows them).
    metrics::gauge!("queen_kafka_connections").set(0.0);
    metrics::counter!("queen_kafka_bad_frames_total").increment(0);
    for reason in ["connections", "prelogin_ip"] {
        metrics::counter!("queen_kafka_refused_connections_total", "reason" => reason).increment(0);
    }
    metrics::counter!("queen_kafka_prelogin_evictions_total").increment(0);
    metrics::counter!("queen_kafka_auth_busy_total").increment(0);
    metrics::counter!("queen_kafka_tls_handshake_failures_total").increment(0);
    let refusals = quiet_log::QuietLog::new("kafka connections refused at accept");
    metrics::gauge!("queen_kafka_group_member_bytes").set(0.0);
    shared.auth_failures.export();
    metrics::gauge!("queen_kafka_fetch_sessions").set(0.0);
    metrics::gauge!("queen_kafka_fetch_session_bytes").set(0.0);
    metrics::counter!("queen_kafka_fetch_session_evictions_total").increment(0);
    for api in connection::API_NAMES {
        metrics::counter!("queen_kafka_requests_total", "api" => *api).increment(0);
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = connections.clone().try_acquire_owned() else {
                        metrics::counter!("queen_kafka_refused_connections_total", "reason" => "connections").increment(1);
                        refusals.note(peer, "the port serves max_connections");
                        drop(stream);
                        continue;
                    };
                    let (prelogin, evicted) = match &gate {
                        None => (None, None),
                        Some(gate) => match gate.admit(peer.ip()) {
                            prelogin::Admission::In { slot, evicted, evicted_oldest } => {
                                if evicted_oldest {
                                    metrics::counter!("queen_kafka_prelogin_evictions_total").increment(1);
                                }
                                (Some(slot), Some(evicted))
                            }
                            prelogin::Admission::SourceFull => {
                                metrics::counter!("queen_kafka_refused_connections_total", "reason" => "prelogin_ip").increment(1);
                                refusals.note(peer, "its source holds kafka_max_prelogin_connections_per_ip strangers");
                                drop(stream);
                                continue;
                            }
                        },
                    };
                    let shared = shared.clone();
                    let stop = shutdown.clone();
                    let tls = security.tls.clone();
                    tokio::spawn(async move {
                        let work = accepted_connection(shared, stream, peer, tls, stop, prelogin);
                        match evicted {
                            None => work.await,
                            // Dropping the connection's future closes its socket.
                            Some(evicted) => tokio::select! {
                                () = work => {}
                                () = evicted.wait() => {
                                    tracing::debug!(%peer, "kafka stranger closed: the pre-login gate admitted a newer one");
                                }
                            },
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Out of descriptors and the like: pause instead of spinning on accept.
                    tracing::warn!(error = %e, "kafka accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
        }
    }
    tracing::info!("kafka listener stopped");
}

/// Serves one accepted socket, after its TLS handshake when the port speaks TLS. The
/// handshake holds a connection slot, so it must end within `handshake_timeout`: a client that
/// opens sockets and never finishes one cannot keep the slots.
async fn accepted_connection(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: std::net::SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stop: watch::Receiver<bool>,
    mut prelogin: Option<prelogin::PreLogin>,
) {
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        connection::serve(shared, stream, peer, stop, prelogin).await;
        return;
    };
    // rustls buffers up to 64 KiB of outgoing records by default; a connection's answers
    // are written and flushed one at a time, so a record's worth is enough and keeps a TLS
    // connection's buffers within the per-connection share (docs/memory.md).
    let accept = tls.accept_with(stream, |c| c.set_buffer_limit(Some(TLS_SEND_BUFFER)));
    match tokio::time::timeout(shared.cfg.handshake_timeout, accept).await {
        Ok(Ok(stream)) => {
            // Known enough once TLS is done when there is no login to wait for.
            if shared.users.is_none() {
                prelogin = None;
            }
            connection::serve(shared, stream, peer, stop, prelogin).await
        }
        Ok(Err(e)) => {
            metrics::counter!("queen_kafka_tls_handshake_failures_total").increment(1);
            shared
                .strangers
                .note(peer, &format!("TLS handshake failed: {e}"));
        }
        Err(_) => {
            metrics::counter!("queen_kafka_tls_handshake_failures_total").increment(1);
            shared.strangers.note(peer, "TLS handshake too slow");
        }
    }
}

/// Outgoing TLS bytes a connection buffers at most (one full record and its overhead).
const TLS_SEND_BUFFER: usize = 16 << 10;
