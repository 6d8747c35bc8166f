//! `GroupLeaders` wired to a registry: a one-node `default` leading here, and a tenant's
//! group open here as an outsider (declared over another node before this one joined).

use std::collections::BTreeMap;
use std::time::Duration;

use queenmq_native_api::cluster_admin::{ClusterAdmin, MembershipOp};
use queenmq_native_api::{Leader, LeaderLookup};
use queenmq_protocol::DEFAULT_TENANT;

use crate::cluster_member::Member;
use crate::config::{Cluster, Timing};
use crate::leader_lookup::GroupLeaders;

/// Review s33 t M1/M2: the node leading `default` but outside the tenant's group relays the
/// tenant's requests to its declared voter that `default` holds (node 2), never answers
/// them here and never 503s with no leader while that voter is known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_leader_outside_a_tenant_relays_to_its_declared_voter() {
    let dir = tempfile::tempdir().unwrap();
    let (reg, _ghost) = crate::cluster_admin_tests::leading_default_outside_ghost(dir.path()).await;

    let c = Cluster {
        node_id: 1,
        addr: "127.0.0.1:1".parse().unwrap(),
        peers: BTreeMap::from([(1, "127.0.0.1:1".to_string())]),
        peer_http: BTreeMap::from([(2, "http://127.0.0.1:9".to_string())]),
        peer_kafka: BTreeMap::new(),
        join: false,
        timing: Timing {
            heartbeat_ms: 100,
            election_timeout_ms: 500,
        },
        snapshot_keep: None,
        tenant_groups: true,
    };
    let leaders = GroupLeaders::new(
        reg.clone(),
        Member::new(&c, &"t".repeat(32)),
        dir.path().to_path_buf(),
    );
    // Node 2 not (yet) in `default`: no declared voter known, 503 with no leader.
    assert_eq!(leaders.leader_of("ghost"), Leader::Unknown);

    let gm = crate::cluster_admin_tests::admin(&reg, dir.path());
    gm.change_group(
        DEFAULT_TENANT,
        MembershipOp::AddLearner {
            id: 2,
            cluster_addr: "127.0.0.1:9".into(),
            http: "http://127.0.0.1:9".into(),
            kafka: None,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        leaders.leader_of("ghost"),
        Leader::Other {
            id: 2,
            url: Some("http://127.0.0.1:9".into())
        }
    );
    // `default` itself is still answered here.
    assert_eq!(leaders.leader_of(DEFAULT_TENANT), Leader::Here);
    reg.stop_all(Duration::from_secs(10)).await;
}
