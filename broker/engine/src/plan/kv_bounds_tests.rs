//! Bounds on what one KV or lock call may build or write: the answer budget of listings, the
//! permit a renew writes, the all-or-nothing lock call.

use queenmq_protocol::limits::MAX_KV_ANSWER_BYTES;
use queenmq_protocol::{
    ErrorCode, KvExpiry, KvOp, KvOutcome, KvReq, KvResult, LockOp, LockReq, LockResult, LOCKS_NS,
};

use super::fixture::Fixture;

fn put(key: &str, value: &str) -> KvOp {
    KvOp::Put {
        ns: "ns".into(),
        key: key.into(),
        value: value.into(),
        expiry: KvExpiry::Forever,
        expect: None,
        if_absent: false,
        required: false,
    }
}

fn results(fx: &mut Fixture, ops: Vec<KvOp>) -> Vec<KvResult> {
    let out = fx.planner().plan_kv(&KvReq { ops });
    fx.commit();
    match out {
        Ok(KvOutcome::Results(r)) => r,
        other => panic!("unexpected {other:?}"),
    }
}

/// Bytes of values a listing answer holds.
fn value_bytes(r: &[KvResult]) -> usize {
    r.iter()
        .map(|r| match r {
            KvResult::GetMany { rows, .. } | KvResult::GetPrefix { rows, .. } => rows
                .iter()
                .map(|v| v.value.as_ref().map_or(0, String::len))
                .sum(),
            _ => 0,
        })
        .sum()
}

#[test]
fn listings_of_one_call_share_an_answer_budget_and_still_move_on() {
    let mut fx = Fixture::new();
    let big = format!("\"{}\"", "x".repeat(200 * 1024));
    for k in 0..40 {
        results(&mut fx, vec![put(&format!("k{k:02}"), &big)]);
    }
    // One key named 1000 times, in 256 ops: each row is answered once per op, and the call
    // stops at the budget.
    let many = KvOp::GetMany {
        ns: "ns".into(),
        keys: vec!["k00".to_string(); 1000],
    };
    let r = results(&mut fx, vec![many; 256]);
    match &r[0] {
        KvResult::GetMany {
            rows,
            missing,
            truncated,
        } => {
            assert_eq!((rows.len(), missing.len(), *truncated), (1, 0, false));
        }
        other => panic!("{other:?}"),
    }
    assert!(value_bytes(&r) <= MAX_KV_ANSWER_BYTES + 256 * big.len());
    let distinct = KvOp::GetMany {
        ns: "ns".into(),
        keys: (0..40).map(|k| format!("k{k:02}")).collect(),
    };
    let r = results(&mut fx, vec![distinct.clone(), distinct]);
    assert!(matches!(&r[0], KvResult::GetMany { truncated: true, rows, .. } if rows.len() < 40));
    // The budget is spent: the second op answers its first key only.
    assert!(matches!(&r[1], KvResult::GetMany { truncated: true, rows, .. } if rows.len() == 1));

    let prefix = |after: Option<String>| KvOp::GetPrefix {
        ns: "ns".into(),
        prefix: "k".into(),
        after,
        limit: 1000,
        keys_only: false,
    };
    let mut after = None;
    let mut seen = 0;
    loop {
        let r = results(&mut fx, vec![prefix(after.clone())]);
        let KvResult::GetPrefix {
            rows,
            truncated,
            next_after,
        } = &r[0]
        else {
            panic!("{r:?}")
        };
        assert!(!rows.is_empty());
        assert!(value_bytes(&r) <= MAX_KV_ANSWER_BYTES + big.len());
        seen += rows.len();
        if !truncated {
            break;
        }
        assert_eq!(next_after.as_deref(), rows.last().map(|r| r.key.as_str()));
        after = next_after.clone();
    }
    assert_eq!(seen, 40, "paging by nextAfter reaches every row once");
    fx.assert_replays();
}

fn locks(
    fx: &mut Fixture,
    ops: Vec<LockOp>,
) -> Result<Vec<LockResult>, queenmq_protocol::QueenError> {
    let out = fx.planner().plan_locks(&LockReq { ops });
    fx.commit();
    out
}

fn acquire(name: &str, owner: &str) -> LockOp {
    LockOp::Acquire {
        name: name.into(),
        ttl_seconds: 30,
        owner: owner.into(),
        limit: 1,
    }
}

fn renew(token: u64, owner: Option<&str>) -> LockOp {
    LockOp::Renew {
        name: "l".into(),
        token,
        ttl_seconds: 30,
        slot: 0,
        owner: owner.map(str::to_string),
    }
}

#[test]
fn a_renew_writes_a_permit_rebuilt_from_its_owner_never_the_row_as_stored() {
    let mut fx = Fixture::new();
    let Ok(r) = locks(&mut fx, vec![acquire("l", "a")]) else {
        panic!("acquire refused")
    };
    let LockResult::Acquired { token, .. } = r[0] else {
        panic!("{r:?}")
    };
    let before = fx.st.kv.row(LOCKS_NS, "l#0").cloned();
    let Ok(r) = locks(&mut fx, vec![renew(token, None)]) else {
        panic!("renew refused")
    };
    assert!(matches!(r[0], LockResult::Renewed { .. }), "{r:?}");
    let after = fx.st.kv.row(LOCKS_NS, "l#0").cloned();
    assert_eq!(
        before.map(|r| r.value),
        after.as_ref().map(|r| r.value.clone()),
        "owner and since kept"
    );
    // A row of the namespace that only starts like a permit, with a long tail: no permit.
    let forged = format!(
        "{{\"owner\":\"a\",\"since\":1,\"pad\":\"{}\"}}",
        "x".repeat(100_000)
    );
    let r = results(
        &mut fx,
        vec![KvOp::Put {
            ns: LOCKS_NS.into(),
            key: "l#0".into(),
            value: forged,
            expiry: KvExpiry::Seconds(30),
            expect: None,
            if_absent: false,
            required: false,
        }],
    );
    let KvResult::Write(w) = &r[0] else {
        panic!("{r:?}")
    };
    let Ok(r) = locks(&mut fx, vec![renew(w.version, Some("a"))]) else {
        panic!("renew refused")
    };
    assert!(matches!(r[0], LockResult::Lost { .. }), "{r:?}");
    assert_eq!(
        fx.st.kv.row(LOCKS_NS, "l#0").map(|r| r.version),
        Some(w.version)
    );
    fx.assert_replays();
}

#[test]
fn a_lock_call_refused_by_a_later_op_writes_nothing() {
    let mut one = Fixture::new();
    assert!(locks(&mut one, vec![acquire("l1", "a")]).is_ok());
    let permit = one.st.kv.bytes();
    let mut fx = Fixture::new();
    fx.st.kv.set_cap(permit + permit / 2);
    let e = locks(&mut fx, vec![acquire("l1", "a"), acquire("l2", "a")]);
    assert_eq!(e.err().map(|e| e.code), Some(ErrorCode::Unavailable));
    assert!(
        fx.st.kv.is_empty(),
        "the first acquire was not written either"
    );
    // A call's later op sees its earlier ones.
    let Ok(r) = locks(&mut fx, vec![acquire("l1", "a"), acquire("l1", "b")]) else {
        panic!("refused")
    };
    assert!(matches!(r[1], LockResult::Refused { .. }), "{r:?}");
    fx.assert_replays();
}
