//! The engine loop on an injected clock: a lease planned at one clock reading expires when that
//! clock passes it, whatever the wall clock says, and no test waits for it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use queenmq_protocol::{Command, Outcome, PopResult, PushReq, QueenError};
use queenmq_storage::StateStore;
use tokio::sync::{mpsc, oneshot, watch};

use super::apply_handler::apply_entry;
use super::{Engine, EngineConfig, Job, Shared};
use crate::state::State;
use crate::time::Clock;
use queenmq_engine::log::{LogError, LogStatus, ProposeFuture, ReplicatedLog};
use queenmq_engine::plan::fixture::{item, pop_req, NOW, SECOND};

#[derive(Debug)]
struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now_us(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A one-node log that commits each proposal at once and applies it as the Raft callback does.
struct InstantLog {
    entries: Mutex<Vec<Vec<u8>>>,
    shared: Arc<Shared>,
}

/// A state store in `dir`, an empty state and an [`InstantLog`] applying to it.
fn instant_group(dir: &std::path::Path) -> (Arc<StateStore>, Arc<Shared>, Arc<InstantLog>) {
    let store = Arc::new(StateStore::open(&dir.join("state.redb")).unwrap());
    let shared = Shared::new(State::default());
    let log = Arc::new(InstantLog {
        entries: Mutex::new(Vec::new()),
        shared: shared.clone(),
    });
    (store, shared, log)
}

impl ReplicatedLog for InstantLog {
    fn propose(&self, payload: Vec<u8>) -> ProposeFuture {
        let mut entries = self.entries.lock().unwrap();
        entries.push(payload.clone());
        let index = entries.len() as u64;
        let applied = apply_entry(&mut self.shared.lock(), index, 1, &payload)
            .map(|()| (index, 1))
            .map_err(LogError::propose);
        Box::pin(async move { applied })
    }
    fn read(&self, index: u64) -> Result<Option<Vec<u8>>, LogError> {
        let entries = self.entries.lock().unwrap();
        Ok(usize::try_from(index)
            .ok()
            .and_then(|i| entries.get(i.checked_sub(1)?))
            .cloned())
    }
    fn status(&self) -> LogStatus {
        LogStatus::default()
    }
}

async fn call(tx: &mpsc::Sender<Job>, cmd: Command) -> Result<Outcome, QueenError> {
    let (reply, rx) = oneshot::channel();
    let job = Job {
        ctx: Default::default(),
        cmd,
        reply,
    };
    assert!(tx.send(job).await.is_ok(), "the engine is running");
    rx.await.expect("the engine answers")
}

async fn pop(tx: &mpsc::Sender<Job>) -> PopResult {
    let mut req = pop_req("q", 10);
    req.lease_seconds = Some(10);
    match call(tx, Command::Pop(req)).await {
        Ok(Outcome::Popped(r)) => r,
        other => panic!("a pop answers popped, not {:?}", other.err()),
    }
}

#[tokio::test]
async fn a_lease_expires_when_the_injected_clock_passes_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, shared, log) = instant_group(dir.path());
    let clock = Arc::new(ManualClock(AtomicI64::new(NOW)));
    let cfg = EngineConfig {
        clock: clock.clone(),
        ..EngineConfig::default()
    };
    let (tx, jobs) = super::job_queue(cfg.queue_depth);
    let engine = Engine::new(shared.clone(), log, store, cfg, jobs.lock_owned().await);
    let (stop, shutdown) = watch::channel(false);
    let running = tokio::spawn(engine.run(shutdown));

    let push = PushReq {
        items: vec![item("q", "p", "only")],
    };
    assert!(call(&tx, Command::Push(push)).await.is_ok());
    let first = pop(&tx).await;
    assert_eq!(first.messages.len(), 1);
    assert!(
        first.messages[0].created_at_us < NOW + SECOND,
        "stamped by the injected clock, not the wall"
    );
    assert!(pop(&tx).await.messages.is_empty(), "the lease is live");

    clock.0.fetch_add(11 * SECOND, Ordering::SeqCst);
    let again = pop(&tx).await;
    let seen: Vec<(String, u32)> = again
        .messages
        .iter()
        .map(|m| (m.transaction_id.clone(), m.delivery_attempt))
        .collect();
    assert_eq!(seen, vec![("only".to_string(), 2)]);

    assert!(stop.send(true).is_ok());
    assert_eq!(running.await.unwrap(), Ok(()), "the engine stopped cleanly");
    assert_eq!(shared.lock().applied.map(|a| a.0), Some(3));
}

/// Free bytes fixed by the test.
struct Fixed(u64);

impl crate::disk_gate::FreeSpace for Fixed {
    fn available(&self) -> std::io::Result<u64> {
        Ok(self.0)
    }
}

#[tokio::test]
async fn a_push_above_the_limits_is_refused_for_good_even_on_a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (store, shared, log) = instant_group(dir.path());
    let disk = crate::disk_gate::DiskGate::new(Box::new(Fixed(1_000)), 1 << 20);
    disk.refresh();
    assert!(disk.is_full());
    let cfg = EngineConfig {
        record_limit: 128 << 10,
        disk: Some(disk),
        ..EngineConfig::default()
    };
    let (tx, jobs) = super::job_queue(cfg.queue_depth);
    let engine = Engine::new(shared.clone(), log, store, cfg, jobs.lock_owned().await);
    let (stop, shutdown) = watch::channel(false);
    let running = tokio::spawn(engine.run(shutdown));

    let mut big = item("q", "p", "big");
    big.payload = bytes::Bytes::from(vec![b'x'; 128 << 10]);
    let err = call(&tx, Command::Push(PushReq { items: vec![big] }))
        .await
        .expect_err("refused");
    assert_eq!(
        err.code,
        queenmq_protocol::ErrorCode::PayloadTooLarge,
        "{}",
        err.message
    );
    let err = call(
        &tx,
        Command::Push(PushReq {
            items: vec![item("q", "p", "small")],
        }),
    )
    .await
    .expect_err("refused");
    assert_eq!(
        err.code,
        queenmq_protocol::ErrorCode::StorageFull,
        "{}",
        err.message
    );

    assert!(stop.send(true).is_ok());
    assert_eq!(running.await.unwrap(), Ok(()));
}

#[test]
fn a_failed_cycle_keeps_refusals_and_answers_reads_503() {
    use super::failed_cycle_reply;
    use queenmq_protocol::ErrorCode;
    let refusal = QueenError::new(ErrorCode::BadRequest, "decided");
    let kept = failed_cycle_reply(Err(refusal), true, true).expect_err("kept");
    assert_eq!(kept.code, ErrorCode::BadRequest);
    let read = failed_cycle_reply(Ok(Outcome::Popped(Default::default())), false, true)
        .expect_err("not answered");
    assert_eq!(
        read.code,
        ErrorCode::Unavailable,
        "a read is not a write refused 507"
    );
    let write = failed_cycle_reply(Ok(Outcome::Popped(Default::default())), true, true)
        .expect_err("not made");
    assert_eq!(write.code, ErrorCode::StorageFull);
    let write = failed_cycle_reply(Ok(Outcome::Popped(Default::default())), true, false)
        .expect_err("not made");
    assert_eq!(write.code, ErrorCode::Unavailable);
}

#[test]
fn a_copy_gets_no_room_on_a_full_disk_and_no_loan_under_half_the_reserve() {
    // Review C1: compaction copies are held to the gate like due timers. The entry cap equals
    // what is already planned, so the compactor has no room above the reserve at all.
    let limits = queenmq_engine::limits::Limits::new(64 << 20, 4 << 20, 16);
    let full = crate::disk_gate::DiskGate::new(Box::new(Fixed(1_000)), 1 << 20);
    full.refresh();
    assert!(full.is_full());
    assert_eq!(super::gated_limits(&limits, Some(&full), 300), (300, 300));
    // Review s16 H1: no loan under half the reserve (it once lent all 700 bytes left).
    assert_eq!(full.lend(300).bytes(), 0);
    // 2 MiB free over a 1 MiB reserve: a copy may take the MiB above it, and the loan.
    let room = crate::disk_gate::DiskGate::new(Box::new(Fixed(2 << 20)), 1 << 20);
    room.refresh();
    assert!(!room.is_full());
    let (_, copy_max) = super::gated_limits(&limits, Some(&room), 0);
    assert!(copy_max <= 1 << 20, "{copy_max}");
    assert!(copy_max > 0);
    assert_eq!(room.lend(0).bytes(), (1 << 20) / 8);
    assert_eq!(
        super::gated_limits(&limits, None, 0),
        (limits.cycle_bytes, limits.max_entry_bytes)
    );
}

#[test]
fn copies_take_what_the_cycle_cap_leaves_and_the_entry_cap_only_alone() {
    // Review C4: with client work planned, a copy may not grow the entry past the cycle cap
    // (it was given the entry cap, 256 MiB, and held back every later job).
    assert_eq!(super::copy_cap(false, 4 << 20, 256 << 20), 4 << 20);
    assert_eq!(super::copy_cap(true, 4 << 20, 256 << 20), 256 << 20);
}

/// Review s17 lead H1: a cycle keeps every read answer until its entry commits, so 64
/// DescribeProducers of 100 000 producers each held 6.4 M views at once. The cycle's reads
/// now share one budget: what they list together stays within it, the rest is OverBudget.
#[tokio::test]
async fn the_kafka_reads_of_one_cycle_share_one_answer_budget() {
    use queenmq_engine::state::kafka_producers::BatchRow;
    use queenmq_protocol::kafka_txn_reads::*;
    use queenmq_protocol::{ReadAnswer, ReadReq};

    const PARTITIONS: i32 = 100;
    const READS: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let (store, shared, log) = instant_group(dir.path());
    let cfg = EngineConfig::default();
    assert!(cfg.max_batch >= READS);
    let (tx, jobs) = super::job_queue(cfg.queue_depth);
    let engine = Engine::new(shared.clone(), log, store, cfg, jobs.lock_owned().await);
    let (stop, shutdown) = watch::channel(false);
    let running = tokio::spawn(engine.run(shutdown));

    let items = (0..PARTITIONS)
        .map(|p| item("t", &p.to_string(), &format!("m{p}")))
        .collect();
    assert!(call(&tx, Command::Push(PushReq { items })).await.is_ok());
    {
        // Producer states put in by hand: 1 000 producers on each partition.
        let mut st = shared.lock();
        let pids: Vec<u64> = {
            let q = st.queue_named("t").expect("the queue");
            (0..PARTITIONS)
                .filter_map(|p| q.partitions.get(&p.to_string(), &st.partitions))
                .collect()
        };
        assert_eq!(pids.len(), PARTITIONS as usize);
        let one = BatchRow {
            first_seq: 0,
            last_seq: 0,
            base_offset: 0,
            records: 1,
        };
        for id in 0..MAX_PRODUCERS_PER_PARTITION as i64 {
            for pid in &pids {
                st.kafka_producers.batch(id, *pid, 0, one, NOW);
            }
        }
    }
    let asked: Vec<(String, i32)> = (0..PARTITIONS).map(|p| ("t".to_string(), p)).collect();
    // Queued without yielding, so the engine takes all of them into one cycle.
    let mut answers = Vec::new();
    for _ in 0..READS {
        let (reply, rx) = oneshot::channel();
        let read = KafkaTxnRead::Producers {
            partitions: asked.clone(),
        };
        let job = Job {
            ctx: Default::default(),
            cmd: Command::Read(ReadReq::KafkaTxns(read)),
            reply,
        };
        assert!(tx.try_send(job).is_ok(), "room in the job queue");
        answers.push(rx);
    }
    let (mut listed, mut over, mut full) = (0usize, 0usize, 0usize);
    for rx in answers {
        let got = match rx.await.expect("the engine answers") {
            Ok(Outcome::Read(ReadAnswer::KafkaTxns(KafkaTxnReadAnswer::Producers(v)))) => v,
            other => panic!("not a producers answer: {:?}", other.err()),
        };
        assert_eq!(got.len(), asked.len());
        for p in &got {
            match p {
                PartitionProducers::Listed(v) => listed += v.len(),
                PartitionProducers::OverBudget => over += 1,
                PartitionProducers::NoTopic => panic!("the topic exists"),
            }
        }
        full += usize::from(
            got.iter()
                .all(|p| matches!(p, PartitionProducers::Listed(v) if v.len() == MAX_PRODUCERS_PER_PARTITION)),
        );
    }
    assert!(listed <= MAX_READ_ENTRIES_PER_CYCLE, "{listed} listed");
    let per_read = PARTITIONS as usize * MAX_PRODUCERS_PER_PARTITION;
    assert!(
        full >= MAX_READ_ENTRIES_PER_CYCLE / per_read,
        "the budget is spent on whole reads first: {full}"
    );
    assert!(over > 0, "the rest is left for a retry");
    assert_eq!(
        listed + over * MAX_PRODUCERS_PER_PARTITION,
        READS * per_read
    );

    assert!(stop.send(true).is_ok());
    assert_eq!(running.await.unwrap(), Ok(()));
}

#[tokio::test]
async fn a_skipped_checkpoint_makes_the_compactor_due_again() {
    // Review s18 compactor H1: a skipped checkpoint did nothing, and on a full node whose
    // floor segment pins the log every checkpoint is skipped: a compactor that had stopped
    // looking never looked again, and writes stayed refused until an operator freed space.
    let dir = tempfile::tempdir().unwrap();
    let (store, shared, log) = instant_group(dir.path());
    let cfg = EngineConfig::default();
    let (_tx, jobs) = super::job_queue(cfg.queue_depth);
    let mut engine = Engine::new(shared, log, store, cfg, jobs.lock_owned().await);
    assert!(
        engine.compactor.is_due(),
        "due at birth (a full node may borrow)"
    );
    engine.compactor.rest();
    engine.finish_save(Ok(Ok(None)));
    assert!(engine.compactor.is_due());
}

/// Review s31 ckpt L1: the engine folds the overlays a checkpoint left behind, also in a
/// chunk nothing writes again (which the write path would never fold). A snapshot the test
/// holds stands in for a checkpoint's; a later push, to another chunk, makes the engine
/// checkpoint again, and that save's end is what starts the engine's folds.
#[tokio::test]
async fn the_engine_folds_the_overlays_of_a_chunk_nothing_writes_again() {
    let dir = tempfile::tempdir().unwrap();
    let (store, shared, log) = instant_group(dir.path());
    let cfg = EngineConfig {
        checkpoint_interval: std::time::Duration::from_millis(20),
        ..EngineConfig::default()
    };
    let (tx, jobs) = super::job_queue(cfg.queue_depth);
    let engine = Engine::new(shared.clone(), log, store, cfg, jobs.lock_owned().await);
    let (stop, shutdown) = watch::channel(false);
    let running = tokio::spawn(engine.run(shutdown));

    // Two chunks of 256 partitions at least.
    let items = (0..300).map(|i| item("q", &format!("p{i}"), &format!("t{i}")));
    let push = PushReq {
        items: items.collect(),
    };
    assert!(call(&tx, Command::Push(push)).await.is_ok());
    let (low, high_name) = {
        let st = shared.lock();
        let low = st.partitions.values().map(|p| p.id()).min().unwrap();
        let high = st.partitions.values().max_by_key(|p| p.id()).unwrap();
        assert!(high.id() >= low + 256, "the partitions span two chunks");
        (low, high.name.to_string())
    };
    {
        let mut st = shared.lock();
        let snap = st.partitions.snapshot();
        st.partitions.get_mut(&low).unwrap().created_us += 1;
        assert!(st.partitions.has_overlays(), "the write went to an overlay");
        drop(snap);
    }
    let push = PushReq {
        items: vec![item("q", &high_name, "later")],
    };
    assert!(call(&tx, Command::Push(push)).await.is_ok());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while shared.lock().partitions.has_overlays() {
        assert!(
            std::time::Instant::now() < deadline,
            "the engine never folded the overlay"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(stop.send(true).is_ok());
    assert_eq!(running.await.unwrap(), Ok(()));
}
