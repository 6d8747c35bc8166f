//! KV, locks and the transaction `kv` rider planned on the fixture; every test ends by checking
//! that a follower applying the log and a checkpoint read back reach the leader's state.

use queenmq_protocol::{
    ErrorCode, KvExpiry, KvOp, KvOutcome, KvPrecondition, KvRefusal, KvReq, KvResult,
    KvWriteResult, LockOp, LockReq, LockResult, TxnOp, TxnOpResult, TxnReq,
};

use super::fixture::{item, Fixture, SECOND};
use super::KV_SWEEP_PER_CYCLE;

fn put(key: &str, value: &str, ttl: u64) -> KvOp {
    KvOp::Put {
        ns: "ns".into(),
        key: key.into(),
        value: value.into(),
        expiry: KvExpiry::Seconds(ttl),
        expect: None,
        if_absent: false,
        required: false,
    }
}

fn with(op: KvOp, f: impl FnOnce(&mut KvOp)) -> KvOp {
    let mut op = op;
    f(&mut op);
    op
}

fn get(key: &str) -> KvOp {
    KvOp::Get {
        ns: "ns".into(),
        key: key.into(),
    }
}

fn incr(key: &str, delta: i64, max: Option<i64>, ttl: u64) -> KvOp {
    KvOp::Incr {
        ns: "ns".into(),
        key: key.into(),
        delta,
        min: None,
        max,
        expiry: KvExpiry::Seconds(ttl),
        required: false,
    }
}

fn kv(fx: &mut Fixture, ops: Vec<KvOp>) -> KvOutcome {
    let out = fx.planner().plan_kv(&KvReq { ops });
    fx.commit();
    match out {
        Ok(o) => o,
        Err(e) => panic!("kv call refused: {e}"),
    }
}

fn results(fx: &mut Fixture, ops: Vec<KvOp>) -> Vec<KvResult> {
    match kv(fx, ops) {
        KvOutcome::Results(r) => r,
        KvOutcome::Precondition(p) => panic!("unexpected precondition {p:?}"),
    }
}

fn write(fx: &mut Fixture, op: KvOp) -> KvWriteResult {
    match results(fx, vec![op]).pop() {
        Some(KvResult::Write(w)) => w,
        other => panic!("not a write result: {other:?}"),
    }
}

fn found(fx: &mut Fixture, key: &str) -> Option<queenmq_protocol::KvRowView> {
    match results(fx, vec![get(key)]).pop() {
        Some(KvResult::Get(r)) => r,
        other => panic!("not a get result: {other:?}"),
    }
}

#[test]
fn writes_judge_their_conditions_and_versions_only_rise() {
    let mut fx = Fixture::new();
    let first = write(&mut fx, put("k", "1", 60));
    assert!(first.applied && first.version == 1);
    let second = write(&mut fx, put("other", "2", 60));
    assert_eq!(second.version, 2, "versions are tenant-global");

    let absent = write(
        &mut fx,
        with(put("k", "x", 60), |o| {
            if let KvOp::Put { if_absent, .. } = o {
                *if_absent = true;
            }
        }),
    );
    assert_eq!(absent.reason, Some(KvRefusal::Exists));
    assert_eq!((absent.version, absent.value.as_deref()), (1, Some("1")));

    let fenced = |expect| {
        with(put("k", "3", 60), move |o| {
            if let KvOp::Put { expect: e, .. } = o {
                *e = Some(expect);
            }
        })
    };
    assert_eq!(
        write(&mut fx, fenced(7)).reason,
        Some(KvRefusal::Version),
        "a stale writer is fenced"
    );
    assert!(write(&mut fx, fenced(1)).applied);
    let nothing = write(
        &mut fx,
        with(put("none", "1", 60), |o| {
            if let KvOp::Put { expect, .. } = o {
                *expect = Some(42);
            }
        }),
    );
    assert_eq!(
        (nothing.reason, nothing.version),
        (Some(KvRefusal::Absent), 0)
    );
    assert!(
        found(&mut fx, "none").is_none(),
        "an expect on nothing creates nothing"
    );

    let del = KvOp::Delete {
        ns: "ns".into(),
        key: "k".into(),
        expect: None,
        required: false,
    };
    assert!(write(&mut fx, del.clone()).applied);
    assert_eq!(write(&mut fx, del).reason, Some(KvRefusal::Absent));
    fx.assert_replays();
}

#[test]
fn incr_refuses_past_its_bounds_and_keeps_its_first_expiry() {
    let mut fx = Fixture::new();
    let refused = write(&mut fx, incr("first", 10, Some(5), 60));
    assert_eq!(refused.reason, Some(KvRefusal::Limit));
    assert!(
        found(&mut fx, "first").is_none(),
        "the first incr is guarded too"
    );

    let one = write(&mut fx, incr("c", 1, Some(2), 2));
    fx.advance(SECOND);
    let two = write(&mut fx, incr("c", 1, Some(2), 3600));
    assert_eq!(two.value.as_deref(), Some("2"));
    assert_eq!(
        two.expires_at_us, one.expires_at_us,
        "the window is not extended"
    );
    let over = write(&mut fx, incr("c", 1, Some(2), 60));
    assert_eq!(
        (over.reason, over.value.as_deref()),
        (Some(KvRefusal::Limit), Some("2"))
    );

    write(&mut fx, put("obj", "{\"count\":0}", 1));
    assert_eq!(
        write(&mut fx, incr("obj", 1, None, 60)).reason,
        Some(KvRefusal::Type)
    );
    fx.advance(2 * SECOND);
    let fresh = write(&mut fx, incr("obj", 1, None, 60));
    assert_eq!(
        fresh.value.as_deref(),
        Some("1"),
        "an expired non-number is absent"
    );
    fx.assert_replays();
}

#[test]
fn expired_rows_are_never_found_and_the_sweep_removes_them_in_bounded_steps() {
    let mut fx = Fixture::new();
    let ops: Vec<KvOp> = (0..KV_SWEEP_PER_CYCLE + 3)
        .map(|i| put(&format!("e{i}"), "1", 1))
        .collect();
    results(&mut fx, ops);
    let forever = with(put("keep", "1", 1), |o| {
        if let KvOp::Put { expiry, .. } = o {
            *expiry = KvExpiry::Forever;
        }
    });
    results(&mut fx, vec![forever]);
    fx.advance(2 * SECOND);
    assert!(found(&mut fx, "e0").is_none(), "expired before any sweep");
    assert_eq!(fx.st.kv.len(), KV_SWEEP_PER_CYCLE + 4, "not yet swept");
    // No room left in the entry: nothing is swept.
    let full = fx.cycle.entry.len();
    fx.planner().plan_kv_sweep(KV_SWEEP_PER_CYCLE, full);
    assert!(fx.cycle.entry.is_empty());
    fx.planner().plan_kv_sweep(KV_SWEEP_PER_CYCLE, usize::MAX);
    fx.commit();
    assert_eq!(fx.st.kv.len(), 4);
    fx.planner().plan_kv_sweep(KV_SWEEP_PER_CYCLE, usize::MAX);
    fx.commit();
    assert_eq!(fx.st.kv.len(), 1);
    assert!(found(&mut fx, "keep").is_some());
    fx.assert_replays();
}

#[test]
fn a_lost_required_op_applies_nothing_of_the_call() {
    let mut fx = Fixture::new();
    write(&mut fx, put("gate", "1", 60));
    let check = KvOp::Check {
        ns: "ns".into(),
        key: "gate".into(),
        expect: 99,
        required: true,
    };
    let out = kv(&mut fx, vec![put("side", "1", 60), check]);
    assert_eq!(
        out,
        KvOutcome::Precondition(KvPrecondition {
            index: 1,
            reason: KvRefusal::Version,
            version: 1,
            value: Some("1".into()),
        })
    );
    assert!(found(&mut fx, "side").is_none());
    fx.assert_replays();
}

#[test]
fn a_write_past_the_byte_cap_is_a_retriable_refusal() {
    let mut fx = Fixture::new();
    fx.st.kv.set_cap(4096);
    let big = "x".repeat(1500);
    write(&mut fx, put("a", &big, 60));
    write(&mut fx, put("b", &big, 60));
    let e = fx.planner().plan_kv(&KvReq {
        ops: vec![put("c", &big, 60)],
    });
    assert_eq!(e.err().map(|e| e.code), Some(ErrorCode::Unavailable));
    assert!(fx.st.kv.bytes() <= 4096);
    // What an earlier op of the call frees counts for a later one.
    let del = KvOp::Delete {
        ns: "ns".into(),
        key: "b".into(),
        expect: None,
        required: false,
    };
    let r = results(&mut fx, vec![del, put("c", &big, 60)]);
    assert!(matches!(&r[1], KvResult::Write(w) if w.applied));
    // Rewriting a row with one no larger fits: growth is what is capped.
    assert!(write(&mut fx, put("a", "1", 60)).applied);
    fx.assert_replays();
}

fn lock(fx: &mut Fixture, op: LockOp) -> LockResult {
    let out = fx.planner().plan_locks(&LockReq { ops: vec![op] });
    fx.commit();
    match out {
        Ok(mut r) => r.remove(0),
        Err(e) => panic!("lock call refused: {e}"),
    }
}

fn acquire(name: &str, owner: &str, limit: u32, ttl: u64) -> LockOp {
    LockOp::Acquire {
        name: name.into(),
        ttl_seconds: ttl,
        owner: owner.into(),
        limit,
    }
}

fn token(r: &LockResult) -> u64 {
    match r {
        LockResult::Acquired { token, .. } | LockResult::Renewed { token, .. } => *token,
        other => panic!("no token: {other:?}"),
    }
}

#[test]
fn a_lock_has_one_holder_and_its_token_only_rises() {
    let mut fx = Fixture::new();
    let a = lock(&mut fx, acquire("l", "a", 1, 30));
    let t1 = token(&a);
    assert!(matches!(
        lock(&mut fx, acquire("l", "b", 1, 30)),
        LockResult::Refused { contended: false, ref holders } if holders[0].owner == "a"
    ));
    assert!(matches!(
        lock(&mut fx, acquire("l", "a", 1, 30)),
        LockResult::Acquired { already: true, token, .. } if token == t1
    ));
    let renew = |token, owner: Option<&str>| LockOp::Renew {
        name: "l".into(),
        token,
        ttl_seconds: 30,
        slot: 0,
        owner: owner.map(String::from),
    };
    let t2 = token(&lock(&mut fx, renew(t1, Some("a"))));
    let t3 = token(&lock(&mut fx, renew(t1, Some("a"))));
    assert!(
        t3 > t2 && t2 > t1,
        "a resent renew still renews, with a newer token"
    );
    assert!(matches!(
        lock(&mut fx, renew(t1, Some("b"))),
        LockResult::Lost { .. }
    ));
    let release = |token| LockOp::Release {
        name: "l".into(),
        token,
        slot: 0,
    };
    assert!(matches!(
        lock(&mut fx, release(t1)),
        LockResult::Released {
            released: false,
            ..
        }
    ));
    assert!(matches!(
        lock(&mut fx, release(t3)),
        LockResult::Released { released: true, .. }
    ));
    assert!(token(&lock(&mut fx, acquire("l", "b", 1, 1))) > t3);
    fx.advance(2 * SECOND);
    assert!(
        token(&lock(&mut fx, acquire("l", "c", 1, 30))) > t3,
        "an expired permit is free"
    );
    fx.assert_replays();
}

#[test]
fn a_semaphore_grants_one_permit_per_slot() {
    let mut fx = Fixture::new();
    let slots: Vec<u32> = ["a", "b", "c"]
        .iter()
        .map(|o| match lock(&mut fx, acquire("s", o, 3, 30)) {
            LockResult::Acquired { slot, .. } => slot,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(slots, [0, 1, 2]);
    assert!(matches!(
        lock(&mut fx, acquire("s", "d", 3, 30)),
        LockResult::Refused { contended: true, ref holders } if holders.len() == 3
    ));
    let holders = lock(&mut fx, LockOp::Get { name: "s".into() });
    assert!(matches!(holders, LockResult::Holders(ref h) if h.len() == 3));
    let t = match lock(&mut fx, acquire("s", "b", 3, 30)) {
        LockResult::Acquired { token, .. } => token,
        other => panic!("{other:?}"),
    };
    lock(
        &mut fx,
        LockOp::Release {
            name: "s".into(),
            token: t,
            slot: 1,
        },
    );
    assert!(matches!(
        lock(&mut fx, acquire("s", "d", 3, 30)),
        LockResult::Acquired { slot: 1, .. }
    ));
    fx.assert_replays();
}

#[test]
fn a_transaction_rider_refused_by_its_gate_writes_nothing_and_names_the_flat_index() {
    let mut fx = Fixture::new();
    write(&mut fx, put("once", "true", 60));
    let gate = with(put("once", "true", 60), |o| {
        if let KvOp::Put {
            if_absent,
            required,
            ..
        } = o
        {
            *if_absent = true;
            *required = true;
        }
    });
    let req = TxnReq {
        ops: vec![TxnOp::Push(vec![item("q", "p", "t1")])],
        kv: vec![gate.clone()],
        ..Default::default()
    };
    let out = fx.planner().plan_transaction(&req, None);
    fx.commit();
    let refused = match out {
        Ok(r) => r.kv_precondition,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        refused.map(|p| (p.index, p.reason)),
        Some((1, KvRefusal::Exists))
    );
    assert!(fx.st.queue_named("q").is_none(), "the push did not happen");

    let req = TxnReq {
        ops: vec![TxnOp::Push(vec![item("q", "p", "t1")])],
        kv: vec![with(gate, |o| {
            if let KvOp::Put { key, .. } = o {
                *key = "fresh".into();
            }
        })],
        ..Default::default()
    };
    let out = fx.planner().plan_transaction(&req, None);
    fx.commit();
    let results = match out {
        Ok(r) => r.results,
        Err(e) => panic!("{e}"),
    };
    assert!(matches!(results.last(), Some(TxnOpResult::Kv(KvResult::Write(w))) if w.applied));
    assert!(found(&mut fx, "fresh").is_some());
    assert_eq!(fx.st.kv.last_version, 2);
    fx.assert_replays();
}

/// A cluster follower's Metadata reads of the door's rows: answered from the applied state,
/// and only when every op reads (docs/cluster.md "Kafka clients").
#[test]
fn applied_gets_answer_reads_only() {
    let mut fx = Fixture::new();
    write(&mut fx, put("a", "1", 3600));
    let reads = KvReq {
        ops: vec![get("a"), get("missing")],
    };
    let versions_before = fx.st.kv.last_version;
    match super::applied_gets(&fx.st, fx.clock, &reads) {
        Some(Ok(KvOutcome::Results(r))) => {
            assert!(
                matches!(&r[0], KvResult::Get(Some(row)) if row.value.as_deref() == Some("1")),
                "{r:?}"
            );
            assert!(matches!(&r[1], KvResult::Get(None)), "{r:?}");
        }
        other => panic!("not answered: {other:?}"),
    }
    assert_eq!(fx.st.kv.last_version, versions_before);
    let mixed = KvReq {
        ops: vec![get("a"), put("b", "2", 3600)],
    };
    assert!(super::applied_gets(&fx.st, fx.clock, &mixed).is_none());
}
