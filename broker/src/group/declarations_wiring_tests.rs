//! The `default` group's start really acts on the tenant declarations (review s30 tenants:
//! "the call in `supervisor::start` is not driven by a test"): a one-node cluster member with
//! `cluster_tenant_groups`, opened through `Registry::open` as the server opens it, declares a
//! tenant through its `default` group (the apply path writes the record), stops (a final
//! checkpoint carries the declaration), and then opens again over a data dir where that record
//! is gone and another record stands that the checkpoint lacks: the open writes the first back
//! from the checkpoint (`record_missing`) and puts the second into the state
//! (`backfill_from_records`) before the registry decides what to open.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::cluster_member::Member;
use crate::config::{Cluster, Config, Timing};
use crate::engine::EngineConfig;
use crate::group::hosted::{self, Declarations};
use crate::group::registry::{Registry, RegistryOptions};

fn free_port() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

async fn open(
    dir: &std::path::Path,
    addr: std::net::SocketAddr,
    key_on: bool,
) -> anyhow::Result<Arc<Registry>> {
    open_capped(dir, addr, key_on, u64::MAX).await
}

async fn open_capped(
    dir: &std::path::Path,
    addr: std::net::SocketAddr,
    key_on: bool,
    max_tenants: u64,
) -> anyhow::Result<Arc<Registry>> {
    let c = Cluster {
        node_id: 1,
        addr,
        peers: BTreeMap::from([(1, addr.to_string())]),
        peer_http: BTreeMap::new(),
        peer_kafka: BTreeMap::new(),
        join: false,
        timing: Timing {
            heartbeat_ms: 100,
            election_timeout_ms: 500,
        },
        snapshot_keep: None,
        tenant_groups: key_on,
    };
    let mut member = Member::new(&c, &"t".repeat(32));
    if key_on {
        member.declarations =
            Some(Declarations::new(dir.to_path_buf()).with_max_tenants(max_tenants));
    }
    let cfg = Config {
        data_dir: dir.to_path_buf(),
        ..Config::default()
    };
    let defaults = EngineConfig::default();
    let ecfg = EngineConfig {
        // As the server sets it: one entry must fit one Raft append.
        record_limit: defaults
            .record_limit
            .min(queenmq_raft::CLUSTER_ENTRY_MAX as usize),
        cluster: Some(member),
        ..defaults
    };
    let opts = RegistryOptions {
        max_groups: 4,
        tenant_cache_bytes: 1 << 20,
        log_backends: HashMap::new(),
    };
    Registry::open(cfg, ecfg, opts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_groups_open_writes_and_backfills_the_checkpoints_declarations() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let addr = free_port();
    let reg = open(root, addr, true).await.unwrap();
    // The first write's declaration, through the default group (it leads alone).
    let mut declared = Err(queenmq_protocol::QueenError::unavailable("not tried"));
    for _ in 0..100 {
        declared = reg.group_or_declare("acme", true).await.map(drop);
        if declared.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    declared.unwrap();
    assert_eq!(hosted::read(root, "acme").unwrap(), Some(vec![1]));
    reg.stop_all(Duration::from_secs(10)).await;
    drop(reg);

    // The record lost (as on a node caught up past the declaration's entry), and a record
    // the checkpoint lacks (declared by a build before s30).
    std::fs::remove_file(root.join(hosted::HOSTED_DIR).join("acme")).unwrap();
    hosted::record(root, "beta", &[1]).unwrap();
    let reg = open(root, addr, true)
        .await
        .expect("the open writes acme's record before the registry looks for it");
    assert_eq!(hosted::read(root, "acme").unwrap(), Some(vec![1]));
    let default = reg.get(queenmq_protocol::DEFAULT_TENANT).unwrap();
    let live = default.live.get().unwrap();
    let tenants = live.shared.lock().tenants.clone();
    drop(live);
    assert_eq!(
        tenants.keys().map(String::as_str).collect::<Vec<_>>(),
        ["acme", "beta"],
        "acme from the checkpoint, beta put in from its record"
    );
    reg.stop_all(Duration::from_secs(10)).await;
}

/// Review s30 tenants L2: a member with `cluster_tenant_groups` off never plans effect 67,
/// whoever sends it, so its state holds no declaration and its checkpoints no section 9.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_the_key_off_never_plans_a_declaration() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path(), free_port(), false).await.unwrap();
    let default = reg.get(queenmq_protocol::DEFAULT_TENANT).unwrap();
    let mut answered = None;
    for _ in 0..100 {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = crate::engine::Job {
            ctx: queenmq_protocol::RequestCtx {
                tenant: queenmq_protocol::DEFAULT_TENANT.to_owned(),
                principal: None,
                access: queenmq_protocol::Access::Open,
            },
            cmd: queenmq_protocol::Command::DeclareTenant {
                tenant: "acme".to_owned(),
                voters: vec![1],
            },
            reply,
        };
        default.tx.send(job).await.unwrap();
        match answer.await.unwrap() {
            // Not leading yet (the one-node group elects itself first).
            Err(e)
                if matches!(
                    e.code,
                    queenmq_protocol::ErrorCode::NotLeader
                        | queenmq_protocol::ErrorCode::Unavailable
                ) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => {
                answered = Some(other);
                break;
            }
        }
    }
    let e = answered.expect("answered").unwrap_err();
    assert_eq!(e.code, queenmq_protocol::ErrorCode::Unsupported, "{e:?}");
    let live = default.live.get().unwrap();
    assert!(live.shared.lock().tenants.is_empty());
    drop(live);
    reg.stop_all(Duration::from_secs(10)).await;
}

/// Sends a declaration to the `default` engine directly (past the registry's own places),
/// retrying while the one-node group elects itself.
async fn declare_in_default(
    reg: &Arc<Registry>,
    tenant: &str,
) -> Result<queenmq_protocol::Outcome, queenmq_protocol::QueenError> {
    let default = reg.get(queenmq_protocol::DEFAULT_TENANT).unwrap();
    for _ in 0..100 {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = crate::engine::Job {
            ctx: queenmq_protocol::RequestCtx {
                tenant: queenmq_protocol::DEFAULT_TENANT.to_owned(),
                principal: None,
                access: queenmq_protocol::Access::Open,
            },
            cmd: queenmq_protocol::Command::DeclareTenant {
                tenant: tenant.to_owned(),
                voters: vec![1],
            },
            reply,
        };
        default.tx.send(job).await.unwrap();
        match answer.await.unwrap() {
            Err(e)
                if matches!(
                    e.code,
                    queenmq_protocol::ErrorCode::NotLeader
                        | queenmq_protocol::ErrorCode::Unavailable
                ) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            other => return other,
        }
    }
    panic!("the default group never led");
}

/// Review s31 tenants M1 and L1 through the real engine: with `max_tenants` 2 (`default` and
/// one more), a retry of a committed declaration is answered done, and a second name is
/// refused by the `default` engine itself, with no node's place involved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_engine_caps_declarations_and_answers_a_retry_done() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open_capped(dir.path(), free_port(), true, 2).await.unwrap();
    declare_in_default(&reg, "acme").await.expect("declared");
    declare_in_default(&reg, "acme")
        .await
        .expect("the same declaration again is done");
    let e = declare_in_default(&reg, "beta").await.unwrap_err();
    assert_eq!(e.code, queenmq_protocol::ErrorCode::Forbidden, "{e:?}");
    let default = reg.get(queenmq_protocol::DEFAULT_TENANT).unwrap();
    let live = default.live.get().unwrap();
    let tenants = live.shared.lock().tenants.clone();
    drop(live);
    assert_eq!(
        tenants.keys().map(String::as_str).collect::<Vec<_>>(),
        ["acme"]
    );
    reg.stop_all(Duration::from_secs(10)).await;
}

/// Review s31 member H1: a crash's leftover temporary record is removed at the start, before
/// `default` opens (listings no longer remove it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_removes_a_leftover_temporary_record() {
    let dir = tempfile::tempdir().unwrap();
    let hosted_dir = dir.path().join(hosted::HOSTED_DIR);
    std::fs::create_dir_all(&hosted_dir).unwrap();
    std::fs::write(hosted_dir.join("acme.tmp"), b"queen-tenant-hosted 1\nvot").unwrap();
    let reg = open(dir.path(), free_port(), true).await.unwrap();
    assert!(!hosted_dir.join("acme.tmp").exists());
    reg.stop_all(Duration::from_secs(10)).await;
}
