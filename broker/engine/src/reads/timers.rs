//! Timer reads (spec/native-api.md §2.15): one pending timer, or a keyset page of a queue's.

use bytes::Bytes;
use queenmq_protocol::{TimerPage, TimerView};
use uuid::Uuid;

use crate::state::timers::TimerRow;
use crate::state::State;

/// Largest page of a listing; a bigger `limit` is clamped to it.
pub const MAX_TIMER_PAGE: usize = 1000;

fn view(queue: &str, key: &str, r: &TimerRow) -> TimerView {
    TimerView {
        queue: queue.to_string(),
        key: key.to_string(),
        partition: r.partition.clone(),
        payload: Bytes::copy_from_slice(&r.payload),
        txn: r.txn.clone(),
        message_id: Uuid::from_u128(r.message_id).to_string(),
        deliver_at_us: r.deliver_at_us,
        created_us: r.created_us,
    }
}

pub fn one(st: &State, queue: &str, key: &str) -> Option<TimerView> {
    st.timers.get(queue, key).map(|r| view(queue, key, r))
}

pub fn page(st: &State, queue: &str, after: Option<&str>, limit: usize) -> TimerPage {
    let (rows, truncated) = st.timers.page(queue, after, limit.clamp(1, MAX_TIMER_PAGE));
    let rows: Vec<TimerView> = rows.into_iter().map(|(k, r)| view(queue, k, r)).collect();
    let next_after = truncated
        .then(|| rows.last().map(|r| r.key.clone()))
        .flatten();
    TimerPage {
        rows,
        truncated,
        next_after,
    }
}
