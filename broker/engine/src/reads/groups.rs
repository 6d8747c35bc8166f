//! Consumer-group answers.

use queenmq_protocol::{GroupQueueLag, GroupView, LagSpread, LaggingRow, QueenError, Spread};

use super::committed_of;
use crate::state::model::Group;
use crate::state::State;

/// How far a group is behind on its queue: the messages it has not committed, and when the
/// oldest of them was written.
pub struct GroupLag {
    pub messages: u64,
    pub oldest_pending_us: Option<i64>,
}

/// None when the group's queue is gone.
pub fn group_lag(st: &State, g: &Group) -> Option<GroupLag> {
    let q = st.queues.get(&g.queue)?;
    let mut lag = GroupLag {
        messages: 0,
        oldest_pending_us: None,
    };
    for pid in &q.partition_order {
        let Some(p) = st.partitions.get(&pid) else {
            continue;
        };
        let c = committed_of(g, p);
        lag.messages += p.next_offset.saturating_sub(c);
        if c < p.next_offset {
            if let Some(t) = p.created_of(c) {
                lag.oldest_pending_us = Some(lag.oldest_pending_us.map_or(t, |o| o.min(t)));
            }
        }
    }
    Some(lag)
}

/// The instant the group reads from: the one a subscription-timestamp change (or a
/// `subscriptionFrom`) stored, to the millisecond it was sent; the registration time for a group
/// that reads everything.
fn subscribed_us(g: &Group) -> i64 {
    if g.start_from_us == i64::MIN {
        g.created_us
    } else {
        g.start_from_us
    }
}

fn group_queue_lag(st: &State, g: &Group) -> Option<GroupQueueLag> {
    let (q, lag) = (st.queues.get(&g.queue)?, group_lag(st, g)?);
    let lag_seconds = lag
        .oldest_pending_us
        .map_or(0, |t| (st.last_now_us - t).max(0) / 1_000_000);
    Some(GroupQueueLag {
        queue: q.name.clone(),
        pending: lag.messages,
        lag_seconds,
        partitions: g.cursors.len(),
        subscribed_us: subscribed_us(g),
    })
}

/// The overview's lag block: over every group whose queue exists.
pub fn lag_spread(st: &State) -> LagSpread {
    let (mut secs, mut msgs) = (Vec::new(), Vec::new());
    for lag in st.groups.values().filter_map(|g| group_queue_lag(st, g)) {
        secs.push(lag.lag_seconds.max(0) as u64);
        msgs.push(lag.pending);
    }
    LagSpread {
        time: Spread::of(secs),
        offset: Spread::of(msgs),
    }
}

pub fn list(st: &State) -> Vec<GroupView> {
    let mut by_name: std::collections::BTreeMap<&str, Vec<Option<GroupQueueLag>>> =
        Default::default();
    for g in st.groups.values() {
        by_name
            .entry(g.name.as_str())
            .or_default()
            .push(group_queue_lag(st, g));
    }
    by_name
        .into_iter()
        .map(|(name, queues)| GroupView {
            name: name.to_string(),
            queues,
        })
        .collect()
}

pub fn one(st: &State, name: &str) -> Result<GroupView, QueenError> {
    let queues: Vec<Option<GroupQueueLag>> = st
        .groups
        .values()
        .filter(|g| g.name == name)
        .map(|g| group_queue_lag(st, g))
        .collect();
    if queues.is_empty() {
        return Err(QueenError::not_found(format!(
            "Consumer group {name} not found"
        )));
    }
    Ok(GroupView {
        name: name.to_string(),
        queues,
    })
}

pub fn lagging(st: &State, min_lag_seconds: i64) -> Vec<LaggingRow> {
    st.groups
        .values()
        .filter_map(|g| group_queue_lag(st, g).map(|lag| (g, lag)))
        .filter(|(_, lag)| lag.lag_seconds >= min_lag_seconds && lag.pending > 0)
        .map(|(g, lag)| LaggingRow {
            group: g.name.clone(),
            lag,
        })
        .collect()
}
