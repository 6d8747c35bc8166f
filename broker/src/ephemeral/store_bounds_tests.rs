//! Review s14 R3: the work of a push or a pop is bounded by what is due, not by the queue's
//! partitions or waiters. Ring reads are counted by the queue's rings (`Rings`: every ring it
//! hands out, alone or in a walk), pops by a door that wraps the store.

use std::sync::atomic::{AtomicUsize, Ordering};

use queenmq_native_api::ephemeral_wait::pop_waiting;

use super::super::due::DUE_GROUP_COST;
use super::super::gates::GATE_COST;
use super::super::ring::CURSOR_COST;
use super::tests::{assert_consistent, msgs};
use super::*;

pub(super) fn store() -> Store {
    Store::new(
        StoreLimits {
            enabled: true,
            max_bytes: 1 << 30,
            tenant_max_bytes: 1 << 30,
            implicit_idle: Duration::from_secs(300),
        },
        None,
        LongPollSlots::new(64),
    )
}

/// Queue `q` with 1 s leases and one message in `partition`, taken without an ack by group
/// `g`'s pop of `scope`: the message comes back once the lease ends.
pub(super) fn leased_to_g(s: &Store, partition: Option<&str>, scope: Option<&str>) {
    let options = EphemeralOptions {
        lease_seconds: 1,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    s.push("t", "q", partition, msgs(1)).unwrap();
    let a = PopAsk {
        queue: "q",
        partition: scope,
        group: Some("g"),
        batch: 1,
        auto_ack: false,
        existing: false,
    };
    assert_eq!(s.pop("t", &a).unwrap().len(), 1);
}

fn drain(s: &Store, queue: &str, group: &str) -> Vec<String> {
    let a = PopAsk {
        queue,
        partition: None,
        group: Some(group),
        batch: 100_000,
        auto_ack: true,
        existing: false,
    };
    s.pop("t", &a)
        .unwrap()
        .into_iter()
        .map(|m| m.payload.to_string())
        .collect()
}

fn visits(s: &Store, queue: &str) -> u64 {
    let mut g = lock(&s.inner);
    let q = g.queue("t", queue, Instant::now()).unwrap();
    q.rings.take_reads()
}

/// The indexes' charges equal a count from their entries.
fn assert_indexes_consistent(s: &Store, queue: &str) {
    let mut g = lock(&s.inner);
    let q = g.queue("t", queue, Instant::now()).unwrap();
    assert_eq!(q.heads.bytes(), q.heads.recount());
    assert_eq!(q.due.bytes(), q.due.recount());
    assert_eq!(
        q.heads.len(),
        q.rings.iter().filter(|(_, r)| !r.items.is_empty()).count()
    );
}

/// A dropOldest queue over 9 999 partitions, filled in an order unlike the partitions'
/// names: a push past the bound drops the oldest messages of the queue, in age order, and
/// reads only the rings it drops from and the one it pushes to (review s18 ephemeral M1: a
/// walk of the rings to find the oldest counts every ring it reads).
#[test]
fn drop_oldest_goes_by_age_and_visits_only_what_it_drops() {
    let s = store();
    // One ring fewer than a queue holds: the push past the bound makes a new one.
    let n = MAX_PARTITIONS as u32 - 1;
    let options = EphemeralOptions {
        max_length: n,
        drop_oldest: true,
        ..EphemeralOptions::default()
    };
    s.declare("t", "d", options);
    for i in 0..n {
        let p = format!("p{:05}", (i * 7_919) % n);
        s.push("t", "d", Some(&p), vec![i.to_string()]).unwrap();
    }
    visits(&s, "d");
    s.push("t", "d", Some("z"), msgs(10)).unwrap();
    let touched = visits(&s, "d");
    assert!(
        touched <= 14,
        "a push dropping 10 read rings {touched} times"
    );
    assert_indexes_consistent(&s, "d");
    let mut left: Vec<u32> = drain(&s, "d", "g")
        .iter()
        .map(|p| p.parse().unwrap())
        .collect();
    left.sort_unstable();
    let mut want: Vec<u32> = (10..n).collect();
    want.extend(0..10);
    want.sort_unstable();
    assert_eq!(left, want, "the ten oldest went, the ten new ones came");
    assert_consistent(&s);
    assert_indexes_consistent(&s, "d");
}

/// With 10 000 partitions of which one holds a message, a pop without a partition visits
/// that one, for a group that consumed the rest and for a group new to the queue.
#[test]
fn a_pop_visits_only_the_rings_with_something_due() {
    let s = store();
    let options = EphemeralOptions {
        max_length: 100_000,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    for p in 0..MAX_PARTITIONS {
        s.push("t", "q", Some(&format!("p{p}")), msgs(1)).unwrap();
    }
    assert_eq!(drain(&s, "q", "g").len(), MAX_PARTITIONS);
    s.push("t", "q", Some("p5000"), vec!["late".into()])
        .unwrap();
    visits(&s, "q");
    assert_eq!(drain(&s, "q", "g"), ["late"]);
    let touched = visits(&s, "q");
    assert!(
        touched <= 3,
        "a pop visited {touched} rings for one message"
    );
    assert!(drain(&s, "q", "g").is_empty());
    assert!(visits(&s, "q") <= 3);
    s.push("t", "q", Some("p7"), vec!["again".into()]).unwrap();
    visits(&s, "q");
    assert_eq!(drain(&s, "q", "new"), ["again"]);
    let touched = visits(&s, "q");
    assert!(touched <= 3, "a new group's pop read rings {touched} times");
    assert_indexes_consistent(&s, "q");
    assert_consistent(&s);
}

/// What a lease's end and a nack make due again is found by a pop without a partition.
#[test]
fn lease_ends_and_nacks_make_a_ring_due_again() {
    let s = store();
    let options = EphemeralOptions {
        lease_seconds: 0,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    for p in ["a", "b", "c"] {
        s.push("t", "q", Some(p), vec![p.to_string()]).unwrap();
    }
    let leased = PopAsk {
        queue: "q",
        partition: None,
        group: Some("g"),
        batch: 10,
        auto_ack: false,
        existing: false,
    };
    let first = s.pop("t", &leased).unwrap();
    assert_eq!(first.len(), 3);
    // A lease of no seconds has ended by the next pop: all three come back.
    let again = s.pop("t", &leased).unwrap();
    assert_eq!(again.len(), 3);
    assert!(again.iter().all(|m| m.attempts == 2), "{again:?}");

    s.declare("t", "r", EphemeralOptions::default());
    s.push("t", "r", Some("a"), vec!["x".into()]).unwrap();
    let mut one = leased.clone();
    one.queue = "r";
    let got = s.pop("t", &one).unwrap().remove(0);
    assert!(s.pop("t", &one).unwrap().is_empty(), "leased, not due");
    let nack = vec![(got.id.clone(), AckStatus::Retry)];
    assert_eq!(s.ack("t", "r", Some("g"), &nack), [AckOutcome::Redelivered]);
    let back = s.pop("t", &one).unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].attempts, 2);
    assert_indexes_consistent(&s, "q");
    assert_indexes_consistent(&s, "r");
}

/// The store behind a door that counts pops and can push right after one, as a push from
/// another connection would land between a waiter's empty pop and its wait.
#[derive(Debug)]
struct Counting {
    store: Store,
    pops: AtomicUsize,
    /// After this pop (counting from 1) returns, one message is pushed; 0: never.
    push_after: AtomicUsize,
}

impl EphemeralDoor for Counting {
    fn enabled(&self) -> bool {
        self.store.enabled()
    }
    fn loaded(&self, tenant: &str) -> bool {
        self.store.loaded(tenant)
    }
    fn seed(&self, tenant: &str, declared: Vec<(String, EphemeralOptions)>) {
        self.store.seed(tenant, declared)
    }
    fn declare(&self, tenant: &str, queue: &str, options: EphemeralOptions) {
        self.store.declare(tenant, queue, options)
    }
    fn forget(&self, tenant: &str, queue: &str) -> bool {
        self.store.forget(tenant, queue)
    }
    fn reset(&self, tenant: &str, queue: &str) -> u64 {
        self.store.reset(tenant, queue)
    }
    fn push(
        &self,
        tenant: &str,
        queue: &str,
        partition: Option<&str>,
        payloads: Vec<String>,
    ) -> Result<usize, EphemeralRefusal> {
        self.store.push(tenant, queue, partition, payloads)
    }
    fn pop(
        &self,
        tenant: &str,
        ask: &PopAsk<'_>,
    ) -> Result<Vec<EphemeralMessage>, EphemeralRefusal> {
        let n = self.pops.fetch_add(1, Ordering::SeqCst) + 1;
        let got = self.store.pop(tenant, ask);
        if n == self.push_after.load(Ordering::SeqCst) {
            self.store
                .push(tenant, ask.queue, None, vec!["between".into()])
                .unwrap();
        }
        got
    }
    fn wake(
        &self,
        tenant: &str,
        ask: &PopAsk<'_>,
    ) -> Result<Option<Arc<tokio::sync::Notify>>, EphemeralRefusal> {
        self.store.wake(tenant, ask)
    }
    fn unwait(&self, tenant: &str, ask: &PopAsk<'_>) {
        self.store.unwait(tenant, ask)
    }
    fn wait_slot(&self, tenant: &str) -> Option<WaitSlot> {
        self.store.wait_slot(tenant)
    }
    fn window(&self, tenant: &str, queue: &str) -> (u32, u32) {
        self.store.window(tenant, queue)
    }
    fn ack(
        &self,
        tenant: &str,
        queue: &str,
        group: Option<&str>,
        acks: &[(String, AckStatus)],
    ) -> Vec<AckOutcome> {
        self.store.ack(tenant, queue, group, acks)
    }
    fn queues(&self, tenant: &str) -> Value {
        self.store.queues(tenant)
    }
    fn depth(&self, tenant: &str, queue: &str) -> Option<Value> {
        self.store.depth(tenant, queue)
    }
}

fn counting() -> Arc<Counting> {
    let c = Counting {
        store: store(),
        pops: AtomicUsize::new(0),
        push_after: AtomicUsize::new(0),
    };
    c.store.declare("t", "q", EphemeralOptions::default());
    Arc::new(c)
}

type Waiter = tokio::task::JoinHandle<Result<Vec<EphemeralMessage>, EphemeralRefusal>>;

/// A waiting pop of one message for `group`, up to a minute: the tests answer it well before,
/// unless a wake is lost.
fn waiter(door: &Arc<Counting>, group: &'static str) -> Waiter {
    waiter_for(door, group, None, 60_000)
}

/// A waiting pop of one message for `group`, of `partition` (None: the whole queue), for up
/// to `timeout_ms`.
fn waiter_for(
    door: &Arc<Counting>,
    group: &'static str,
    partition: Option<&'static str>,
    timeout_ms: u64,
) -> Waiter {
    let door = door.clone();
    tokio::spawn(async move {
        let ask = PopAsk {
            queue: "q",
            partition,
            group: Some(group),
            batch: 1,
            auto_ack: true,
            existing: false,
        };
        pop_waiting(&*door, "t", &ask, timeout_ms).await
    })
}

/// Lets every ready task run (on the test's one thread) until none is left to run.
async fn run_ready() {
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
}

async fn take_finished(waiters: &mut Vec<Waiter>) -> Vec<Vec<EphemeralMessage>> {
    let mut done = Vec::new();
    let mut i = 0;
    while i < waiters.len() {
        if waiters[i].is_finished() {
            done.push(waiters.remove(i).await.unwrap().unwrap());
        } else {
            i += 1;
        }
    }
    done
}

/// One push to a queue with eight waiting pops of one group wakes one of them: it alone pops
/// again and answers, the seven others keep waiting, and the next push wakes the next.
#[tokio::test]
async fn a_push_wakes_one_waiter_not_the_herd() {
    let door = counting();
    let mut waiters: Vec<Waiter> = (0..8).map(|_| waiter(&door, "g")).collect();
    run_ready().await;
    assert!(take_finished(&mut waiters).await.is_empty());
    for left in (5..8).rev() {
        let parked = door.pops.load(Ordering::SeqCst);
        door.store.push("t", "q", None, msgs(1)).unwrap();
        run_ready().await;
        let done = take_finished(&mut waiters).await;
        assert_eq!(done.len(), 1, "one push, one answer");
        assert_eq!(done[0].len(), 1);
        assert_eq!(waiters.len(), left);
        assert_eq!(
            door.pops.load(Ordering::SeqCst) - parked,
            1,
            "only the woken waiter popped again"
        );
    }
    // A batch of three wakes three, one after the other.
    let parked = door.pops.load(Ordering::SeqCst);
    door.store.push("t", "q", None, msgs(3)).unwrap();
    run_ready().await;
    assert_eq!(take_finished(&mut waiters).await.len(), 3);
    assert_eq!(door.pops.load(Ordering::SeqCst) - parked, 3);
    assert_eq!(waiters.len(), 2);
    waiters.iter().for_each(|w| w.abort());
}

/// Waiters of two groups each get the one message pushed: a group's wake is its own.
#[tokio::test]
async fn a_push_wakes_a_waiter_of_every_group() {
    let door = counting();
    // Both groups have a cursor, so neither one's take lets the message go before the
    // other's.
    let s = &door.store;
    s.push("t", "q", None, msgs(1)).unwrap();
    let leased = PopAsk {
        queue: "q",
        partition: None,
        group: Some("a"),
        batch: 1,
        auto_ack: false,
        existing: false,
    };
    let m = s.pop("t", &leased).unwrap().remove(0);
    assert_eq!(drain(s, "q", "b").len(), 1);
    let done = vec![(m.id, AckStatus::Completed)];
    assert_eq!(s.ack("t", "q", Some("a"), &done), [AckOutcome::Acked]);
    let mut waiters = vec![waiter(&door, "a"), waiter(&door, "b"), waiter(&door, "b")];
    run_ready().await;
    door.store.push("t", "q", None, msgs(1)).unwrap();
    run_ready().await;
    assert_eq!(take_finished(&mut waiters).await.len(), 2);
    assert_eq!(waiters.len(), 1, "the second waiter of b keeps waiting");
    waiters.iter().for_each(|w| w.abort());
}

/// A push that lands after a waiter's last empty pop and before it parks still wakes it: it
/// answers the message, not its timeout's empty answer.
#[tokio::test]
async fn a_push_between_the_check_and_the_wait_is_not_lost() {
    let door = counting();
    // Pop 1 is the waiter's first look, pop 2 the one after it enabled its wake.
    door.push_after.store(2, Ordering::SeqCst);
    let got = waiter(&door, "g").await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(&*got[0].payload, "between");
    assert_eq!(door.pops.load(Ordering::SeqCst), 3);
}

/// Answers of the waiters done, and the others aborted.
async fn answers(waiters: Vec<Waiter>) -> Vec<Option<Vec<EphemeralMessage>>> {
    let mut out = Vec::new();
    for w in waiters {
        if w.is_finished() {
            out.push(Some(w.await.unwrap().unwrap()));
        } else {
            w.abort();
            out.push(None);
        }
    }
    out
}

/// Review s18 ephemeral H1: the push wakes the older waiter just as its timeout ends; its
/// `select!` may take the wake and then find its deadline passed. It must not leave with the
/// wake unused: it pops once more (or rings the gate again), so exactly one of the two answers
/// the message. `select!` picks its branch at random: sixteen rounds make a lost wake show.
#[tokio::test(start_paused = true)]
async fn a_waiter_at_its_deadline_does_not_swallow_the_wake() {
    for round in 0..16 {
        let door = counting();
        let w1 = waiter_for(&door, "g", None, 10);
        run_ready().await;
        let w2 = waiter_for(&door, "g", None, 60_000);
        run_ready().await;
        door.store.push("t", "q", None, msgs(1)).unwrap();
        tokio::time::advance(Duration::from_millis(20)).await;
        run_ready().await;
        let done = answers(vec![w1, w2]).await;
        assert!(
            done[0].is_some(),
            "round {round}: the first waiter timed out"
        );
        let taken: usize = done.iter().flatten().map(Vec::len).sum();
        assert_eq!(
            taken, 1,
            "round {round}: the message was answered {taken} times"
        );
    }
}

/// Review s18 ephemeral M3: consumer A's lease ends (A is gone); the sweep rings the gates of
/// its group, so waiter B, of the whole queue or of the partition, takes the message again
/// rather than sleeping to its timeout.
#[tokio::test(start_paused = true)]
async fn a_lease_that_ends_wakes_a_waiter_of_its_group() {
    for partition in [None, Some("p")] {
        let door = counting();
        leased_to_g(&door.store, Some("p"), partition);
        let b = waiter_for(&door, "g", partition, 60_000);
        run_ready().await;
        assert!(!b.is_finished(), "leased: nothing for B yet");
        tokio::time::advance(Duration::from_secs(2)).await;
        run_ready().await;
        door.store.sweep(now());
        run_ready().await;
        let got = answers(vec![b]).await.remove(0);
        let got = got.unwrap_or_else(|| panic!("{partition:?}: B still sleeps"));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].attempts, 2);
    }
}

/// Review s18 ephemeral M3: a waiter whose timeout ends after a lease did, with no sweep in
/// between, pops once more at its deadline and answers the message, not `[]`.
#[tokio::test(start_paused = true)]
async fn a_waiter_pops_once_more_at_its_deadline() {
    let door = counting();
    leased_to_g(&door.store, None, None);
    let b = waiter_for(&door, "g", None, 3_000);
    run_ready().await;
    tokio::time::advance(Duration::from_secs(4)).await;
    run_ready().await;
    let got = answers(vec![b]).await.remove(0).expect("past its timeout");
    assert_eq!(got.len(), 1, "the last pop found the ended lease");
    assert_eq!(got[0].attempts, 2);
}

/// Review s18 ephemeral M1, s19 M2: with 10 000 rings of which one holds a message past the
/// ttl, the pop that ages it out reads that ring and the one it takes from, not every ring.
/// The message expires between the last push and the pop (a push would age it out first and
/// leave the pop nothing to do), and is gone after it.
#[tokio::test(start_paused = true)]
async fn the_ttl_reads_only_the_rings_it_ages_out() {
    let s = store();
    let options = EphemeralOptions {
        ttl_seconds: 2,
        max_length: 100_000,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    s.push("t", "q", Some("old"), vec!["old".into()]).unwrap();
    tokio::time::advance(Duration::from_millis(1_500)).await;
    for p in 1..MAX_PARTITIONS {
        s.push("t", "q", Some(&format!("p{p}")), msgs(1)).unwrap();
    }
    assert_eq!(held(&s, "q"), MAX_PARTITIONS as u64, "nothing aged out yet");
    tokio::time::advance(Duration::from_secs(1)).await;
    visits(&s, "q");
    let mut one = PopAsk {
        queue: "q",
        partition: Some("p1"),
        group: Some("g"),
        batch: 1,
        auto_ack: true,
        existing: false,
    };
    assert_eq!(s.pop("t", &one).unwrap().len(), 1);
    let read = visits(&s, "q");
    assert!(read <= 6, "a pop ageing out one ring read {read}");
    assert_eq!(
        held(&s, "q"),
        MAX_PARTITIONS as u64 - 2,
        "the pop aged out the old message and took one"
    );
    one.partition = Some("old");
    assert!(s.pop("t", &one).unwrap().is_empty(), "aged out");
    assert_indexes_consistent(&s, "q");
    assert_consistent(&s);
}

/// Messages the queue holds.
fn held(s: &Store, queue: &str) -> u64 {
    let mut g = lock(&s.inner);
    g.queue("t", queue, Instant::now()).unwrap().length
}

/// Review s19 ephemeral M1: with waiters of 50 groups on partition b and one on a, a push to
/// a looks at a's gate (and the queue-wide ones: none) and wakes a's waiter alone; a's gate
/// goes with its waiter (review s20 M3), so the next push to a looks at no gate.
#[tokio::test]
async fn a_push_looks_only_at_the_gates_of_its_partition() {
    let door = counting();
    let mut waiters: Vec<Waiter> = (0..50)
        .map(|i| {
            let group: &'static str = Box::leak(format!("b{i}").into_boxed_str());
            waiter_for(&door, group, Some("b"), 60_000)
        })
        .collect();
    waiters.push(waiter_for(&door, "a", Some("a"), 60_000));
    run_ready().await;
    let looked = |s: &Store| {
        let mut g = lock(&s.inner);
        let q = g.queue("t", "q", Instant::now()).unwrap();
        (std::mem::take(&mut q.gates.looked), q.gates.bytes())
    };
    let (_, gates) = looked(&door.store);
    let parked = door.pops.load(Ordering::SeqCst);
    door.store.push("t", "q", Some("a"), msgs(1)).unwrap();
    assert_eq!(looked(&door.store).0, 1, "the push looked past a's gate");
    run_ready().await;
    assert_eq!(door.pops.load(Ordering::SeqCst) - parked, 1);
    let done = take_finished(&mut waiters).await;
    assert_eq!((done.len(), &*done[0][0].partition), (1, "a"));
    let (_, left) = looked(&door.store);
    assert_eq!(gates - left, GATE_COST + 2, "a's gate went with its waiter");
    door.store.push("t", "q", Some("a"), msgs(1)).unwrap();
    assert_eq!(looked(&door.store).0, 0, "no gate of a is left to look at");
    waiters.iter().for_each(|w| w.abort());
}

/// Review s18 ephemeral M1: a waiter of one partition is woken by a push to it, not by one to
/// another partition.
#[tokio::test]
async fn a_partition_waiter_is_woken_by_its_partition_only() {
    let door = counting();
    let w = waiter_for(&door, "g", Some("p"), 60_000);
    run_ready().await;
    let parked = door.pops.load(Ordering::SeqCst);
    door.store.push("t", "q", Some("other"), msgs(1)).unwrap();
    run_ready().await;
    assert!(!w.is_finished());
    assert_eq!(door.pops.load(Ordering::SeqCst), parked, "not woken");
    door.store
        .push("t", "q", Some("p"), vec!["mine".into()])
        .unwrap();
    run_ready().await;
    let got = answers(vec![w]).await.remove(0).expect("woken");
    assert_eq!((&*got[0].payload, &*got[0].partition), ("mine", "p"));
}

/// Review s18 ephemeral M1: a nack makes the message due again for its group, and wakes a
/// waiter of that group.
#[tokio::test]
async fn a_nack_wakes_a_waiter_of_its_group() {
    let door = counting();
    door.store.push("t", "q", None, msgs(1)).unwrap();
    let a = PopAsk {
        queue: "q",
        partition: None,
        group: Some("g"),
        batch: 1,
        auto_ack: false,
        existing: false,
    };
    let m = door.store.pop("t", &a).unwrap().remove(0);
    let w = waiter(&door, "g");
    run_ready().await;
    assert!(!w.is_finished());
    let nack = vec![(m.id, AckStatus::Retry)];
    let out = door.store.ack("t", "q", Some("g"), &nack);
    assert_eq!(out, [AckOutcome::Redelivered]);
    run_ready().await;
    let got = answers(vec![w]).await.remove(0).expect("woken by the nack");
    assert_eq!(got[0].attempts, 2);
}

/// Review s18 ephemeral M1: deleting the queue answers its waiters, of the queue and of a
/// partition, at once with what they have.
#[tokio::test]
async fn a_delete_answers_every_waiter() {
    let door = counting();
    let w = vec![
        waiter(&door, "g"),
        waiter(&door, "h"),
        waiter_for(&door, "g", Some("p"), 60_000),
    ];
    run_ready().await;
    assert!(door.store.forget("t", "q"));
    run_ready().await;
    for got in answers(w).await {
        assert_eq!(got.expect("answered on delete"), []);
    }
}

fn charge(s: &Store, queue: &str) -> u64 {
    let mut g = lock(&s.inner);
    g.queue("t", queue, Instant::now()).unwrap().charge()
}

/// Review s18 ephemeral M2: 100 groups new to a queue of 10 000 rings holding a message each
/// pop one message each. A new group copies nothing: the queue's charge grows by its cursor
/// and its state, and each pop reads the ring it takes from.
#[test]
fn a_new_group_copies_nothing() {
    let s = store();
    let options = EphemeralOptions {
        max_length: 100_000,
        ..EphemeralOptions::default()
    };
    s.declare("t", "q", options);
    for p in 0..MAX_PARTITIONS {
        s.push("t", "q", Some(&format!("p{p}")), msgs(1)).unwrap();
    }
    let before = charge(&s, "q");
    visits(&s, "q");
    for i in 0..100 {
        let group = format!("g{i:02}");
        let a = PopAsk {
            queue: "q",
            partition: None,
            group: Some(&group),
            batch: 1,
            auto_ack: false,
            existing: false,
        };
        assert_eq!(s.pop("t", &a).unwrap().len(), 1);
        let read = visits(&s, "q");
        assert!(
            read <= 3,
            "a new group's pop of one read rings {read} times"
        );
    }
    let grown = charge(&s, "q") - before;
    let each = CURSOR_COST + ENTRY_COST + 2 * DUE_COST + DUE_GROUP_COST + 64;
    assert!(
        grown < 100 * each,
        "100 new groups grew the queue by {grown}"
    );
    assert_indexes_consistent(&s, "q");
    assert_consistent(&s);
}

/// Review s18 ephemeral M2: with 1 000 groups that each looked at the queue, a push touches
/// one index entry, not one per group.
#[test]
fn a_push_touches_one_index_entry_whatever_the_groups() {
    let s = store();
    s.declare("t", "q", EphemeralOptions::default());
    s.push("t", "q", Some("a"), msgs(1)).unwrap();
    for i in 0..1_000 {
        let group = format!("g{i:03}");
        let a = PopAsk {
            queue: "q",
            partition: None,
            group: Some(&group),
            batch: 1,
            auto_ack: false,
            existing: false,
        };
        assert_eq!(s.pop("t", &a).unwrap().len(), 1);
    }
    let touched = |s: &Store| {
        let mut g = lock(&s.inner);
        let q = g.queue("t", "q", Instant::now()).unwrap();
        std::mem::take(&mut q.due.touched)
    };
    touched(&s);
    s.push("t", "q", Some("b"), msgs(1)).unwrap();
    assert_eq!(touched(&s), 1);
    s.push("t", "q", Some("a"), msgs(1)).unwrap();
    assert_eq!(touched(&s), 1);
    let got = drain(&s, "q", "g500");
    assert_eq!(got.len(), 2, "both due for a group that looked before");
    assert_indexes_consistent(&s, "q");
    assert_consistent(&s);
}

/// Review s18 ephemeral M3: a group forgotten in a ring (idle, its lease ended) starts over at
/// the ring's head; its waiter is rung by that sweep and takes the message.
#[tokio::test(start_paused = true)]
async fn a_forgotten_cursor_wakes_a_waiter_of_its_group() {
    let door = Arc::new(Counting {
        store: Store::new(
            StoreLimits {
                enabled: true,
                max_bytes: 1 << 30,
                tenant_max_bytes: 1 << 30,
                implicit_idle: Duration::from_secs(2),
            },
            None,
            LongPollSlots::new(64),
        ),
        pops: AtomicUsize::new(0),
        push_after: AtomicUsize::new(0),
    });
    leased_to_g(&door.store, None, None);
    let b = waiter_for(&door, "g", None, 60_000);
    run_ready().await;
    tokio::time::advance(Duration::from_secs(3)).await;
    door.store.sweep(now());
    run_ready().await;
    let got = answers(vec![b]).await.remove(0).expect("rung by the sweep");
    assert_eq!(got.len(), 1);
}
