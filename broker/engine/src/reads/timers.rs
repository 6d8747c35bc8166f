//! Timer reads (spec/native-api.md §2.15): one pending timer, or a keyset page of a queue's.

use bytes::Bytes;
use queenmq_protocol::{TimerPage, TimerView};
use uuid::Uuid;

use crate::state::timers::TimerRow;
use crate::state::State;

/// Largest page of a listing; a bigger `limit` is clamped to it.
pub const MAX_TIMER_PAGE: usize = 1000;

fn view(queue: &str, key: &str, r: &TimerRow, with_payload: bool) -> TimerView {
    TimerView {
        queue: queue.to_string(),
        key: key.to_string(),
        partition: r.partition.clone(),
        payload: with_payload.then(|| Bytes::copy_from_slice(r.stored_payload())),
        encrypted: r.sealed(),
        txn: r.txn.clone(),
        message_id: Uuid::from_u128(r.message_id).to_string(),
        deliver_at_us: r.deliver_at_us,
        created_us: r.created_us,
    }
}

pub fn one(st: &State, queue: &str, key: &str) -> Option<TimerView> {
    st.timers.get(queue, key).map(|r| view(queue, key, r, true))
}

pub fn page(st: &State, queue: &str, after: Option<&str>, limit: usize) -> TimerPage {
    let (rows, truncated) = st.timers.page(queue, after, limit.clamp(1, MAX_TIMER_PAGE));
    let rows: Vec<TimerView> = rows
        .into_iter()
        .map(|(k, r)| view(queue, k, r, false))
        .collect();
    let next_after = truncated
        .then(|| rows.last().map(|r| r.key.clone()))
        .flatten();
    TimerPage {
        rows,
        truncated,
        next_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peek_carries_the_payload_and_a_page_does_not_copy_it() {
        let mut st = State::default();
        let row = TimerRow {
            partition: "Default".into(),
            txn: "t".into(),
            message_id: 7,
            deliver_at_us: 1,
            created_us: 0,
            payload: b"{\"a\":1}".to_vec(),
        };
        st.timers.put("q", "k", row);
        let peeked = one(&st, "q", "k").and_then(|v| v.payload);
        assert_eq!(peeked.as_deref(), Some(&b"{\"a\":1}"[..]));
        let p = page(&st, "q", None, 10);
        assert_eq!(p.rows.len(), 1);
        assert!(p.rows.iter().all(|r| r.payload.is_none()));
    }
}
