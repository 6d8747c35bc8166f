//! A door over a test's own bus, with small bounds, for the tests that drive a request
//! handler without a broker (a stub bus answers and counts what the door asks).

use std::sync::Arc;
use std::time::Duration;

use queenmq_protocol::{Bus, RequestCtx};
use tokio::sync::Semaphore;

use crate::{Door, KafkaConfig};

pub fn over(bus: Arc<dyn Bus>) -> Door {
    let cfg = KafkaConfig {
        node_id: 1,
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
        max_request_bytes: 1 << 20,
        default_partitions: 1,
        producer_id_expiration_ms: 60_000,
        max_producer_ids: 10,
        producer_evict_min_idle_ms: 1_000,
        txn_limits: queenmq_protocol::kafka_txns::TxnLimits::default(),
        max_records: 100,
        max_connections: 10,
        max_prelogin_connections: 10,
        max_prelogin_per_ip: 10,
        inflight_bytes: 1 << 20,
        answer_bytes: 64 << 20,
        idle_timeout: Duration::from_secs(60),
        io_timeout: Duration::from_secs(10),
        handshake_timeout: Duration::from_secs(10),
        ctx: RequestCtx::default(),
        log_dir: "/tmp".into(),
        fetch_session_slots: 0,
        cluster: None,
    };
    Door {
        bus,
        cfg: Arc::new(cfg),
        ctx: RequestCtx::default(),
        inflight: Arc::new(Semaphore::new(1024)),
        answers: crate::answer_room::AnswerRoom::new(64 << 20),
        groups: Arc::new(crate::group::Coordinator::default()),
        fetch_sessions: Arc::new(crate::fetch_sessions::FetchSessions::new(0)),
        sasl: false,
    }
}
