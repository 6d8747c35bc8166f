//! The membership routes' listing of the tenants and their memory of removed members, on a
//! one-node cluster member with `cluster_tenant_groups` opened as the server opens it
//! (docs/cluster.md "Membership with tenant groups").

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use queenmq_native_api::cluster_admin::ClusterAdmin;

use crate::cluster_admin::GroupMembership;
use crate::cluster_member::Member;
use crate::config::{Cluster, Config, Timing};
use crate::engine::EngineConfig;
use crate::group::hosted::Declarations;
use crate::group::registry::{Registry, RegistryOptions};

async fn open(dir: &std::path::Path) -> Arc<Registry> {
    open_with(dir, false).await
}

/// `join`: started as a node added at run time (`cluster_join`): its groups wait,
/// uninitialised, for a leader to add them.
pub(crate) async fn open_with(dir: &std::path::Path, join: bool) -> Arc<Registry> {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let unreachable = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = Cluster {
        node_id: 1,
        addr,
        // A joining node's `peers` must name another member to ask for its joining horizon
        // (review s33 H-1: a join naming itself alone is refused at start); nobody listens at
        // node 2's address, so the read keeps failing and the group stays uninitialised.
        peers: if join {
            BTreeMap::from([(1, addr.to_string()), (2, unreachable.to_string())])
        } else {
            BTreeMap::from([(1, addr.to_string())])
        },
        peer_http: BTreeMap::new(),
        peer_kafka: BTreeMap::new(),
        join,
        timing: Timing {
            heartbeat_ms: 100,
            election_timeout_ms: 500,
        },
        snapshot_keep: None,
        tenant_groups: true,
    };
    let mut member = Member::new(&c, &"t".repeat(32));
    member.declarations = Some(Declarations::new(dir.to_path_buf()));
    let cfg = Config {
        data_dir: dir.to_path_buf(),
        ..Config::default()
    };
    let defaults = EngineConfig::default();
    let ecfg = EngineConfig {
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
    Registry::open(cfg, ecfg, opts).await.unwrap()
}

/// A registry whose one-node `default` group leads here, and a tenant "ghost" declared with
/// voter 2 alone (before this node joined): node 1 hosts it, founds nothing and waits,
/// uninitialised, for node 2 to add it, so node 1 is an outsider of "ghost" while it leads
/// `default` (the case of reviews s32 t2 M1 and s31 M5).
pub(crate) async fn leading_default_outside_ghost(
    dir: &std::path::Path,
) -> (Arc<Registry>, Arc<crate::group::Group>) {
    let reg = open_with(dir, false).await;
    let default = reg.get(queenmq_protocol::DEFAULT_TENANT).unwrap();
    let mut leading = false;
    for _ in 0..100 {
        if default.live.get().unwrap().log.status().role == "leader" {
            leading = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(leading, "the one-node default group never led");
    crate::group::hosted::record(dir, "ghost", &[2]).unwrap();
    let ghost = reg.group("ghost").await.unwrap();
    // Past an election timeout: still no leader and nobody added it.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(crate::leader_lookup::outside(&ghost, 1), "not an outsider");
    (reg, ghost)
}

pub(crate) fn admin(reg: &Arc<Registry>, dir: &std::path::Path) -> GroupMembership {
    GroupMembership {
        groups: reg.clone(),
        node_id: 1,
        peer_http: BTreeMap::new(),
        tenant_groups: true,
        data_dir: dir.to_path_buf(),
        carrying: tokio::sync::Mutex::new(()),
    }
}

/// Review s31 member M3 B: a declaration `default` applied is listed though this node has no
/// hosted record of it and runs no group of it (as on a leader just elected, whose apply of
/// the declaration the barrier waited for). An id never a member is told from one removed
/// (review s31 member L2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_is_defaults_applied_declarations_and_past_members_are_known() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    let mut declared = Err(queenmq_protocol::QueenError::unavailable("not tried"));
    for _ in 0..100 {
        declared = reg.group_or_declare("acme", true).await.map(drop);
        if declared.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    declared.unwrap();
    let default = reg.get(queenmq_protocol::DEFAULT_TENANT).unwrap();
    let live = default.live.get().unwrap();
    crate::state::tenants::declare(&mut live.shared.lock().tenants, "ghost", 1, &[1]);
    let gm = admin(&reg, dir.path());
    let listed = gm.list_tenants(Duration::from_secs(5)).await.unwrap();
    assert_eq!(listed, ["acme", "ghost"]);
    assert_eq!(
        gm.tenant_groups().await.unwrap().unwrap(),
        ["acme", "ghost"]
    );
    assert!(gm.was_member(1).await);
    assert!(!gm.was_member(33).await);
    reg.stop_all(Duration::from_secs(10)).await;
}

/// The barrier is bounded: a default group that cannot confirm its lead within the bound
/// makes the listing fail (behind, 503), never a listing that may miss a tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_whose_barrier_does_not_pass_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    // At once, before the one-node group has elected itself: not a leader yet, or the
    // bound (zero) is already past.
    let gm = admin(&reg, dir.path());
    let e = gm.list_tenants(Duration::ZERO).await.unwrap_err();
    assert_eq!(e.code, queenmq_protocol::ErrorCode::Unavailable, "{e:?}");
    assert!(e.message.contains("did not list"), "{}", e.message);
    reg.stop_all(Duration::from_secs(10)).await;
}

/// Review s32 t2 H1: a group this node does not lead must not judge a change against its
/// own view. Here the group is uninitialised (a joining node, as an outsider's tenant group
/// is): its membership is empty with no change in progress, and removing any id was
/// answered 200 `already` though nothing ran there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_on_a_group_not_led_here_is_refused_not_already() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open_with(dir.path(), true).await;
    // Past an election timeout: still no leader, nobody added it.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let gm = admin(&reg, dir.path());
    let r = gm
        .change_group(
            queenmq_protocol::DEFAULT_TENANT,
            queenmq_native_api::cluster_admin::MembershipOp::Remove(7),
        )
        .await;
    let e = r.expect_err("answered by a node that does not lead the group");
    assert_eq!(e.code, queenmq_protocol::ErrorCode::Unavailable, "{e:?}");
    assert!(e.message.contains("does not lead"), "{}", e.message);
    reg.stop_all(Duration::from_secs(10)).await;
}
