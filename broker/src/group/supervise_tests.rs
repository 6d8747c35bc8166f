//! The supervisor's answer to an engine that ends in a deposition: the group is reloaded at
//! once, every time, without the crash-loop backoff (review s16 B2; review s17 C3: the python
//! test of it could pass without the fix unless one node led both cuts). An entry that did not
//! commit under a leader that kept its majority is no deposition and waits the backoff when it
//! repeats (review s17 C7).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use queenmq_protocol::ErrorCode;

use super::registry_tests::{open_with, push};
use crate::engine::log::{LogError, LogStatus, ProposeFuture, ReplicatedLog, SharedLog};
use crate::engine::{EngineBus, EngineConfig, LogWrap};

/// The group's real log, except that its first `failures` proposals (counted across the
/// group's incarnations) fail at once with what `fail` makes, nothing written.
struct FailingLog {
    inner: SharedLog,
    proposed: Arc<AtomicUsize>,
    failures: usize,
    fail: fn() -> LogError,
}

impl ReplicatedLog for FailingLog {
    fn propose(&self, payload: Vec<u8>) -> ProposeFuture {
        if self.proposed.fetch_add(1, Ordering::SeqCst) < self.failures {
            let e = (self.fail)();
            return Box::pin(async move { Err(e) });
        }
        self.inner.propose(payload)
    }

    fn read(&self, index: u64) -> Result<Option<Vec<u8>>, LogError> {
        self.inner.read(index)
    }

    fn status(&self) -> LogStatus {
        self.inner.status()
    }
}

/// Pushes to tenant `a` until one is served after every failure was spent; the refusals
/// met on the way.
async fn refusals_until_served(fail: fn() -> LogError) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let proposed = Arc::new(AtomicUsize::new(0));
    let counted = proposed.clone();
    let ecfg = EngineConfig {
        log_wrap: Some(LogWrap(Arc::new(move |inner| {
            Arc::new(FailingLog {
                inner,
                proposed: counted.clone(),
                failures: 2,
                fail,
            }) as SharedLog
        }))),
        ..EngineConfig::default()
    };
    let groups = open_with(dir.path(), HashMap::new(), ecfg).await;
    let bus = EngineBus::new(groups.clone(), Arc::new(String::new));
    let mut refusals = Vec::new();
    // Bounded only so that a group that never serves fails the test.
    for i in 0..20_000 {
        match push(&bus, "a", &format!("t-{i}")).await {
            Ok(()) if proposed.load(Ordering::SeqCst) > 2 => break,
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
                refusals.push(e.message);
            }
        }
        assert!(i < 19_999, "the group never served after its failures");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    groups.stop_all(Duration::from_secs(10)).await;
    refusals
}

/// Review s17 C3: two depositions in a row, the second of an incarnation that was itself a
/// reload, are both reloaded at once: no request meets the backoff's pause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposition_twice_in_a_row_is_reloaded_at_once_both_times() {
    let refusals =
        refusals_until_served(|| LogError::Deposed("this node lost the lead".into())).await;
    assert!(
        refusals
            .iter()
            .filter(|m| m.contains("lost the lead"))
            .count()
            >= 2,
        "both depositions answered their cycle: {refusals:?}"
    );
    assert!(
        refusals.iter().all(|m| !m.contains("after a pause")),
        "a deposition waited the backoff: {refusals:?}"
    );
}

/// Review s17 C7: an entry given up at the write limit by a leader that kept its majority
/// would fail again at once: the second in a row waits the backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_limit_expiry_twice_in_a_row_waits_the_backoff() {
    let refusals = refusals_until_served(|| {
        LogError::NotCommitted("the write did not commit within 20000 ms".into())
    })
    .await;
    assert!(
        refusals.iter().any(|m| m.contains("after a pause")),
        "the second expiry was reloaded without the backoff: {refusals:?}"
    );
}
