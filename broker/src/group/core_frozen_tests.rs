//! The health probe of a cluster member reads whether its Raft core still answers (review
//! s19 lead M2; review s20 lead A3: the wiring had no test that failed without it).

use std::collections::HashMap;
use std::sync::Arc;

use queenmq_protocol::{Bus, Command, HealthView, Outcome, DEFAULT_TENANT};

use super::registry_tests::{ctx, open_with};
use crate::engine::log::{LogError, LogStatus, ProposeFuture, ReplicatedLog, SharedLog};
use crate::engine::{EngineBus, EngineConfig, LogWrap};

/// The group's real log, shown as a cluster follower's whose core is `frozen` or not.
struct Follower {
    inner: SharedLog,
    frozen: bool,
}

impl ReplicatedLog for Follower {
    fn propose(&self, payload: Vec<u8>) -> ProposeFuture {
        self.inner.propose(payload)
    }

    fn read(&self, index: u64) -> Result<Option<Vec<u8>>, LogError> {
        self.inner.read(index)
    }

    fn status(&self) -> LogStatus {
        LogStatus {
            role: "follower",
            clustered: true,
            ..self.inner.status()
        }
    }

    fn core_frozen(&self) -> bool {
        self.frozen
    }
}

async fn healthy(frozen: bool) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let ecfg = EngineConfig {
        log_wrap: Some(LogWrap(Arc::new(move |inner| {
            Arc::new(Follower { inner, frozen }) as SharedLog
        }))),
        ..EngineConfig::default()
    };
    let groups = open_with(dir.path(), HashMap::new(), ecfg).await;
    let bus = EngineBus::new(groups.clone(), Arc::new(String::new));
    let out = bus.call(ctx(DEFAULT_TENANT), Command::Health).await;
    groups.stop_all(std::time::Duration::from_secs(10)).await;
    match out {
        Ok(Outcome::Health(HealthView::Running { healthy, .. })) => healthy,
        other => panic!("not a running group's health: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_core_is_frozen_is_unhealthy() {
    assert!(!healthy(true).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_core_answers_is_healthy() {
    assert!(healthy(false).await);
}
