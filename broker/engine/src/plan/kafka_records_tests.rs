//! Kafka DeleteRecords on the fixture: the floor lands exactly on the requested offset, even
//! inside one write's run, pops and new groups start there, and a follower and a checkpoint
//! reach the same floor.

use queenmq_protocol::kafka_records::*;

use super::fixture::Fixture;

fn delete(fx: &mut Fixture, queue: &str, partition: &str, offset: i64) -> DeleteRecordsVerdict {
    let req = DeleteRecordsReq {
        targets: vec![DeleteRecordsTarget {
            queue: queue.into(),
            partition: partition.into(),
            offset,
        }],
    };
    match fx.planner().plan_kafka_delete_records(&req) {
        Ok(v) => v[0],
        Err(e) => panic!("delete records refused: {e}"),
    }
}

fn partition<'a>(fx: &'a Fixture, queue: &str) -> &'a crate::state::model::Partition {
    let qid = fx.st.queue_by_name[queue];
    let pid = fx.st.queues[&qid]
        .partitions
        .get("0", &fx.st.partitions)
        .expect("partition");
    fx.st.partitions.get(&pid).expect("partition")
}

fn low(fx: &Fixture, queue: &str) -> u64 {
    partition(fx, queue).low_offset()
}

#[test]
fn the_floor_lands_exactly_on_the_offset_even_inside_one_write() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 10);
    fx.commit();
    let first = fx.pop("t", Some("early"), 2, None);
    assert_eq!(first.messages[0].offset, 0);
    assert_eq!(
        delete(&mut fx, "t", "0", 4),
        DeleteRecordsVerdict::Deleted { low_watermark: 4 }
    );
    assert_eq!(low(&fx, "t"), 4);
    assert_eq!(
        floor(&fx, "t"),
        4,
        "inside the write, the floor hides what is below"
    );
    fx.assert_replays();
    let popped = fx.pop("t", Some("late"), 1, None);
    assert_eq!(
        popped.messages[0].offset, 4,
        "a new group starts at the floor"
    );
    let early = fx.pop("t", Some("early"), 1, None);
    assert_eq!(early.messages[0].offset, 4, "a group below it moves up");
    assert_eq!(
        delete(&mut fx, "t", "0", 2),
        DeleteRecordsVerdict::Deleted { low_watermark: 4 },
        "never lowered"
    );
    assert_eq!(
        delete(&mut fx, "t", "0", 11),
        DeleteRecordsVerdict::OutOfRange
    );
    assert_eq!(
        delete(&mut fx, "t", "0", -2),
        DeleteRecordsVerdict::OutOfRange
    );
    assert_eq!(
        delete(&mut fx, "t", "0", HIGH_WATERMARK),
        DeleteRecordsVerdict::Deleted { low_watermark: 10 }
    );
    assert_eq!(low(&fx, "t"), 10);
    assert_eq!(
        floor(&fx, "t"),
        0,
        "no run left: the floor decides nothing and is cleared"
    );
    fx.assert_replays();
}

fn floor(fx: &Fixture, queue: &str) -> u64 {
    partition(fx, queue).floor()
}

#[test]
fn unknown_queues_and_empty_partitions_answer_as_kafka_does() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 1);
    assert_eq!(
        delete(&mut fx, "nope", "0", 0),
        DeleteRecordsVerdict::UnknownQueue
    );
    // Partition "5" has no message yet: its log is 0..0.
    assert_eq!(
        delete(&mut fx, "t", "5", HIGH_WATERMARK),
        DeleteRecordsVerdict::Deleted { low_watermark: 0 }
    );
    assert_eq!(
        delete(&mut fx, "t", "5", 1),
        DeleteRecordsVerdict::OutOfRange
    );
    fx.assert_replays();
}

#[test]
fn one_command_moves_cursors_of_a_bounded_number_of_groups() {
    let mut fx = Fixture::new();
    fx.push("t", "0", 2);
    fx.push("t", "1", 2);
    fx.commit();
    // Each target costs 1 + the queue's groups: two partitions of a queue with this many
    // groups pass the command's work.
    let groups = DELETE_RECORDS_WORK_PER_COMMAND / 2;
    for g in 0..groups {
        fx.pop("t", Some(&format!("g{g}")), 1, None);
    }
    fx.commit();
    let target = |partition: &str| DeleteRecordsTarget {
        queue: "t".into(),
        partition: partition.into(),
        offset: HIGH_WATERMARK,
    };
    let req = DeleteRecordsReq {
        targets: vec![target("0"), target("1")],
    };
    let verdicts = match fx.planner().plan_kafka_delete_records(&req) {
        Ok(v) => v,
        Err(e) => panic!("delete records refused: {e}"),
    };
    assert_eq!(
        verdicts,
        vec![
            DeleteRecordsVerdict::Deleted { low_watermark: 2 },
            DeleteRecordsVerdict::Busy
        ]
    );
    fx.commit();
    assert_eq!(
        delete(&mut fx, "t", "1", HIGH_WATERMARK),
        DeleteRecordsVerdict::Deleted { low_watermark: 2 },
        "the next command takes it"
    );
    fx.assert_replays();
}
