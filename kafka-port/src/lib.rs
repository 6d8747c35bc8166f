//! The Kafka door of QueenMQ (spec/kafka-port.md): Kafka clients connect to port 9092 and
//! their requests become the same bus commands the Queen HTTP API sends.
//!
//! One task per connection reads a frame, answers it, then reads the next, so answers leave
//! in request order as the protocol requires. Requests and record batches are decoded by
//! [`wire`] and [`records`] with every client-sent count checked before use; responses are
//! encoded by the `kafka-protocol` crate.
//!
//! This slice serves ApiVersions, Metadata, Produce, ListOffsets, Fetch, the classic
//! consumer-group APIs, CreateTopics, DeleteTopics, CreatePartitions and DescribeConfigs
//! (docs/kafka-compat.md).

pub mod admin;
pub mod api_versions;
pub mod codecs;
pub mod connection;
pub mod errors;
pub mod fetch;
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
pub mod produce;
pub mod records;
pub mod topics;
pub mod unmapping;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use queenmq_protocol::{Bus, RequestCtx};
use tokio::net::TcpListener;
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
    /// Records one Produce request may carry (the HTTP door's `max_push_items`).
    pub max_records: usize,
    /// Connections served at once; one more is closed at accept.
    pub max_connections: usize,
    /// Request bytes held by all connections at once (frames being read or answered): a
    /// frame waits for room before its body is read. At least `max_request_bytes`.
    pub inflight_bytes: usize,
    /// A connection with no request for this long is closed (Kafka's
    /// `connections.max.idle.ms` default).
    pub idle_timeout: Duration,
    /// A frame's body must arrive, and an answer be taken by the client, within this.
    pub io_timeout: Duration,
    /// Who the requests of this door act as: the port has no SASL yet, so the broker only
    /// starts it when HTTP authentication is off and passes an open context.
    pub ctx: RequestCtx,
    /// The data directory, shown as the broker's one log dir (DescribeLogDirs).
    pub log_dir: String,
}

/// The shared state of every connection.
pub struct Door {
    pub bus: Arc<dyn Bus>,
    pub cfg: KafkaConfig,
    /// Room for request bytes, in KiB (`inflight_bytes`).
    pub inflight: Arc<Semaphore>,
    /// Consumer group membership (in memory; offsets and generations are engine state).
    pub groups: group::Coordinator,
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
    mut shutdown: watch::Receiver<bool>,
) {
    let inflight = Arc::new(Semaphore::new(
        kib(cfg.inflight_bytes.max(cfg.max_request_bytes)).min(Semaphore::MAX_PERMITS),
    ));
    let connections = Arc::new(Semaphore::new(
        cfg.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    let door = Arc::new(Door {
        bus,
        cfg,
        inflight,
        groups: group::Coordinator::new(),
    });
    {
        let (door, stop) = (door.clone(), shutdown.clone());
        tokio::spawn(async move { door.groups.run_timers(&door, stop).await });
    }
    // The series exist from the start (docs/metrics.md lists them; a scrape shows them).
    metrics::gauge!("queen_kafka_connections").set(0.0);
    metrics::counter!("queen_kafka_bad_frames_total").increment(0);
    metrics::counter!("queen_kafka_refused_connections_total").increment(0);
    metrics::gauge!("queen_kafka_group_member_bytes").set(0.0);
    for api in connection::API_NAMES {
        metrics::counter!("queen_kafka_requests_total", "api" => *api).increment(0);
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = connections.clone().try_acquire_owned() else {
                        metrics::counter!("queen_kafka_refused_connections_total").increment(1);
                        tracing::debug!(%peer, "kafka connection refused: at the connection cap");
                        drop(stream);
                        continue;
                    };
                    let door = door.clone();
                    let stop = shutdown.clone();
                    tokio::spawn(async move {
                        connection::serve(door, stream, peer, stop).await;
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
