//! Bounds on what one KV or lock call may build or write: the answer budget of listings, the
//! permit a renew writes, the all-or-nothing lock call.

use queenmq_protocol::limits::MAX_KV_ANSWER_BYTES;
use queenmq_protocol::{KvExpiry, KvOp, KvOutcome, KvReq, KvResult};

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
