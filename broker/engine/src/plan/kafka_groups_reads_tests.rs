//! OffsetFetch and ListGroups under the cycle's admin-read grant (review s19 kafka H2): each
//! offset row and each listed group is charged before it is copied, and past the grant the
//! answer is refused whole, listing nothing.

use queenmq_protocol::kafka_groups::*;
use queenmq_protocol::kafka_txn_reads::{ADMIN_READ_SHARE_DIVISOR, READ_ENTRY_BYTES};

use super::fixture::Fixture;
use super::kafka_txn_reads_tests::Room;
use crate::reads::kafka_groups::{fetch, list, OFFSET_ROW_BYTES};
use crate::reads::kafka_txns::Grant;

/// Group `group` holding offsets of "t" partitions `0..n`, each with `meta` as metadata.
fn committed_group(fx: &mut Fixture, group: &str, n: i32, meta: &str) {
    let offsets = (0..n)
        .map(|p| KafkaOffsetCommit {
            topic: "t".into(),
            partition: p,
            offset: 1,
            leader_epoch: -1,
            metadata: meta.into(),
        })
        .collect();
    let req = KafkaGroupsReq::Commit {
        group: group.into(),
        offsets,
    };
    assert!(fx.planner().plan_kafka_groups(&req).is_ok());
    fx.commit();
}

fn with_topic() -> Fixture {
    let mut fx = Fixture::new();
    fx.configure("t", Default::default());
    fx.commit();
    fx
}

/// The grants just short of `whole`: no entry, one entry short, one byte short.
fn short_of(whole: Grant) -> [Grant; 3] {
    [
        Grant::default(),
        Grant {
            entries: whole.entries - 1,
            ..whole
        },
        Grant {
            bytes: whole.bytes - 1,
            ..whole
        },
    ]
}

#[test]
fn a_groups_offsets_past_the_grant_are_refused_whole_and_within_it_answered_whole() {
    let mut fx = with_topic();
    committed_group(&mut fx, "g", 2, "mm");
    let whole = Grant {
        entries: 2,
        bytes: 2 * (OFFSET_ROW_BYTES + 1 + 2),
    };
    let asked = [("t".to_string(), 0), ("t".to_string(), 1)];
    for partitions in [None, Some(&asked[..])] {
        for short in short_of(whole) {
            assert_eq!(
                fetch(&fx.st, "g", partitions, short),
                (KafkaGroupsOutcome::OverBudget, Grant::default()),
                "{short:?}"
            );
        }
        match fetch(&fx.st, "g", partitions, whole) {
            (KafkaGroupsOutcome::Fetched(rows), spent) => {
                assert_eq!(rows.len(), 2);
                assert_eq!(spent, whole);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        fetch(&fx.st, "none", None, Grant::default()),
        (KafkaGroupsOutcome::Fetched(vec![]), Grant::default()),
        "an unknown group lists nothing and costs nothing"
    );
}

#[test]
fn a_list_of_groups_past_the_grant_is_refused_whole_and_each_group_charged_its_id() {
    let mut fx = with_topic();
    committed_group(&mut fx, "g1", 1, "");
    committed_group(&mut fx, "g22", 1, "");
    let whole = Grant {
        entries: 2,
        bytes: 2 * READ_ENTRY_BYTES + 2 + 3,
    };
    for short in short_of(whole) {
        assert_eq!(
            list(&fx.st, short),
            (KafkaGroupsOutcome::OverBudget, Grant::default()),
            "{short:?}"
        );
    }
    match list(&fx.st, whole) {
        (KafkaGroupsOutcome::Groups(gs), spent) => {
            assert_eq!(gs.len(), 2);
            assert_eq!(spent, whole);
        }
        other => panic!("{other:?}"),
    }
}

/// Review s19 kafka H2: in a cycle past its first read, many whole-group OffsetFetches and
/// ListGroups of a big group stay within the reads' share (before, each copied the whole
/// table, charged nowhere); the cycle's first read is still served whole.
#[test]
fn a_cycle_of_group_reads_holds_at_most_the_reads_share() {
    let mut fx = with_topic();
    committed_group(&mut fx, "small", 1, "");
    // 100 rows of 200 bytes of metadata: about 24 000 bytes, past the 8 000 of the share.
    committed_group(&mut fx, "big", 100, &"m".repeat(200));
    let room = Room(32_000);
    let mut p = fx.planner();
    p.memory = Some(&room);
    let fetch_of = |g: &str| KafkaGroupsReq::Fetch {
        group: g.into(),
        partitions: None,
    };
    match p.plan_kafka_groups(&fetch_of("small")) {
        Ok(KafkaGroupsOutcome::Fetched(rows)) => assert_eq!(rows.len(), 1),
        other => panic!("{other:?}"),
    }
    let charged = p.cycle.txn_read_bytes;
    assert_eq!(charged, OFFSET_ROW_BYTES + 1);
    for _ in 0..64 {
        assert_eq!(
            p.plan_kafka_groups(&fetch_of("big")),
            Ok(KafkaGroupsOutcome::OverBudget)
        );
    }
    assert_eq!(
        p.cycle.txn_read_bytes, charged,
        "a refused read holds nothing"
    );
    assert!(p.cycle.txn_read_bytes <= room.0 / ADMIN_READ_SHARE_DIVISOR);
    match p.plan_kafka_groups(&KafkaGroupsReq::List) {
        Ok(KafkaGroupsOutcome::Groups(gs)) => assert_eq!(gs.len(), 2),
        other => panic!("{other:?}"),
    }
    fx.commit();
    let mut p = fx.planner();
    p.memory = Some(&room);
    match p.plan_kafka_groups(&fetch_of("big")) {
        Ok(KafkaGroupsOutcome::Fetched(rows)) => assert_eq!(rows.len(), 100),
        other => panic!("the cycle's first read is served whole: {other:?}"),
    }
}

#[test]
fn describing_named_groups_answers_each_in_order() {
    let mut fx = with_topic();
    committed_group(&mut fx, "g", 3, "");
    let req = KafkaGroupsReq::Infos {
        groups: vec!["none".into(), "g".into()],
    };
    match fx.planner().plan_kafka_groups(&req) {
        Ok(KafkaGroupsOutcome::Infos(v)) => {
            assert_eq!(v.len(), 2);
            assert!(v[0].is_none());
            assert_eq!(v[1].as_ref().map(|g| g.offsets), Some(3));
        }
        other => panic!("{other:?}"),
    }
    let many = KafkaGroupsReq::Infos {
        groups: vec!["g".into(); MAX_KAFKA_GROUPS_PER_REQUEST + 1],
    };
    assert!(fx.planner().plan_kafka_groups(&many).is_err());
}

/// Review s20 kafka M2: a partition named ten thousand times is answered and charged once.
#[test]
fn a_partition_named_many_times_is_copied_and_charged_once() {
    let mut fx = with_topic();
    committed_group(&mut fx, "g", 1, &"m".repeat(4_096));
    let asked = vec![("t".to_string(), 0); 10_000];
    match fetch(&fx.st, "g", Some(&asked), Grant::UNLIMITED) {
        (KafkaGroupsOutcome::Fetched(rows), spent) => {
            assert_eq!(rows.len(), 1);
            assert_eq!(spent.entries, 1);
            assert_eq!(spent.bytes, OFFSET_ROW_BYTES + 1 + 4_096);
        }
        other => panic!("{other:?}"),
    }
}

/// Review s20 kafka M1: a whole group whose row count alone passes the grant is refused
/// without a row copied (in entries, and in bytes at the least a row costs).
#[test]
fn a_whole_group_past_the_grant_by_its_row_count_is_refused() {
    let mut fx = with_topic();
    committed_group(&mut fx, "g", 1_000, "");
    let by_entries = Grant {
        entries: 999,
        bytes: usize::MAX,
    };
    let by_bytes = Grant {
        entries: usize::MAX,
        bytes: 1_000 * OFFSET_ROW_BYTES - 1,
    };
    for granted in [by_entries, by_bytes] {
        assert_eq!(
            fetch(&fx.st, "g", None, granted),
            (KafkaGroupsOutcome::OverBudget, Grant::default())
        );
    }
}

/// Review s20 kafka M3: a consumer's named-partition fetch is not refused because monitoring
/// reads spent the admin share; it is held to the pops' room instead, the cycle's first that
/// lists rows served whatever is left, and what it lists is charged to that room.
#[test]
fn a_consumers_named_fetch_is_charged_with_the_pops_not_the_admin_share() {
    let mut fx = with_topic();
    committed_group(&mut fx, "small", 3, "");
    committed_group(&mut fx, "big", 100, &"m".repeat(200));
    let room = Room(32_000);
    let mut p = fx.planner();
    p.memory = Some(&room);
    // A whole-group read of "big" as the cycle's first spends past the admin share.
    let whole = KafkaGroupsReq::Fetch {
        group: "big".into(),
        partitions: None,
    };
    assert!(matches!(
        p.plan_kafka_groups(&whole),
        Ok(KafkaGroupsOutcome::Fetched(_))
    ));
    assert!(p.cycle.txn_read_bytes > room.0 / ADMIN_READ_SHARE_DIVISOR);
    let named = |g: &str, n: i32| KafkaGroupsReq::Fetch {
        group: g.into(),
        partitions: Some((0..n).map(|i| ("t".to_string(), i)).collect()),
    };
    match p.plan_kafka_groups(&named("small", 3)) {
        Ok(KafkaGroupsOutcome::Fetched(rows)) => assert_eq!(rows.len(), 3),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.cycle.answer_bytes, 3 * (OFFSET_ROW_BYTES + 1));
    // Past the pops' room, a later named fetch of the cycle waits for the next one.
    p.cycle.answer_bytes = room.0;
    assert_eq!(
        p.plan_kafka_groups(&named("small", 3)),
        Ok(KafkaGroupsOutcome::OverBudget)
    );
    assert_eq!(p.cycle.answer_bytes, room.0, "a refused read holds nothing");
}

/// A budget that refuses writes, its answer room `0`.
struct Pressed(usize);

impl crate::plan::MemoryGate for Pressed {
    fn pressed(&self) -> bool {
        true
    }
    fn refusal(&self) -> queenmq_protocol::QueenError {
        queenmq_protocol::QueenError::unavailable("memory")
    }
    fn answer_room(&self) -> usize {
        self.0
    }
}

/// Review s19 kafka L1: under memory pressure the cycle's first admin read has no exemption:
/// a whole group past what the room allows is refused. A consumer's named partitions keep a
/// first-of-cycle exemption up to `PRESSED_NAMED_FETCH_BYTES` (review s21 lead C1).
#[test]
fn under_memory_pressure_the_first_read_is_held_to_the_room() {
    let mut fx = with_topic();
    committed_group(&mut fx, "big", 100, &"m".repeat(200));
    committed_group(&mut fx, "huge", 300, &"m".repeat(4_000));
    let room = Pressed(0);
    let mut p = fx.planner();
    p.memory = Some(&room);
    let whole = KafkaGroupsReq::Fetch {
        group: "big".into(),
        partitions: None,
    };
    assert_eq!(
        p.plan_kafka_groups(&whole),
        Ok(KafkaGroupsOutcome::OverBudget)
    );
    let named = |g: &str, n: i32| KafkaGroupsReq::Fetch {
        group: g.into(),
        partitions: Some((0..n).map(|i| ("t".to_string(), i)).collect()),
    };
    // 300 rows of 4 000 bytes: past the pressed exemption.
    assert_eq!(
        p.plan_kafka_groups(&named("huge", 300)),
        Ok(KafkaGroupsOutcome::OverBudget)
    );
    match p.plan_kafka_groups(&named("big", 100)) {
        Ok(KafkaGroupsOutcome::Fetched(rows)) => assert_eq!(rows.len(), 100),
        other => panic!("{other:?}"),
    }
    // The next named fetch of the cycle is held to the (empty) room.
    assert_eq!(
        p.plan_kafka_groups(&named("big", 1)),
        Ok(KafkaGroupsOutcome::OverBudget)
    );
}

/// Review s20 kafka L1 (s21 lead C3): only the admin reads take the pops' quarter; a
/// consumer's named-partition fetch does not.
#[test]
fn a_consumers_named_fetch_is_no_admin_read() {
    use crate::plan::kafka_txn_reads::is_admin_read;
    use queenmq_protocol::Command;
    let fetch = |partitions| {
        Command::KafkaGroups(KafkaGroupsReq::Fetch {
            group: "g".into(),
            partitions,
        })
    };
    assert!(is_admin_read(&fetch(None)));
    assert!(is_admin_read(&Command::KafkaGroups(KafkaGroupsReq::List)));
    assert!(!is_admin_read(&fetch(Some(vec![("t".into(), 0)]))));
}
