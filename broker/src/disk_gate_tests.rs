use super::*;
use queenmq_protocol::kafka_groups::{KafkaGroupsReq, KafkaOffsetCommit};
use queenmq_protocol::kv::{KvExpiry, KvOp, KvReq, LockOp, LockReq};
use queenmq_protocol::timers::{TimerOp, TimerSchedule, TimersReq};
use queenmq_protocol::{PopReq, PopSource, PushItem, PushReq, ReadReq, Subscription, TxnReq};

/// Free bytes a test sets; u64::MAX means "the file system cannot be asked".
#[derive(Clone, Default)]
struct Fake(Arc<AtomicU64>);

impl Fake {
    fn set(&self, n: u64) {
        self.0.store(n, Ordering::SeqCst);
    }
}

impl FreeSpace for Fake {
    fn available(&self) -> io::Result<u64> {
        match self.0.load(Ordering::SeqCst) {
            u64::MAX => Err(io::Error::other("no statvfs")),
            n => Ok(n),
        }
    }
}

fn item(bytes: usize) -> PushItem {
    PushItem {
        queue: "q".into(),
        partition: "p".into(),
        payload: bytes::Bytes::from(vec![b'x'; bytes]),
        transaction_id: None,
        trace_id: None,
    }
}

fn push(bytes: usize) -> Command {
    Command::Push(PushReq {
        items: vec![item(bytes)],
    })
}

/// What `push(bytes)` needs.
fn cost(bytes: usize) -> u64 {
    bytes as u64 + 2 + crate::disk_need::ROW_OVERHEAD
}

fn pop() -> Command {
    Command::Pop(PopReq {
        source: PopSource::Queue("q".into()),
        group: None,
        batch: 1,
        partitions: 1,
        wait: false,
        timeout_ms: 0,
        auto_ack: false,
        subscription: Subscription::All,
        lease_seconds: None,
        autopilot: false,
        conflation: false,
        parked_echo: Default::default(),
    })
}

/// A gate over `fake` that has read it once.
fn gate(fake: &Fake, reserve: u64) -> Arc<DiskGate> {
    let g = DiskGate::new(Box::new(fake.clone()), reserve);
    g.refresh();
    g
}

fn refused(r: Result<(), QueenError>) -> QueenError {
    let e = r.expect_err("refused");
    assert_eq!(e.code, ErrorCode::StorageFull, "{}", e.message);
    assert!(e.message.contains("min_free_disk_bytes"), "{}", e.message);
    e
}

#[test]
fn a_write_that_alone_does_not_fit_is_refused_without_making_the_node_full() {
    let fake = Fake::default();
    fake.set(10_000);
    let g = gate(&fake, 8_000);
    let e = refused(g.admit(&push(5_000), 0));
    assert!(e.message.contains("does not fit"), "{}", e.message);
    assert!(!g.is_full(), "one big request is not a full disk");
    g.admit(&push(1_000), 0)
        .expect("a write that fits goes on at once");
}

#[test]
fn full_is_the_disk_under_its_reserve_with_hysteresis_and_clears_on_a_reading() {
    let fake = Fake::default();
    fake.set(7_999);
    let g = gate(&fake, 8_000);
    assert!(g.is_full());
    let e = refused(g.admit(&push(1), 0));
    assert!(e.message.contains("disk is full"), "{}", e.message);
    // Above the reserve but not by an eighth: still full.
    fake.set(8_500);
    g.refresh();
    assert!(
        g.is_full(),
        "hysteresis: the reserve and an eighth are needed"
    );
    refused(g.admit(&push(1), 0));
    // A reading alone clears it: no write needs to come first.
    fake.set(9_000);
    g.refresh();
    assert!(!g.is_full());
    // And under the reserve again it is full again, at the reserve itself not yet.
    fake.set(8_000);
    g.refresh();
    assert!(!g.is_full());
    fake.set(7_000);
    g.refresh();
    assert!(g.is_full());
}

#[test]
fn bookkeeping_and_reads_go_on_under_the_reserve_until_the_floor() {
    let fake = Fake::default();
    fake.set(5_000);
    let g = gate(&fake, 8_000);
    g.admit(&pop(), 0).expect("pops drain the queues");
    g.admit(&Command::Read(ReadReq::Queues), 0).expect("reads");
    fake.set(1_000);
    g.refresh();
    refused(g.admit(&pop(), 0));
    g.admit(&Command::Health, 0).expect("writes nothing");
}

#[test]
fn bytes_in_flight_and_since_the_reading_count_until_the_next_reading() {
    let fake = Fake::default();
    fake.set(20_000);
    let g = gate(&fake, 8_000);
    g.admit(&push(5_000), 0).expect("fits");
    // The same cycle already holds 5 000 bytes of entry.
    refused(g.admit(&push(7_000), 5_000));
    let writing = g.begin_write(cost(5_000));
    refused(g.admit(&push(7_000), 0));
    drop(writing);
    // Written, but the file system was not asked again: still counted.
    refused(g.admit(&push(7_000), 0));
    fake.set(20_000 - cost(5_000));
    g.refresh();
    // The reading has them now, and nothing else is counted.
    g.admit(&push(6_000), 0).expect("6258 + 8000 <= 14742");
    assert!(!g.is_full());
}

#[test]
fn a_checkpoint_needs_twice_its_size_and_the_reserve_from_a_fresh_reading() {
    let fake = Fake::default();
    fake.set(100_000);
    let g = gate(&fake, 8_000);
    let slot = g.checkpoint_slot();
    // Each guard is dropped at once: written, and in the next (fresh) reading.
    assert!(slot.fits(46_000, 0).is_some());
    assert!(slot.fits(46_001, 0).is_none());
    // Fresh: the reading of the last refresh is not trusted.
    fake.set(10_000);
    assert!(slot.fits(1_001, 0).is_none());
    assert!(slot.fits(1_000, 0).is_some());
}

#[test]
fn a_checkpoint_whose_reclamation_repays_it_may_use_the_reserve() {
    let fake = Fake::default();
    fake.set(10_000);
    let g = gate(&fake, 8_000);
    let slot = g.checkpoint_slot();
    assert!(
        slot.fits(4_000, 7_999).is_none(),
        "frees less than it takes"
    );
    assert!(slot.fits(4_000, 8_000).is_some());
    assert!(
        slot.fits(5_001, 1 << 40).is_none(),
        "no room even with the reserve"
    );
}

#[test]
fn a_compaction_copy_borrows_an_eighth_of_the_reserve_never_under_half_of_it() {
    // Review s16 compactor H1: the loan was min(reserve/8, free), all that was free once the
    // free space was under an eighth of the reserve, under the quarter acks and deletes keep.
    let fake = Fake::default();
    fake.set(1_000);
    let g = gate(&fake, 8_000);
    assert!(g.is_full());
    assert_eq!(g.data_room(0), 0);
    assert_eq!(g.lend(0).bytes(), 0, "under half the reserve: nothing");
    fake.set(4_000);
    g.refresh();
    assert_eq!(g.lend(0).bytes(), 0, "at half the reserve: nothing");
    fake.set(4_600);
    g.refresh();
    assert_eq!(g.lend(0).bytes(), 600, "down to half the reserve");
    assert_eq!(g.lend(500).bytes(), 100, "minus what the cycle planned");
    fake.set(5_000);
    g.refresh();
    assert_eq!(g.lend(0).bytes(), 1_000, "an eighth of the reserve");
    fake.set(7_000);
    g.refresh();
    assert_eq!(g.lend(0).bytes(), 1_000, "never more than an eighth");
    fake.set(u64::MAX);
    g.refresh();
    assert_eq!(
        g.lend(0).bytes(),
        0,
        "unknown: data_room is unbounded, nothing to lend"
    );
}

#[test]
fn two_tenants_borrowing_at_once_never_take_the_node_under_half_its_reserve() {
    // Review s16 compactor H1: each tenant's compactor lent from the whole free space by
    // itself, so two of them on a node with an eighth of the reserve free took all of it.
    let fake = Fake::default();
    fake.set(5_500);
    let g = gate(&fake, 8_000);
    let mut a = g.lend(0);
    let b = g.lend(0);
    assert_eq!(
        (a.bytes(), b.bytes()),
        (1_000, 500),
        "the second sees the first"
    );
    assert_eq!(g.lend(0).bytes(), 0, "a third gets nothing");
    assert_eq!(g.left(5_500, 0), 4_000, "data admissions see the loans too");
    // The first copy used 300 bytes: the rest goes back at once; its entry is then counted
    // by begin_write and the loan dropped.
    a.keep(300);
    assert_eq!(g.lend(0).bytes(), 700);
    let writing = g.begin_write(300);
    drop(a);
    drop(b);
    assert_eq!(
        g.lend(0).bytes(),
        1_000,
        "5_500 - 300 written - 4_000 = 1_200"
    );
    drop(writing);
    assert_eq!(
        g.left(5_500, 0),
        5_200,
        "the write stays counted until a reading"
    );
}

#[test]
fn a_loan_leaves_room_for_the_checkpoint_that_repays_it() {
    // Review s16 compactor H1: the checkpoint that lets the copied segment go needs its own
    // size twice over; a loan that ate it kept the segment, and the loan, for ever.
    let fake = Fake::default();
    fake.set(7_000);
    let g = gate(&fake, 8_000);
    let slot = g.checkpoint_slot();
    // A checkpoint of 2_000 bytes needs 4_000: the loan stops at 2_000 + 4_000.
    assert!(slot.fits(2_000, 1 << 40).is_some());
    g.refresh();
    assert_eq!(g.lend(0).bytes(), 1_000);
    fake.set(6_500);
    g.refresh();
    let loan = g.lend(0);
    assert_eq!(loan.bytes(), 500);
    // What bookkeeping may leave (a quarter of the reserve) plus the checkpoint still fits.
    fake.set(6_000);
    assert!(slot.fits(2_000, 1 << 40).is_some());
}

#[test]
fn checkpoints_written_at_once_see_each_other_and_loans_leave_room_for_all() {
    // Review s17 compactor M3: each tenant writes its own checkpoint on its own timer, but a
    // checkpoint being written was counted nowhere and the loan floor allowed for the largest
    // one alone, so several repaying checkpoints at once could meet ENOSPC in redb.
    let fake = Fake::default();
    fake.set(6_000);
    let g = gate(&fake, 8_000);
    let (a, b) = (g.checkpoint_slot(), g.checkpoint_slot());
    let writing = a.fits(2_000, 1 << 40).expect("6_000 free, 4_000 needed");
    assert!(
        b.fits(2_000, 1 << 40).is_none(),
        "only 2_000 left while the first is written"
    );
    drop(writing);
    fake.set(6_000 - 4_000 + 4_000);
    assert!(b.fits(2_000, 1 << 40).is_some(), "after it, in turn");

    // Tenants expecting checkpoints of 2_000 and 3_000 bytes: the loans stop at a quarter of
    // the reserve plus the largest one's room (review s18 M1: not the sum).
    a.anticipate(3_000);
    fake.set(8_500);
    g.refresh();
    assert_eq!(g.lend(0).bytes(), 500, "8_500 - (2_000 + 6_000)");
    // The largest one gone (its group ended): the next largest sets the floor.
    drop(a);
    assert_eq!(
        g.lend(0).bytes(),
        1_000,
        "8_500 - (2_000 + 4_000), at most 1_000"
    );
}

#[test]
fn idle_tenants_do_not_switch_loans_off() {
    // Review s18 compactor M1: the floor summed every tenant's last checkpoint, idle ones
    // included (seeded at open): 64 tenants of 2 MiB each left a node at 200 MiB free with
    // no loan at all (floor 320 MiB), under the default 256 MiB reserve.
    const MIB: u64 = 1 << 20;
    let fake = Fake::default();
    fake.set(200 * MIB);
    let g = gate(&fake, 256 * MIB);
    let slots: Vec<_> = (0..64).map(|_| g.checkpoint_slot()).collect();
    for s in &slots {
        s.anticipate(2 * MIB);
    }
    assert_eq!(
        g.lend(0).bytes(),
        32 * MIB,
        "200 - (64 + 4) MiB, at most 32"
    );
    // A checkpoint being written counts once, in `in_flight`, not in the floor too: with
    // its 80 MiB in the floor as well, the floor would be 64 + 80 MiB and the loan 6 MiB.
    fake.set(230 * MIB);
    let writing = slots[0]
        .fits(40 * MIB, 1 << 40)
        .expect("repaid by what it frees");
    assert_eq!(
        g.lend(0).bytes(),
        230 * MIB - 80 * MIB - 128 * MIB,
        "less the checkpoint being written and the floor (half the reserve)"
    );
    // A second one judged while it is written still sees it.
    fake.set(80 * MIB + 4 * MIB - 1);
    assert!(slots[1].fits(2 * MIB, 1 << 40).is_none());
    drop(writing);
}

#[test]
fn the_loan_floor_follows_the_last_checkpoint_not_the_largest_ever() {
    // Review s17 compactor L1: one large checkpoint switched the loans off until the process
    // restarted, and a restart forgot the tenants' checkpoints until each wrote one again.
    let fake = Fake::default();
    fake.set(7_000);
    let g = gate(&fake, 8_000);
    let slot = g.checkpoint_slot();
    // As at open, from the stored checkpoint: no loan leaves it less than its room.
    slot.anticipate(8_000);
    assert_eq!(g.lend(0).bytes(), 0, "2_000 + 16_000 is more than is free");
    assert!(slot.fits(1_000, 1 << 40).is_some());
    g.refresh();
    assert_eq!(g.lend(0).bytes(), 1_000, "as for a checkpoint of 1_000");
}

#[test]
fn an_unknown_free_space_does_not_refuse_and_comes_back() {
    let fake = Fake::default();
    fake.set(u64::MAX);
    let g = gate(&fake, 8_000);
    g.admit(&push(10), 0).expect("unknown is not full");
    assert!(!g.is_full());
    assert!(g.refresh().is_none());
    fake.set(1_000);
    assert_eq!(g.refresh(), Some(1_000));
    assert!(g.is_full());
}

#[test]
fn an_enospc_makes_the_node_full_until_a_reading_shows_space() {
    let fake = Fake::default();
    fake.set(100_000);
    let g = gate(&fake, 8_000);
    g.ran_out();
    assert!(g.is_full());
    g.refresh();
    assert!(!g.is_full());
}

#[test]
fn enospc_is_found_among_the_causes_and_eio_is_not() {
    #[derive(Debug)]
    struct Wrap(io::Error);
    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "wrapped")
        }
    }
    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let full = Wrap(io::Error::from(io::ErrorKind::StorageFull));
    assert!(is_enospc(&full));
    let eio = Wrap(io::Error::other("EIO"));
    assert!(!is_enospc(&eio));
}

fn kv_put(value: usize) -> KvOp {
    KvOp::Put {
        ns: "ns".into(),
        key: "k".into(),
        value: "v".repeat(value),
        expiry: KvExpiry::Forever,
        expect: None,
        if_absent: false,
        required: false,
    }
}

fn schedule(payload: usize) -> TimerOp {
    TimerOp::Schedule(TimerSchedule {
        queue: "q".into(),
        key: "k".into(),
        partition: "p".into(),
        payload: bytes::Bytes::from(vec![b'x'; payload]),
        delay_ms: 0,
        txn: "t".into(),
    })
}

#[test]
fn need_counts_what_every_data_writer_keeps() {
    let mut with_ids = item(10);
    with_ids.transaction_id = Some("x".repeat(100));
    with_ids.trace_id = Some([0; 16]);
    assert_eq!(
        need(&Command::Push(PushReq {
            items: vec![with_ids]
        })),
        Need::Data(cost(10) + 100 + 16),
        "transaction and trace ids are stored too"
    );
    assert_eq!(
        need(&Command::Kv(KvReq {
            ops: vec![kv_put(1_000)]
        })),
        Need::Data(2 + 1 + 1_000 + crate::disk_need::ROW_OVERHEAD)
    );
    assert_eq!(
        need(&Command::Kv(KvReq {
            ops: vec![KvOp::Get {
                ns: "ns".into(),
                key: "k".into()
            }]
        })),
        Need::Bookkeeping
    );
    assert_eq!(
        need(&Command::Timers(TimersReq {
            ops: vec![schedule(500)]
        })),
        Need::Data(500 + 4 + crate::disk_need::ROW_OVERHEAD)
    );
    assert_eq!(
        need(&Command::Locks(LockReq {
            ops: vec![LockOp::Acquire {
                name: "l".into(),
                ttl_seconds: 1,
                owner: "o".into(),
                limit: 1
            }]
        })),
        Need::Data(2 + crate::disk_need::ROW_OVERHEAD)
    );
    // A transaction whose only data is in its riders still adds data.
    let txn = Command::Transaction(TxnReq {
        ops: vec![],
        required_leases: vec![],
        kv: vec![kv_put(10)],
        timers: vec![schedule(20)],
        ..Default::default()
    });
    assert_eq!(
        need(&txn),
        Need::Data(13 + 24 + 2 * crate::disk_need::ROW_OVERHEAD)
    );
    assert_eq!(
        need(&Command::Transaction(TxnReq::default())),
        Need::Bookkeeping
    );
    // A Kafka commit keeps a row per partition, its topic and metadata included; a fetch
    // or a delete adds nothing.
    let commit = Command::KafkaGroups(KafkaGroupsReq::Commit {
        group: "g".into(),
        offsets: vec![KafkaOffsetCommit {
            topic: "topic".into(),
            partition: 0,
            offset: 7,
            leader_epoch: -1,
            metadata: "m".repeat(100),
        }],
    });
    assert_eq!(
        need(&commit),
        Need::Data(1 + 5 + 100 + crate::disk_need::ROW_OVERHEAD)
    );
    let delete = Command::KafkaGroups(KafkaGroupsReq::Delete {
        groups: vec!["g".into()],
    });
    assert_eq!(need(&delete), Need::Bookkeeping);
}

#[test]
fn kafka_idempotent_produce_is_data_and_so_is_a_new_producer_id() {
    use queenmq_protocol::kafka_producers::*;
    let produce = Command::KafkaProduce(KafkaProduceReq {
        batches: Vec::new(),
        items: vec![item(100)],
        guards: vec![ProducerGuard {
            queue: "q".into(),
            partition: "p".into(),
            start: 0,
            end: 1,
            batch: ProducerBatch {
                producer_id: 1,
                epoch: 0,
                first_seq: 0,
                last_seq: 0,
                records: 1,
            },
        }],
        expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        max_producers: DEFAULT_MAX_PRODUCER_IDS,
        evict_min_idle_ms: 0,
        transactional_id: None,
    });
    let one_item = 100 + 1 + 1 + crate::disk_need::ROW_OVERHEAD;
    assert_eq!(
        need(&produce),
        Need::Data(one_item + crate::disk_need::ROW_OVERHEAD)
    );
    let init = Command::KafkaProducers(KafkaProducersReq::InitProducerId {
        current: None,
        expiration_ms: DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    });
    assert_eq!(need(&init), Need::Data(crate::disk_need::ROW_OVERHEAD));
}

#[test]
fn the_room_for_due_timers_is_what_the_reserve_leaves_and_none_while_full() {
    let fake = Fake::default();
    fake.set(10_000);
    let g = gate(&fake, 8_000);
    assert_eq!(g.data_room(0), 2_000);
    assert_eq!(g.data_room(500), 1_500);
    let writing = g.begin_write(1_000);
    assert_eq!(g.data_room(0), 1_000);
    drop(writing);
    assert_eq!(g.data_room(3_000), 0);
    fake.set(7_000);
    g.refresh();
    assert!(g.is_full());
    assert_eq!(g.data_room(0), 0, "nothing fires on a full disk");
    fake.set(u64::MAX);
    g.refresh();
    assert_eq!(g.data_room(0), u64::MAX, "an unknown disk is not gated");
}

#[test]
fn a_full_node_whose_free_space_becomes_unknown_is_not_called_full() {
    let fake = Fake::default();
    fake.set(1_000);
    let g = gate(&fake, 8_000);
    assert!(g.is_full());
    fake.set(u64::MAX);
    assert!(g.refresh().is_none());
    assert!(
        !g.is_full(),
        "a stale full would refuse new tenants while nothing is known"
    );
}

/// Free bytes that, while being asked, let the test look at the gate (an admission racing
/// the reading).
struct Watched {
    n: u64,
    gate: std::sync::Mutex<Weak<DiskGate>>,
    seen: std::sync::Mutex<Option<u64>>,
}

impl FreeSpace for Arc<Watched> {
    fn available(&self) -> io::Result<u64> {
        if let Some(g) = self.gate.lock().unwrap().upgrade() {
            *self.seen.lock().unwrap() = Some(g.data_room(0));
        }
        Ok(self.n)
    }
}

#[test]
fn bytes_written_before_a_reading_stay_counted_while_it_is_taken() {
    let watched = Arc::new(Watched {
        n: 10_000,
        gate: std::sync::Mutex::new(Weak::new()),
        seen: std::sync::Mutex::new(None),
    });
    let g = DiskGate::new(Box::new(watched.clone()), 4_000);
    g.refresh();
    assert_eq!(g.data_room(0), 6_000);
    drop(g.begin_write(5_000));
    assert_eq!(g.data_room(0), 1_000);
    *watched.gate.lock().unwrap() = Arc::downgrade(&g);
    g.refresh();
    assert_eq!(
        *watched.seen.lock().unwrap(),
        Some(1_000),
        "while the file system is asked, the old reading less the bytes written since"
    );
}

#[test]
fn a_checkpoint_is_judged_less_what_is_lent() {
    // Review s18 compactor L3: `fits` subtracted neither the outstanding loans nor the bytes
    // written since the reading, unlike `admit` and `lend`.
    let fake = Fake::default();
    fake.set(10_000);
    let g = gate(&fake, 8_000);
    let loan = g.lend(0);
    assert_eq!(loan.bytes(), 1_000);
    let slot = g.checkpoint_slot();
    // 4_999 free less 1_000 lent is short of the 4_000 a checkpoint of 2_000 bytes needs.
    fake.set(4_999);
    assert!(slot.fits(2_000, 1 << 40).is_none());
    drop(loan);
    assert!(slot.fits(2_000, 1 << 40).is_some());
}
