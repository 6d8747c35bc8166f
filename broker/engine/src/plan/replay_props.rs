//! Property tests over random command sequences (issue 9): whatever the leader plans and
//! commits, (a) a fresh state applying the committed entries (the follower and replay path,
//! `apply_entry`) reaches the leader's state, (b) so does the leader's checkpoint read back,
//! and (c) a cycle planned but never committed leaves no trace in what is rebuilt from the
//! log: replaying gives the state from before it, and a leader rebuilt so goes on agreeing
//! with its log.
//!
//! States are compared through `state::canonical` (sorted text of every replicated row and
//! exact derived index; see there why not the checkpoint bytes). The case count is fixed; the
//! seed is random per run and printed with the shrunk sequence on failure, and
//! QUEEN_PROPTEST_SEED=<seed> replays it. Nothing is persisted to the repository.

use std::hash::{BuildHasher, Hasher};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use queenmq_protocol::{
    AckStatus, ConfigureReq, DlqAdminReq, DlqQuery, GroupAdminReq, KvExpiry, KvOp, KvReq, LockOp,
    LockReq, PopResult, PopSource, PushItem, QueueOptions, Setting, Subscription, TraceReq, TxnOp,
    TxnReq,
};

use super::fixture::{ack_items, item, pop_req, Fixture, SECOND};
use super::PopPlan;
use crate::state::canonical::canonical;
use crate::state::offlock_tests::reference_encode;
use crate::state::{begin_checkpoint, decode_state, encode_state};

const CASES: u32 = 128;
const QUEUES: [&str; 2] = ["q0", "q1"];
const PARTITIONS: [&str; 2] = ["a", "b"];
const GROUPS: [Option<&str>; 3] = [None, Some("g1"), Some("g2")];
const STATUSES: [AckStatus; 4] = [
    AckStatus::Completed,
    AckStatus::Failed,
    AckStatus::Retry,
    AckStatus::Dlq,
];

#[derive(Debug, Clone)]
enum Cmd {
    /// `n` messages; with `txn`, all carry transaction id t<txn> (a duplicate after the first).
    Push {
        q: usize,
        p: usize,
        n: usize,
        txn: Option<u8>,
    },
    Pop {
        q: usize,
        g: usize,
        batch: u32,
        lease: Option<u64>,
        auto_ack: bool,
        partition: bool,
        conflation: bool,
    },
    /// Dead-letter administration of the first message of an earlier pop (`kind`: delete,
    /// retry, purge of its queue).
    DlqAdmin {
        pop: usize,
        kind: usize,
    },
    /// Acks the messages of an earlier pop (by position among the pops that delivered).
    Ack {
        pop: usize,
        status: usize,
    },
    Extend {
        pop: usize,
    },
    /// Acks the first message of an earlier pop and pushes one message, as one bundle.
    Txn {
        pop: usize,
        q: usize,
        ack_first: bool,
    },
    Configure {
        q: usize,
        option: usize,
        value: i64,
    },
    Delete {
        q: usize,
    },
    /// Group administration of a named group: delete, seek to the end or to a time, or
    /// re-anchor its subscription.
    GroupAdmin {
        g: usize,
        q: usize,
        kind: usize,
    },
    /// A trace event on the first message of an earlier pop.
    Trace {
        pop: usize,
    },
    /// A KV write, a lock acquire or the expiry sweep (`kind`), on one of a few keys.
    Kv {
        key: usize,
        kind: usize,
        ttl: u64,
    },
    /// Schedules (a delay in ms, past ones included) or cancels timer k<key> of a queue.
    Timer {
        q: usize,
        key: u8,
        delay_ms: Option<i64>,
    },
    /// The tick: fires what is due (at most `max`).
    Fire {
        max: usize,
    },
    /// A Kafka group request (`kind`: commit, generation, offset delete, group delete).
    Kafka {
        group: usize,
        kind: usize,
        offset: i64,
    },
    /// A Kafka InitProducerId (`kind` 0 new, 1 naming `producer` at epoch 0) or an
    /// idempotent produce of `n` records (`kind` 2, 3: epoch 0, 1) at sequence `seq`.
    KafkaProducer {
        kind: usize,
        producer: i64,
        seq: i32,
        n: usize,
    },
    /// A Kafka transaction request of transactional id tx<tx> at its current (id, epoch):
    /// `kind` 0 init, 1 add partition `a % 2`, 2 add group g<a % 2>, 3 offset of that group
    /// with `a` bytes of metadata, 4 a transactional produce to partition `a % 2`, 5 commit,
    /// 6 abort, 7 the timeout sweep.
    KafkaTxn {
        tx: usize,
        kind: usize,
        a: usize,
    },
    /// A whole retention sweep, in the open cycle.
    Retain,
    /// Ends the cycle: what was planned is committed.
    Commit,
    /// Ends the cycle and moves the clock on.
    Advance {
        us: i64,
    },
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        4 => (0..2usize, 0..2usize, 1..4usize, prop::option::weighted(0.3, 0..4u8))
            .prop_map(|(q, p, n, txn)| Cmd::Push { q, p, n, txn }),
        4 => (0..2usize, 0..3usize, 1..5u32, prop::option::of(1..20u64), prop::bool::weighted(0.2),
              prop::bool::weighted(0.2), prop::bool::weighted(0.3))
            .prop_map(|(q, g, batch, lease, auto_ack, partition, conflation)| Cmd::Pop {
                q, g, batch, lease, auto_ack, partition, conflation
            }),
        1 => (0..8usize, 0..3usize).prop_map(|(pop, kind)| Cmd::DlqAdmin { pop, kind }),
        4 => (0..8usize, 0..4usize).prop_map(|(pop, status)| Cmd::Ack { pop, status }),
        1 => (0..8usize).prop_map(|pop| Cmd::Extend { pop }),
        1 => (0..8usize, 0..2usize, any::<bool>())
            .prop_map(|(pop, q, ack_first)| Cmd::Txn { pop, q, ack_first }),
        1 => (0..2usize, 0..9usize, 0..4i64)
            .prop_map(|(q, option, value)| Cmd::Configure { q, option, value }),
        1 => (0..2usize).prop_map(|q| Cmd::Delete { q }),
        1 => (1..3usize, 0..2usize, 0..4usize).prop_map(|(g, q, kind)| Cmd::GroupAdmin { g, q, kind }),
        1 => (0..8usize).prop_map(|pop| Cmd::Trace { pop }),
        2 => (0..2usize, 0..3u8, prop::option::weighted(0.8, -1000..40_000i64))
            .prop_map(|(q, key, delay_ms)| Cmd::Timer { q, key, delay_ms }),
        2 => (1..3usize).prop_map(|max| Cmd::Fire { max }),
        2 => Just(Cmd::Retain),
        2 => (0..3usize, 0..6usize, 1..40u64).prop_map(|(key, kind, ttl)| Cmd::Kv { key, kind, ttl }),
        2 => (0..2usize, 0..4usize, -1..50i64)
            .prop_map(|(group, kind, offset)| Cmd::Kafka { group, kind, offset }),
        2 => (0..4usize, 0..4i64, prop_oneof![0..6i32, Just(i32::MAX - 1)], 1..3usize)
            .prop_map(|(kind, producer, seq, n)| Cmd::KafkaProducer { kind, producer, seq, n }),
        6 => (prop::sample::select(vec![0usize, 0, 0, 1]), 0..8usize, 0..4usize)
            .prop_map(|(tx, kind, a)| Cmd::KafkaTxn { tx, kind, a }),
        2 => Just(Cmd::Commit),
        2 => prop_oneof![Just(1i64), Just(SECOND), Just(5 * SECOND), Just(30 * SECOND),
                         Just(700 * SECOND)]
            .prop_map(|us| Cmd::Advance { us }),
    ]
}

/// The option `option` of a small set, with a value that makes it matter in a short run.
fn option(option: usize, value: i64) -> QueueOptions {
    let mut o = QueueOptions::default();
    match option {
        0 => o.lease_time = Some(Setting::Value(1 + value * 5)),
        1 => o.retry_limit = Some(Setting::Value(value)),
        2 => o.delayed_processing = Some(Setting::Value(value * 2)),
        3 => o.window_buffer = Some(Setting::Value(value)),
        // Around the 600 s floor of the dedup memory, so keeping ids longer matters.
        4 => {
            o.dedup_window_seconds = Some(Setting::Value([0, 1, 900, 100_000][value as usize % 4]))
        }
        5 => o.dead_letter_queue = Some(Setting::Value(value % 2 == 0)),
        // Retention, each rule with the switch on or off and short ages.
        6 => {
            o.retention_enabled = Some(Setting::Value(value % 2 == 0));
            o.retention_seconds = Some(Setting::Value(value * 10));
        }
        7 => {
            o.retention_enabled = Some(Setting::Value(value != 3));
            o.completed_retention_seconds = Some(Setting::Value(value));
        }
        _ => o.max_wait_time_seconds = Some(Setting::Value(value * 3)),
    }
    o
}

/// Runs `cmds` on the leader; pops that delivered are remembered for later acks. With
/// `commits` false, Commit and Advance are skipped: everything stays in one open cycle.
fn run(fx: &mut Fixture, cmds: &[Cmd], pops: &mut Vec<PopResult>, commits: bool) {
    for c in cmds {
        match c {
            Cmd::Push { q, p, n, txn } => {
                let items: Vec<PushItem> = (0..*n)
                    .map(|k| {
                        let id = match txn {
                            Some(t) => format!("t{t}"),
                            None => format!("{}-{k}-{}", fx.cycle.number, fx.cycle.entry.len()),
                        };
                        item(QUEUES[*q], PARTITIONS[*p], &id)
                    })
                    .collect();
                let _ = fx.planner().plan_push(&items, None);
            }
            Cmd::Pop {
                q,
                g,
                batch,
                lease,
                auto_ack,
                partition,
                conflation,
            } => {
                let mut req = pop_req(QUEUES[*q], *batch);
                req.group = GROUPS[*g].map(str::to_string);
                req.lease_seconds = *lease;
                req.auto_ack = *auto_ack;
                req.conflation = *conflation;
                if *partition {
                    req.source = PopSource::Partition(QUEUES[*q].into(), PARTITIONS[0].into());
                }
                if *g == 2 {
                    req.subscription = Subscription::New;
                }
                if let Ok(PopPlan::Delivered(r)) = fx.planner().plan_pop(&req) {
                    pops.push(r);
                }
            }
            Cmd::Ack { pop, status } => {
                if let Some(r) = pops.get(*pop % pops.len().max(1)).cloned() {
                    fx.ack(&r, STATUSES[*status]);
                }
            }
            Cmd::Extend { pop } => {
                if let Some(r) = pops.get(*pop % pops.len().max(1)) {
                    let lease = r.lease_id.clone();
                    fx.planner().plan_extend(&lease);
                }
            }
            Cmd::Txn { pop, q, ack_first } => {
                let Some(r) = pops.get(*pop % pops.len().max(1)) else {
                    continue;
                };
                let Some(mut ack) = ack_items(r, AckStatus::Completed).into_iter().next() else {
                    continue;
                };
                // The pop's group, named (the queue-mode group is the default).
                ack.group = Some(r.consumer_group.clone());
                let ack = TxnOp::Ack(ack);
                let id = format!("x{}-{}", fx.cycle.number, fx.cycle.entry.len());
                let push = TxnOp::Push(vec![item(QUEUES[*q], PARTITIONS[1], &id)]);
                let ops = if *ack_first {
                    vec![ack, push]
                } else {
                    vec![push, ack]
                };
                let req = TxnReq {
                    ops,
                    required_leases: Vec::new(),
                    ..Default::default()
                };
                let _ = fx.planner().plan_transaction(&req, None);
            }
            Cmd::Configure {
                q,
                option: o,
                value,
            } => {
                let req = ConfigureReq {
                    queue: QUEUES[*q].into(),
                    namespace: Some(format!("ns{}", value % 2)),
                    task: None,
                    options: option(*o, *value),
                    replace: false,
                };
                let _ = fx.planner().plan_configure(&req);
            }
            Cmd::Delete { q } => {
                fx.planner().plan_delete_queue(QUEUES[*q]);
            }
            Cmd::GroupAdmin { g, q, kind } => {
                let group = GROUPS[*g].unwrap_or("g1").to_string();
                let queue = QUEUES[*q].to_string();
                let req = match kind {
                    0 => GroupAdminReq::Delete {
                        group,
                        queue: Some(queue),
                        delete_metadata: true,
                    },
                    1 | 2 => GroupAdminReq::Seek {
                        group,
                        queue,
                        to_end: *kind == 1,
                        timestamp_us: (*kind == 2).then_some(fx.cycle.now_us - 10 * SECOND),
                    },
                    _ => GroupAdminReq::Subscription {
                        group,
                        timestamp_us: fx.cycle.now_us,
                    },
                };
                let _ = fx.planner().plan_group_admin(&req);
            }
            Cmd::DlqAdmin { pop, kind } => {
                let Some(m) = pops
                    .get(*pop % pops.len().max(1))
                    .and_then(|r| r.messages.first())
                else {
                    continue;
                };
                let (partition_id, transaction_id) =
                    (m.partition_id.to_string(), m.transaction_id.clone());
                let req = match kind {
                    0 => DlqAdminReq::Delete {
                        partition_id,
                        transaction_id,
                    },
                    1 => DlqAdminReq::Retry {
                        partition_id,
                        transaction_id,
                    },
                    _ => DlqAdminReq::Purge(DlqQuery {
                        queue: Some(m.queue.to_string()),
                        ..Default::default()
                    }),
                };
                let _ = fx.planner().plan_dlq_admin(&req);
            }
            Cmd::Trace { pop } => {
                let Some(m) = pops
                    .get(*pop % pops.len().max(1))
                    .and_then(|r| r.messages.first())
                else {
                    continue;
                };
                let req = TraceReq {
                    transaction_id: m.transaction_id.clone(),
                    partition_id: m.partition_id.to_string(),
                    group: m.consumer_group.to_string(),
                    names: vec!["n".into()],
                    event_type: "info".into(),
                    data: bytes::Bytes::from_static(b"{}"),
                };
                let _ = fx.planner().plan_trace(&req);
            }
            Cmd::Kv { key, kind, ttl } => {
                let (ns, key) = ("ns".to_string(), format!("k{key}"));
                let expiry = KvExpiry::Seconds(*ttl);
                let op = match kind {
                    0 | 1 => KvOp::Put {
                        ns,
                        key,
                        value: format!("{ttl}"),
                        expiry,
                        expect: None,
                        if_absent: *kind == 1,
                        required: false,
                    },
                    2 => KvOp::Incr {
                        ns,
                        key,
                        delta: 1,
                        min: None,
                        max: Some(3),
                        expiry,
                        required: false,
                    },
                    3 => KvOp::Delete {
                        ns,
                        key,
                        expect: None,
                        required: false,
                    },
                    4 => {
                        let op = LockOp::Acquire {
                            name: "lock".into(),
                            ttl_seconds: *ttl,
                            owner: key,
                            limit: 2,
                        };
                        let _ = fx.planner().plan_locks(&LockReq { ops: vec![op] });
                        continue;
                    }
                    _ => {
                        fx.planner().plan_kv_sweep(2, usize::MAX);
                        continue;
                    }
                };
                let _ = fx.planner().plan_kv(&KvReq { ops: vec![op] });
            }
            Cmd::Kafka {
                group,
                kind,
                offset,
            } => {
                use queenmq_protocol::kafka_groups::{KafkaGroupsReq as K, KafkaOffsetCommit};
                let group = format!("kg{group}");
                let req = match kind {
                    0 => K::Commit {
                        group,
                        offsets: vec![KafkaOffsetCommit {
                            topic: QUEUES[(*offset as usize) % 2].to_string(),
                            partition: (*offset).rem_euclid(3) as i32,
                            offset: *offset,
                            leader_epoch: -1,
                            metadata: format!("m{offset}"),
                        }],
                    },
                    1 => K::NextGeneration {
                        group,
                        protocol_type: "consumer".into(),
                        protocol_name: "range".into(),
                    },
                    2 => K::OffsetDelete {
                        group,
                        partitions: vec![(QUEUES[0].to_string(), (*offset).rem_euclid(3) as i32)],
                    },
                    _ => K::Delete {
                        groups: vec![group],
                    },
                };
                let _ = fx.planner().plan_kafka_groups(&req);
            }
            Cmd::KafkaProducer {
                kind,
                producer,
                seq,
                n,
            } => {
                use queenmq_protocol::kafka_producers::*;
                // A minute: the 700 s advances expire producers within a run.
                let expiration_ms = 60_000;
                if *kind < 2 {
                    let req = KafkaProducersReq::InitProducerId {
                        current: (*kind == 1).then_some((*producer, 0)),
                        expiration_ms,
                    };
                    let _ = fx.planner().plan_kafka_producers(&req);
                    continue;
                }
                let (queue, partition) = (QUEUES[0].to_string(), PARTITIONS[0].to_string());
                let items: Vec<PushItem> = (0..*n)
                    .map(|i| PushItem {
                        queue: queue.clone(),
                        partition: partition.clone(),
                        payload: bytes::Bytes::from(format!("{i}")),
                        transaction_id: None,
                        trace_id: None,
                    })
                    .collect();
                let req = KafkaProduceReq {
                    batches: Vec::new(),
                    items,
                    guards: vec![ProducerGuard {
                        queue,
                        partition,
                        start: 0,
                        end: *n,
                        batch: ProducerBatch {
                            producer_id: *producer,
                            epoch: (*kind - 2) as i16,
                            first_seq: *seq,
                            last_seq: increment_sequence(*seq, *n as i32 - 1),
                            records: *n,
                        },
                    }],
                    expiration_ms,
                    max_producers: 3,
                    // Replay props run in fixture time: any idleness is enough.
                    evict_min_idle_ms: 0,
                    transactional_id: None,
                };
                let _ = fx.planner().plan_kafka_produce(&req, None);
            }
            Cmd::KafkaTxn { tx, kind, a } => kafka_txn(fx, *tx, *kind, *a),
            Cmd::Timer { q, key, delay_ms } => {
                let (queue, key) = (QUEUES[*q].to_string(), format!("k{key}"));
                let op = match delay_ms {
                    Some(delay_ms) => {
                        queenmq_protocol::TimerOp::Schedule(queenmq_protocol::TimerSchedule {
                            queue,
                            key: key.clone(),
                            partition: PARTITIONS[0].into(),
                            payload: bytes::Bytes::from_static(b"{}"),
                            delay_ms: *delay_ms,
                            txn: format!("timer-{key}-{delay_ms}"),
                        })
                    }
                    None => queenmq_protocol::TimerOp::Cancel {
                        queue,
                        key,
                        txn: None,
                    },
                };
                let req = queenmq_protocol::TimersReq { ops: vec![op] };
                let _ = fx.planner().plan_timers(&req);
            }
            Cmd::Fire { max } => {
                fx.planner().fire_timers(*max, 1 << 20, 1 << 20);
            }
            Cmd::Retain => {
                let mut sweep = super::RetentionSweep::default();
                sweep.start();
                while sweep.running() {
                    fx.planner().plan_retention(&mut sweep, 1 << 20);
                }
            }
            Cmd::Commit if commits => {
                fx.commit();
            }
            Cmd::Advance { us } if commits => fx.advance(*us),
            Cmd::Commit | Cmd::Advance { .. } => {}
        }
    }
}

/// One [`Cmd::KafkaTxn`]: transactions on partitions "0" and "1" of q0.
fn kafka_txn(fx: &mut Fixture, tx: usize, kind: usize, a: usize) {
    use queenmq_protocol::kafka_producers::*;
    use queenmq_protocol::kafka_txns::*;
    let txn_id = format!("tx{tx}");
    let row = fx.st.kafka_txns.get(&txn_id);
    let (producer_id, epoch) = row.map_or((0, 0), |r| (r.producer_id, r.epoch));
    // Without a row every request is INVALID_PRODUCER_ID_MAPPING: init first.
    let kind = if row.is_none() { 0 } else { kind };
    let limits = TxnLimits::default();
    let (topic, index, group) = (QUEUES[0].to_string(), (a % 2) as i32, format!("g{}", a % 2));
    let req = match kind {
        0 => KafkaTxnReq::Init {
            txn_id,
            timeout_ms: 30_000,
            current: None,
            limits,
        },
        1 => KafkaTxnReq::AddPartitions {
            txn_id,
            producer_id,
            epoch,
            partitions: vec![TxnPartition {
                topic,
                index,
                count: 2,
            }],
            limits,
        },
        2 => KafkaTxnReq::AddOffsets {
            txn_id,
            producer_id,
            epoch,
            group,
            limits,
        },
        3 => {
            // The group is added first, as a client does before TxnOffsetCommit.
            let _ = fx.planner().plan_kafka_txn(&KafkaTxnReq::AddOffsets {
                txn_id: txn_id.clone(),
                producer_id,
                epoch,
                group: group.clone(),
                limits,
            });
            KafkaTxnReq::OffsetCommit {
                txn_id,
                producer_id,
                epoch,
                group,
                offsets: vec![TxnOffset {
                    topic,
                    partition: index,
                    offset: a as i64,
                    leader_epoch: -1,
                    metadata: "m".repeat(a * 100),
                }],
                limits,
            }
        }
        4 => {
            let partition = index.to_string();
            // The next sequence of this producer on this partition, so that batches land.
            let pid = fx
                .st
                .queue_named(&topic)
                .and_then(|q| q.partitions.get(&partition, &fx.st.partitions));
            let seq = pid
                .and_then(|pid| fx.st.kafka_producers.get(producer_id)?.partitions.get(&pid))
                .filter(|p| p.epoch == epoch)
                .and_then(|p| p.batches.back())
                .map_or(0, |b| b.last_seq.wrapping_add(1));
            let req = KafkaProduceReq {
                batches: Vec::new(),
                items: vec![PushItem {
                    queue: topic.clone(),
                    partition: partition.clone(),
                    payload: bytes::Bytes::from_static(b"1"),
                    transaction_id: None,
                    trace_id: None,
                }],
                guards: vec![ProducerGuard {
                    queue: topic,
                    partition,
                    start: 0,
                    end: 1,
                    batch: ProducerBatch {
                        producer_id,
                        epoch,
                        first_seq: seq,
                        last_seq: seq,
                        records: 1,
                    },
                }],
                expiration_ms: 60_000,
                max_producers: 3,
                evict_min_idle_ms: 0,
                transactional_id: Some(txn_id),
            };
            let _ = fx.planner().plan_kafka_produce(&req, None);
            return;
        }
        5 | 6 => KafkaTxnReq::End {
            txn_id,
            producer_id,
            epoch,
            commit: kind == 5,
            may_commit_offsets: true,
            limits,
        },
        _ => {
            fx.planner().sweep_kafka_txns(1 << 20);
            return;
        }
    };
    let _ = fx.planner().plan_kafka_txn(&req);
}

fn check(label: &str, got: &str, want: &str) -> Result<(), TestCaseError> {
    if got == want {
        return Ok(());
    }
    let at = got
        .lines()
        .zip(want.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    let line = |s: &str| s.lines().nth(at).unwrap_or("<end>").to_string();
    Err(TestCaseError::fail(format!(
        "{label}: first difference at line {at}:\n  got  {}\n  want {}",
        line(got),
        line(want)
    )))
}

/// Runs `body` over CASES generated sequences under a seed it prints on failure.
fn property<S: Strategy>(
    name: &str,
    strategy: S,
    body: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let seed = std::env::var("QUEEN_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        });
    let config = Config {
        cases: CASES,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    match runner.run(&strategy, body) {
        Ok(()) => {}
        Err(TestError::Fail(why, input)) => panic!(
            "{name} failed (rerun with QUEEN_PROPTEST_SEED={seed}): {why}\nminimal input: {input:#?}"
        ),
        Err(TestError::Abort(why)) => {
            panic!("{name} aborted (QUEEN_PROPTEST_SEED={seed}): {why}")
        }
    }
}

#[test]
fn followers_and_checkpoints_reach_the_leaders_state() {
    property(
        "leader = replay = checkpoint",
        prop::collection::vec(cmd(), 1..64),
        |cmds| {
            let mut fx = Fixture::new();
            run(&mut fx, &cmds, &mut Vec::new(), true);
            fx.commit();
            let leader = canonical(&fx.st);
            check("(a) replay", &canonical(&fx.replay()), &leader)?;
            let ready = begin_checkpoint(&fx.st).encode();
            let told = ready.encoded_len();
            let blob = ready.finish();
            // The memory account holds a checkpoint by this length before it is built.
            prop_assert_eq!(told, blob.len(), "encoded_len");
            let back = decode_state(&blob)
                .map_err(|e| TestCaseError::fail(format!("(b) checkpoint: {e}")))?;
            check("(b) checkpoint", &canonical(&back), &leader)
        },
    );
}

/// The checkpoint's partitions are encoded off the state lock from shared chunks: whatever
/// the engine plans and commits after `begin_checkpoint`, the bytes are those of the state at
/// that moment, as the old encoding (all under the lock) wrote them.
#[test]
fn a_checkpoint_holds_its_moment_while_the_engine_goes_on() {
    property(
        "checkpoint taken, engine goes on",
        (
            prop::collection::vec(cmd(), 1..48),
            prop::collection::vec(cmd(), 1..48),
        ),
        |(before, during)| {
            let mut fx = Fixture::new();
            let mut pops = Vec::new();
            run(&mut fx, &before, &mut pops, true);
            fx.commit();
            let want = reference_encode(&fx.st);
            let pending = begin_checkpoint(&fx.st);
            run(&mut fx, &during, &mut pops, true);
            fx.commit();
            let ready = pending.encode();
            run(&mut fx, &during, &mut pops, true);
            fx.commit();
            let blob = ready.finish();
            prop_assert!(
                blob == want,
                "the off-lock encoding differs from the old one"
            );
            prop_assert!(
                encode_state(&fx.st) == reference_encode(&fx.st),
                "and so does a checkpoint of the state the engine went on to"
            );
            // The state the engine went on to, written through overlays while the checkpoint
            // held the shards, against one rebuilt from the log without any (review s30 M2).
            check("replay", &canonical(&fx.replay()), &canonical(&fx.st))
        },
    );
}

#[test]
fn an_uncommitted_cycle_leaves_nothing_in_what_the_log_rebuilds() {
    property(
        "discarded tail",
        (
            prop::collection::vec(cmd(), 0..32),
            prop::collection::vec(cmd(), 1..12),
        ),
        |(prefix, tail)| {
            let mut fx = Fixture::new();
            let mut pops = Vec::new();
            run(&mut fx, &prefix, &mut pops, true);
            fx.commit();
            let before = canonical(&fx.st);
            let entries = fx.log.entries.len();
            run(&mut fx, &tail, &mut pops, false);
            fx.discard();
            prop_assert_eq!(fx.log.entries.len(), entries, "the tail reached the log");
            check(
                "(c) rebuilt after discarding",
                &canonical(&fx.replay()),
                &before,
            )?;
            // The rebuilt leader goes on serving (the answers of the discarded cycle, its
            // leases and ids, never happened) and still agrees with its log.
            fx.rebuild();
            run(&mut fx, &tail, &mut pops, true);
            fx.commit();
            let leader = canonical(&fx.st);
            check(
                "(c) replay after the rebuild",
                &canonical(&fx.replay()),
                &leader,
            )?;
            let back = decode_state(&encode_state(&fx.st))
                .map_err(|e| TestCaseError::fail(format!("(c) checkpoint: {e}")))?;
            check(
                "(c) checkpoint after the rebuild",
                &canonical(&back),
                &leader,
            )
        },
    );
}

/// What (c) does not claim: the leader's own memory. Planning applies each effect at once, so
/// later commands of a cycle see earlier ones, and a discarded cycle leaves the leader's state
/// ahead of its log; only a rebuild from the log gives the state back (today the fail-stop
/// restart in `Engine::cycle`). When issue 9's overlay of uncommitted effects lands, the first
/// assertion turns and this test goes.
#[test]
fn a_discarded_cycle_leaves_the_leaders_memory_ahead_of_its_log() {
    let mut fx = Fixture::new();
    fx.push("q0", "a", 1);
    fx.commit();
    let before = canonical(&fx.st);
    fx.push("q0", "a", 1);
    fx.discard();
    assert_ne!(canonical(&fx.st), before, "planning wrote into the state");
    assert_eq!(canonical(&fx.replay()), before);
}
