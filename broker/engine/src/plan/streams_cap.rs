//! The bound on one streams query's state (`TxnReq::state_cap`): judged with a cycle's `kv`
//! rider before anything is emitted, so a cycle that would take its query past the bound is
//! refused whole and changes nothing. Only growth is refused: a cycle that keeps or shrinks
//! the state passes, so a query over a lowered bound can still flush its windows.

use std::collections::HashMap;

use queenmq_protocol::{ErrorCode, QueenError, StateCap};

use super::kv::{Judged, KvWrite};
use super::Planner;
use crate::state::kv::{row_bytes, streams_query};

impl Planner<'_> {
    pub(super) fn check_state_cap(
        &self,
        cap: &StateCap,
        judged: Option<&Judged>,
    ) -> Result<(), QueenError> {
        let Some(judged) = judged else {
            return Ok(());
        };
        // The last write of each of the query's rows, then its change against the row held.
        let mut last: HashMap<&str, Option<u64>> = HashMap::new();
        for w in judged.writes() {
            let (ns, key, bytes) = match w {
                KvWrite::Put { ns, key, row } => (ns, key, Some(row_bytes(ns, key, &row.value))),
                KvWrite::Delete { ns, key } => (ns, key, None),
            };
            if streams_query(ns, key) == Some(cap.query_id.as_str()) {
                last.insert(key.as_str(), bytes.map(|b| b as u64));
            }
        }
        let ns = queenmq_protocol::STREAMS_NS;
        let (mut keys, mut bytes) = (0i64, 0i64);
        for (key, new) in last {
            let old = self
                .st
                .kv
                .row(ns, key)
                .map(|r| row_bytes(ns, key, &r.value) as i64);
            keys += i64::from(new.is_some()) - i64::from(old.is_some());
            bytes += new.map_or(0, |b| b as i64) - old.unwrap_or(0);
        }
        let (held_keys, held_bytes) = self.st.kv.streams_state(&cap.query_id);
        let after = |held: u64, delta: i64| held.saturating_add_signed(delta);
        let over_keys = keys > 0 && after(held_keys, keys) > cap.max_keys;
        let over_bytes = bytes > 0 && after(held_bytes, bytes) > cap.max_bytes;
        if !(over_keys || over_bytes) {
            return Ok(());
        }
        Err(QueenError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "query {} would hold {} state rows of {} bytes; the limits are \
                 streams_state_max_keys = {} and streams_state_max_bytes = {}; nothing applied",
                cap.query_id,
                after(held_keys, keys),
                after(held_bytes, bytes),
                cap.max_keys,
                cap.max_bytes
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use queenmq_protocol::{ErrorCode, KvExpiry, KvOp, StateCap, TxnReq, STREAMS_NS};

    use crate::plan::fixture::Fixture;

    fn put(key: &str, value: &str) -> KvOp {
        KvOp::Put {
            ns: STREAMS_NS.into(),
            key: format!("row/q1/7/{key}"),
            value: value.into(),
            expiry: KvExpiry::Forever,
            expect: None,
            if_absent: false,
            required: true,
        }
    }

    fn delete(key: &str) -> KvOp {
        KvOp::Delete {
            ns: STREAMS_NS.into(),
            key: format!("row/q1/7/{key}"),
            expect: None,
            required: true,
        }
    }

    fn cycle(fx: &mut Fixture, kv: Vec<KvOp>, max_keys: u64, max_bytes: u64) -> Option<ErrorCode> {
        let req = TxnReq {
            kv,
            state_cap: Some(StateCap {
                query_id: "q1".into(),
                max_keys,
                max_bytes,
            }),
            ..Default::default()
        };
        let out = fx.planner().plan_transaction(&req, None);
        let code = out.err().map(|e| e.code);
        if code.is_some() {
            assert!(fx.cycle.entry.is_empty(), "a refused cycle emits nothing");
        }
        fx.commit();
        code
    }

    #[test]
    fn a_cycle_past_the_key_bound_is_refused_whole_and_one_that_does_not_grow_passes() {
        let mut fx = Fixture::new();
        let big = u64::MAX;
        assert_eq!(
            cycle(&mut fx, vec![put("a", "1"), put("b", "1")], 2, big),
            None
        );
        let held = fx.st.kv.streams_state("q1");
        assert_eq!(held.0, 2);
        let refused = cycle(&mut fx, vec![put("a", "2"), put("c", "1")], 2, big);
        assert_eq!(refused, Some(ErrorCode::PayloadTooLarge));
        assert_eq!(fx.st.kv.streams_state("q1"), held, "nothing applied");
        // One row in, one out: the count stays at the bound.
        assert_eq!(
            cycle(&mut fx, vec![put("c", "1"), delete("a")], 2, big),
            None
        );
        // Over a bound lowered since, a cycle that shrinks the state still passes.
        assert_eq!(cycle(&mut fx, vec![delete("b")], 0, big), None);
        assert_eq!(fx.st.kv.streams_state("q1").0, 1);
        // Another query's rows are not this one's.
        let other = KvOp::Put {
            ns: STREAMS_NS.into(),
            key: "row/q2/7/x".into(),
            value: "1".into(),
            expiry: KvExpiry::Forever,
            expect: None,
            if_absent: false,
            required: true,
        };
        assert_eq!(cycle(&mut fx, vec![other], 1, big), None);
        fx.assert_replays();
    }

    #[test]
    fn a_cycle_past_the_byte_bound_is_refused_even_without_a_new_key() {
        let mut fx = Fixture::new();
        assert_eq!(cycle(&mut fx, vec![put("a", "1")], 10, u64::MAX), None);
        let (_, bytes) = fx.st.kv.streams_state("q1");
        let grown = vec![put("a", &"9".repeat(100))];
        assert_eq!(
            cycle(&mut fx, grown.clone(), 10, bytes + 50),
            Some(ErrorCode::PayloadTooLarge)
        );
        assert_eq!(fx.st.kv.streams_state("q1"), (1, bytes));
        assert_eq!(cycle(&mut fx, grown, 10, bytes + 100), None);
    }
}
