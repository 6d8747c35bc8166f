//! Kafka groups' durable requests planned on the fixture; each test ends by checking that a
//! follower applying the log and a checkpoint read back reach the leader's state.

use queenmq_protocol::kafka_groups::*;
use queenmq_protocol::ErrorCode;

use super::fixture::Fixture;
use crate::state::kafka_groups::MAX_KAFKA_GROUPS;

fn call(fx: &mut Fixture, req: KafkaGroupsReq) -> KafkaGroupsOutcome {
    let out = fx.planner().plan_kafka_groups(&req);
    fx.commit();
    match out {
        Ok(o) => o,
        Err(e) => panic!("kafka groups call refused: {e}"),
    }
}

fn commit(topic: &str, partition: i32, offset: i64, metadata: &str) -> KafkaOffsetCommit {
    KafkaOffsetCommit {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch: 2,
        metadata: metadata.into(),
    }
}

/// A fixture holding the queue `t`: Kafka commits name topics that exist.
fn with_topic() -> Fixture {
    let mut fx = Fixture::new();
    fx.configure("t", Default::default());
    fx.commit();
    fx
}

fn fetch_all(fx: &mut Fixture, group: &str) -> Vec<KafkaCommitted> {
    match call(
        fx,
        KafkaGroupsReq::Fetch {
            group: group.into(),
            partitions: None,
        },
    ) {
        KafkaGroupsOutcome::Fetched(rows) => rows,
        other => panic!("{other:?}"),
    }
}

#[test]
fn commits_round_trip_metadata_and_partition_errors_stay_per_partition() {
    let mut fx = with_topic();
    let big = "x".repeat(MAX_KAFKA_OFFSET_METADATA_BYTES + 1);
    let out = call(
        &mut fx,
        KafkaGroupsReq::Commit {
            group: "g".into(),
            offsets: vec![
                commit("t", 0, 5, "meta ü"),
                commit("t", 1, 7, &big),
                commit("t", -1, 1, ""),
                commit("no-such-topic", 0, 1, ""),
            ],
        },
    );
    assert_eq!(
        out,
        KafkaGroupsOutcome::Committed(vec![
            KafkaPartitionResult::Ok,
            KafkaPartitionResult::MetadataTooLarge,
            KafkaPartitionResult::InvalidTopic,
            KafkaPartitionResult::InvalidTopic,
        ])
    );
    let rows = fetch_all(&mut fx, "g");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].offset,
            rows[0].leader_epoch,
            rows[0].metadata.as_str()
        ),
        (5, 2, "meta ü")
    );
    assert_eq!(rows[0].commit_time_us, fx.st.last_now_us);
    assert!(fetch_all(&mut fx, "other").is_empty());
    fx.assert_replays();
}

#[test]
fn generations_rise_past_a_restart_and_groups_delete_with_their_offsets() {
    let mut fx = with_topic();
    let next = |fx: &mut Fixture| match call(
        fx,
        KafkaGroupsReq::NextGeneration {
            group: "g".into(),
            protocol_type: "consumer".into(),
            protocol_name: "range".into(),
        },
    ) {
        KafkaGroupsOutcome::Generation(g) => g,
        other => panic!("{other:?}"),
    };
    assert_eq!((next(&mut fx), next(&mut fx)), (1, 2));
    fx.rebuild();
    assert_eq!(next(&mut fx), 3, "the log remembers the last generation");
    call(
        &mut fx,
        KafkaGroupsReq::Commit {
            group: "g".into(),
            offsets: vec![commit("t", 0, 1, ""), commit("t", 1, 2, "")],
        },
    );
    call(
        &mut fx,
        KafkaGroupsReq::OffsetDelete {
            group: "g".into(),
            partitions: vec![("t".into(), 0)],
        },
    );
    assert_eq!(fetch_all(&mut fx, "g").len(), 1);
    match call(&mut fx, KafkaGroupsReq::List) {
        KafkaGroupsOutcome::Groups(g) => {
            assert_eq!((g.len(), g[0].generation, g[0].offsets), (1, 3, 1));
        }
        other => panic!("{other:?}"),
    }
    fx.assert_replays();
    let out = call(
        &mut fx,
        KafkaGroupsReq::Delete {
            groups: vec!["g".into(), "nope".into()],
        },
    );
    assert_eq!(out, KafkaGroupsOutcome::Deleted(vec![true, false]));
    assert_eq!(
        (fx.st.kafka_groups.len(), fx.st.kafka_groups.bytes()),
        (0, 0)
    );
    fx.assert_replays();
}

#[test]
fn past_the_group_cap_a_new_group_is_refused_retriably_and_nothing_changes() {
    let mut fx = with_topic();
    for i in 0..MAX_KAFKA_GROUPS {
        fx.st
            .kafka_groups
            .set_generation(&format!("g{i}"), 1, "", "");
    }
    let before = fx.st.kafka_groups.bytes();
    let refused = fx.planner().plan_kafka_groups(&KafkaGroupsReq::Commit {
        group: "new".into(),
        offsets: vec![commit("t", 0, 1, "")],
    });
    assert_eq!(refused.err().map(|e| e.code), Some(ErrorCode::Unavailable));
    assert_eq!(fx.st.kafka_groups.bytes(), before);
    // An existing group still commits.
    let ok = fx.planner().plan_kafka_groups(&KafkaGroupsReq::Commit {
        group: "g0".into(),
        offsets: vec![commit("t", 0, 1, "")],
    });
    assert!(ok.is_ok());
}

#[test]
fn requests_out_of_bounds_are_refused() {
    let mut fx = with_topic();
    let long = "g".repeat(MAX_KAFKA_GROUP_ID_BYTES + 1);
    for req in [
        KafkaGroupsReq::Describe { group: long },
        KafkaGroupsReq::Describe { group: "".into() },
        KafkaGroupsReq::Commit {
            group: "g".into(),
            offsets: vec![commit("t", 0, 1, ""); MAX_KAFKA_OFFSETS_PER_REQUEST + 1],
        },
    ] {
        let out = fx.planner().plan_kafka_groups(&req);
        assert_eq!(out.err().map(|e| e.code), Some(ErrorCode::BadRequest));
    }
}

#[test]
fn generations_wrap_after_i32_max_and_keep_rising() {
    let mut fx = with_topic();
    fx.st
        .kafka_groups
        .set_generation("g", i32::MAX, "consumer", "range");
    for want in [1, 2] {
        let out = call(
            &mut fx,
            KafkaGroupsReq::NextGeneration {
                group: "g".into(),
                protocol_type: "consumer".into(),
                protocol_name: "range".into(),
            },
        );
        assert_eq!(out, KafkaGroupsOutcome::Generation(want));
        assert_eq!(
            fx.st.kafka_groups.get("g").map(|g| g.generation),
            Some(want)
        );
    }
}
