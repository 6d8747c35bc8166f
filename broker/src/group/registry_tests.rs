//! Failure isolation between groups (issue 9, Done-when 3): tenant `a`'s log lives on a
//! backend whose fsyncs fail on demand; while they fail, `a` answers retriable `unavailable`
//! and is rebuilt in the process, tenant `b` keeps accepting and answering; once the disk
//! heals, `a` serves again with every push it had acknowledged.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use queenmq_protocol::{
    Access, Bus, Command, ErrorCode, Outcome, PopReq, PopSource, PushItem, PushReq, QueenError,
    RequestCtx, Subscription,
};
use queenmq_storage::{IoBackend, MemBackend};

use super::{Registry, RegistryOptions};
use crate::config::Config;
use crate::engine::{EngineBus, EngineConfig};

pub(super) fn ctx(tenant: &str) -> RequestCtx {
    RequestCtx {
        tenant: tenant.into(),
        principal: None,
        access: Access::Open,
    }
}

pub(super) async fn push(bus: &EngineBus, tenant: &str, txn: &str) -> Result<(), QueenError> {
    bus.call(ctx(tenant), push_to("q", txn)).await.map(|_| ())
}

/// A push of one message `txn` (its payload the id as a JSON string) to partition `p`.
pub(super) fn push_to(queue: &str, txn: &str) -> Command {
    Command::Push(PushReq {
        items: vec![PushItem {
            queue: queue.into(),
            partition: "p".into(),
            payload: bytes::Bytes::from(format!("\"{txn}\"")),
            transaction_id: Some(txn.into()),
            trace_id: None,
        }],
    })
}

/// An auto-acked pop of up to 10 000 messages of `queue` for `group`; a long poll of 60 s
/// when `wait`.
pub(super) fn pop(queue: &str, group: &str, wait: bool) -> Command {
    Command::Pop(PopReq {
        source: PopSource::Queue(queue.into()),
        group: Some(group.into()),
        batch: 10_000,
        partitions: 1,
        wait,
        timeout_ms: if wait { 60_000 } else { 0 },
        auto_ack: true,
        subscription: Subscription::All,
        lease_seconds: None,
        autopilot: false,
        conflation: false,
        parked_echo: Default::default(),
    })
}

/// Pushes `txn` until tenant's group takes it; every refusal meanwhile must be retriable.
/// Bounded (60 s) only so that a group that never serves fails the test.
async fn push_until_served(bus: &EngineBus, tenant: &str, txn: &str) -> bool {
    for _ in 0..1_200 {
        match push(bus, tenant, txn).await {
            Ok(()) => return true,
            Err(e) => assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The transaction ids of every message of queue `q`, popped by a group of its own.
pub(super) async fn everything(bus: &EngineBus, tenant: &str) -> BTreeSet<String> {
    match bus.call(ctx(tenant), pop("q", "audit", false)).await {
        Ok(Outcome::Popped(r)) => r.messages.into_iter().map(|m| m.transaction_id).collect(),
        other => panic!("a pop of {tenant} answered {:?}", other.err()),
    }
}

/// A registry of at most three groups on `data_dir`, tenants' logs on `backends` where named.
async fn open(
    data_dir: &std::path::Path,
    backends: HashMap<String, Arc<dyn IoBackend>>,
) -> Arc<Registry> {
    open_with(data_dir, backends, EngineConfig::default()).await
}

pub(super) async fn open_with(
    data_dir: &std::path::Path,
    backends: HashMap<String, Arc<dyn IoBackend>>,
    ecfg: EngineConfig,
) -> Arc<Registry> {
    let cfg = Config {
        data_dir: data_dir.to_path_buf(),
        ..Config::default()
    };
    let opts = RegistryOptions {
        max_groups: 3,
        tenant_cache_bytes: 1 << 20,
        log_backends: backends,
    };
    Registry::open(cfg, ecfg, opts).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_whose_fsyncs_fail_is_rebuilt_while_another_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let disk_a = MemBackend::new();
    let mut backends: HashMap<String, Arc<dyn IoBackend>> = HashMap::new();
    backends.insert("a".into(), Arc::new(disk_a.clone()));
    let groups = open(dir.path(), backends).await;
    let bus = EngineBus::new(groups.clone(), Arc::new(String::new));

    let mut acked_a = BTreeSet::new();
    let mut acked_b = BTreeSet::new();
    for i in 0..20 {
        for (tenant, acked) in [("a", &mut acked_a), ("b", &mut acked_b)] {
            let txn = format!("{tenant}-before-{i}");
            push(&bus, tenant, &txn).await.unwrap();
            acked.insert(txn);
        }
    }
    let group_a = groups.get("a").unwrap();

    disk_a.set_fail_sync(true);
    for i in 0..3 {
        let refused = push(&bus, "a", &format!("a-failing-{i}")).await;
        let e = refused.expect_err("nothing is acknowledged while the log cannot sync");
        assert_eq!(e.code, ErrorCode::Unavailable, "retriable: {}", e.message);
        for j in 0..10 {
            let txn = format!("b-during-{i}-{j}");
            push(&bus, "b", &txn).await.unwrap();
            acked_b.insert(txn);
        }
    }
    assert_eq!(everything(&bus, "b").await, acked_b, "b serves reads too");

    disk_a.set_fail_sync(false);
    // The supervisor rebuilds `a` in the process, after a backoff.
    assert!(
        push_until_served(&bus, "a", "a-after").await,
        "the group of tenant a was never rebuilt"
    );
    acked_a.insert("a-after".into());
    assert!(
        Arc::ptr_eq(&group_a, &groups.get("a").unwrap()),
        "rebuilt in place: the same group, queue and slot"
    );

    let found = everything(&bus, "a").await;
    assert!(
        found.is_superset(&acked_a),
        "acknowledged pushes of a lost: {:?}",
        acked_a.difference(&found).collect::<Vec<_>>()
    );
    assert!(
        found.iter().all(|t| t.starts_with("a-")),
        "only a's messages"
    );
    // The failed cycle's record was written but its fsync failed: it is never retried nor
    // trusted from the page cache, the rebuild drops it.
    assert!(
        found.iter().all(|t| !t.starts_with("a-failing-")),
        "a record whose fsync failed came back: {found:?}"
    );
    assert_eq!(
        everything(&bus, "b").await,
        BTreeSet::new(),
        "b's were all read"
    );
    groups.stop_all(Duration::from_secs(10)).await;
}

/// A log append that meets ENOSPC (another process filled the disk after the free-space gate
/// looked) fails its cycle unacknowledged, answered `storage_full` (retriable, and only for a
/// real ENOSPC: the fsync test above gets `unavailable`); the group is rebuilt from what was
/// synced, the refused push never shows up, and once space is back every acknowledged push is
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_on_a_full_disk_fails_the_cycle_and_the_group_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let disk_a = MemBackend::new();
    let mut backends: HashMap<String, Arc<dyn IoBackend>> = HashMap::new();
    backends.insert("a".into(), Arc::new(disk_a.clone()));
    let groups = open(dir.path(), backends).await;
    let bus = EngineBus::new(groups.clone(), Arc::new(String::new));
    let mut acked = BTreeSet::new();
    for i in 0..10 {
        let txn = format!("a-before-{i}");
        push(&bus, "a", &txn).await.unwrap();
        acked.insert(txn);
    }

    disk_a.set_full(true);
    let e = push(&bus, "a", "a-refused")
        .await
        .expect_err("nothing is acknowledged that the log could not take");
    // The kind of the failure travels from the log store: a full disk, not a failed one.
    assert_eq!(e.code, ErrorCode::StorageFull, "{}", e.message);
    push(&bus, "b", "b-meanwhile")
        .await
        .expect("another group keeps serving");

    disk_a.set_full(false);
    assert!(
        push_until_served(&bus, "a", "a-after").await,
        "the group of tenant a was never rebuilt"
    );
    acked.insert("a-after".into());
    let found = everything(&bus, "a").await;
    assert!(
        found.is_superset(&acked),
        "acknowledged pushes lost: {:?}",
        acked.difference(&found).collect::<Vec<_>>()
    );
    assert!(
        !found.contains("a-refused"),
        "the refused push came back from a record the log never took"
    );
    groups.stop_all(Duration::from_secs(10)).await;
}

/// Concurrent first uses of a tenant whose start fails: one start is tried, the others wait
/// for it and then get the back-off refusal, so a burst of retries never opens the files twice
/// or replays once per request; no answer names a server path; once the cause is gone and the
/// back-off has passed, the group starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_start_is_tried_once_for_a_burst_and_backs_off() {
    let dir = tempfile::tempdir().unwrap();
    // A file where tenant c's directory would be: its start fails (not a directory).
    std::fs::create_dir_all(dir.path().join("tenants")).unwrap();
    let blocker = dir.path().join("tenants").join("c");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let groups = open(dir.path(), HashMap::new()).await;
    let tries: Vec<_> = (0..8)
        .map(|_| {
            let g = groups.clone();
            tokio::spawn(async move { g.group("c").await.map(|_| ()) })
        })
        .collect();
    let mut started_and_failed = 0;
    for t in tries {
        let e = t.await.unwrap().expect_err("c cannot start");
        assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
        assert!(
            !e.message.contains(dir.path().to_str().unwrap()),
            "{}",
            e.message
        );
        if e.message.contains("cannot start") {
            started_and_failed += 1;
        } else {
            assert!(e.message.contains("tried again in"), "{}", e.message);
        }
    }
    assert_eq!(started_and_failed, 1, "one start for the whole burst");
    std::fs::remove_file(&blocker).unwrap();
    let e = groups
        .group("c")
        .await
        .map(|_| ())
        .expect_err("still backing off");
    assert!(e.message.contains("tried again in"), "{}", e.message);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    groups
        .group("c")
        .await
        .expect("starts once the back-off has passed");
    assert!(dir.path().join("tenants").join("c").join("LOCK").is_file());
    groups.stop_all(Duration::from_secs(10)).await;
}

/// A disk that hangs (fsyncs that neither fail nor return) stops tenant a's engine inside a
/// proposal. Its requests are answered `unavailable` once the bus's bound passes instead of
/// waiting forever; tenant b keeps serving; when the disk answers again, a serves with every
/// push it acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_disk_answers_unavailable_instead_of_holding_requests() {
    let dir = tempfile::tempdir().unwrap();
    let disk_a = MemBackend::new();
    let mut backends: HashMap<String, Arc<dyn IoBackend>> = HashMap::new();
    backends.insert("a".into(), Arc::new(disk_a.clone()));
    let groups = open(dir.path(), backends).await;
    let waits = crate::engine::BusWaits {
        enqueue: Duration::from_millis(300),
        answer: Duration::from_millis(500),
    };
    let bus = Arc::new(EngineBus::new(groups.clone(), Arc::new(String::new)).with_waits(waits));

    let mut acked_a = BTreeSet::new();
    for i in 0..5 {
        let txn = format!("a-before-{i}");
        push(&bus, "a", &txn).await.unwrap();
        acked_a.insert(txn);
    }

    disk_a.set_hang_sync(true);
    let stuck: Vec<_> = (0..20)
        .map(|i| {
            let bus = bus.clone();
            tokio::spawn(async move { push(&bus, "a", &format!("a-hung-{i}")).await })
        })
        .collect();
    for t in stuck {
        let e = t
            .await
            .unwrap()
            .expect_err("nothing can commit on a hung disk");
        assert_eq!(e.code, ErrorCode::Unavailable, "retriable: {}", e.message);
    }
    for j in 0..10 {
        push(&bus, "b", &format!("b-during-{j}")).await.unwrap();
    }

    disk_a.set_hang_sync(false);
    assert!(
        push_until_served(&bus, "a", "a-after").await,
        "tenant a never served again after its disk answered"
    );
    acked_a.insert("a-after".into());
    let found = everything(&bus, "a").await;
    assert!(
        found.is_superset(&acked_a),
        "acknowledged pushes of a lost: {:?}",
        acked_a.difference(&found).collect::<Vec<_>>()
    );
    groups.stop_all(Duration::from_secs(10)).await;
}

/// `max_long_polls` is the node's: two tenant groups share one set of slots, so a tenant
/// cannot park the cap's worth of polls per group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_are_capped_per_node_across_groups() {
    let dir = tempfile::tempdir().unwrap();
    let slots = crate::engine::LongPollSlots::new(2);
    let ecfg = EngineConfig {
        long_polls: slots.clone(),
        ..EngineConfig::default()
    };
    let groups = open_with(dir.path(), HashMap::new(), ecfg).await;
    let bus = Arc::new(EngineBus::new(groups.clone(), Arc::new(String::new)));
    let long_poll = |queue: &str| {
        Command::Pop(PopReq {
            source: PopSource::Queue(queue.into()),
            group: None,
            batch: 1,
            partitions: 1,
            wait: true,
            timeout_ms: 60_000,
            auto_ack: false,
            subscription: Subscription::Default,
            lease_seconds: None,
            autopilot: false,
            conflation: false,
            parked_echo: Default::default(),
        })
    };
    push(&bus, "a", "seed-a").await.unwrap();
    push(&bus, "b", "seed-b").await.unwrap();
    let parked: Vec<_> = ["x", "y"]
        .into_iter()
        .map(|q| {
            let (bus, cmd) = (bus.clone(), long_poll(q));
            tokio::spawn(async move { bus.call(ctx("a"), cmd).await })
        })
        .collect();
    // Both of a's polls parked (bounded only so that a broken park fails the test).
    for _ in 0..400 {
        if slots.held() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(slots.held(), 2, "a's two polls never parked");
    let e = bus
        .call(ctx("b"), long_poll("z"))
        .await
        .expect_err("b's long poll was parked past the node's cap");
    assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
    assert!(e.message.contains("max_long_polls"), "{}", e.message);
    for p in parked {
        p.abort();
    }
    groups.stop_all(Duration::from_secs(10)).await;
}

/// Free bytes a test sets, for the node's free-space gate.
struct FakeFree(Arc<std::sync::atomic::AtomicU64>);

impl crate::disk_gate::FreeSpace for FakeFree {
    fn available(&self) -> std::io::Result<u64> {
        Ok(self.0.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// While the node is full, a tenant whose group has no files yet is refused `storage_full`
/// (its start creates files), nothing of it is created, and a tenant that exists still
/// serves; once a reading shows space the new tenant starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_tenant_is_refused_storage_full_while_the_disk_is_full() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let free = Arc::new(AtomicU64::new(1 << 40));
    let gate = crate::disk_gate::DiskGate::new(Box::new(FakeFree(free.clone())), 1 << 20);
    gate.refresh();
    let ecfg = EngineConfig {
        disk: Some(gate.clone()),
        ..EngineConfig::default()
    };
    let groups = open_with(dir.path(), HashMap::new(), ecfg).await;
    let bus = EngineBus::new(groups.clone(), Arc::new(String::new));
    push(&bus, "a", "a-1").await.expect("space: a starts");

    // Under the reserve, above a quarter of it: bookkeeping (the reads' pops) goes on.
    free.store(600_000, Ordering::SeqCst);
    gate.refresh();
    assert!(gate.is_full());
    let e = push(&bus, "b", "b-1").await.expect_err("full");
    assert_eq!(e.code, ErrorCode::StorageFull, "{}", e.message);
    assert!(
        !dir.path().join("tenants").join("b").exists(),
        "nothing of the new tenant is created on a full disk"
    );
    let e = push(&bus, "a", "a-2").await.expect_err("full");
    assert_eq!(e.code, ErrorCode::StorageFull, "{}", e.message);
    assert!(everything(&bus, "a").await.contains("a-1"), "reads go on");

    free.store(1 << 40, Ordering::SeqCst);
    gate.refresh();
    push(&bus, "b", "b-1")
        .await
        .expect("space again: b starts at once, with no back-off");
    groups.stop_all(Duration::from_secs(10)).await;
}
