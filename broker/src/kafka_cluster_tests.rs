//! The Kafka port of a node whose tenant group runs here as an outsider (a node added later,
//! before that group's leader added it: docs/cluster.md "Membership with tenant groups"),
//! on a one-node cluster member opened as the server opens it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use queenmq_kafka_port::cluster::ClusterView;
use queenmq_protocol::{
    Access, Bus, BusFuture, Command, ErrorCode, QueenError, ReadReq, RequestCtx,
};

use crate::kafka_cluster::KafkaCluster;

/// The engine of a node that does not lead the tenant's group: it refuses.
#[derive(Debug)]
struct NotLeading;

impl Bus for NotLeading {
    fn call(&self, _: RequestCtx, _: Command) -> BusFuture {
        Box::pin(async { Err(QueenError::not_leader(None)) })
    }
}

fn ctx(tenant: &str) -> RequestCtx {
    RequestCtx {
        tenant: tenant.to_owned(),
        principal: None,
        access: Access::Open,
    }
}

/// Review s32 t2 M1: a Metadata read of a tenant whose group is open here as an outsider
/// (uninitialised, no leader, a membership without this node) was answered from its empty
/// applied state: no topics, which clients take as "gone", not "retry". It must be refused
/// (the port then closes the connection or answers LEADER_NOT_AVAILABLE), with no leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outsiders_metadata_is_not_answered_from_its_empty_state() {
    let dir = tempfile::tempdir().unwrap();
    let (reg, _ghost) = crate::cluster_admin_tests::leading_default_outside_ghost(dir.path()).await;

    let kc = KafkaCluster::new(
        reg.clone(),
        1,
        ("127.0.0.1".to_string(), 9092),
        BTreeMap::new(),
        Arc::new(NotLeading),
    )
    .with_tenant_groups(true);
    let r = kc
        .metadata_reads()
        .call(ctx("ghost"), Command::Read(ReadReq::Queues))
        .await;
    let e = r.expect_err("answered from the outsider's empty state");
    assert_eq!(e.code, ErrorCode::NotLeader, "{e:?}");
    // No leader named for the tenant; `default`'s members are the brokers.
    let t = kc.topology("ghost").unwrap();
    assert_eq!(t.leader, None);
    assert!(t.brokers.iter().any(|b| b.id == 1));
    reg.stop_all(Duration::from_secs(10)).await;
}
