//! Applying a seek's instant: the group reads from the time the seek named.
//!
//! A seek to a timestamp moves every cursor of the group on the queue (CursorPut effects) and
//! stores the instant it was sent as the group's `start_from_us` (effect kind 65,
//! [`Effect::GroupStartFrom`](crate::entry::Effect::GroupStartFrom)). Its detail then shows that
//! instant as `subscribedAt`, to the millisecond, as after a subscription-timestamp change; and
//! a partition created after the seek starts where the seek would have put it. The planner
//! clamps the instant to the node's clock (a future one would hide every later partition) and
//! stores its now for a seek to the end. The field is
//! already a column of the group record of every checkpoint version, so no section changes
//! (its checkpoint test is in state/snapshot.rs, beside the others).

use super::State;

impl State {
    /// A group that is gone (deleted in the same entry) is left alone.
    pub(super) fn set_group_start(&mut self, gid: u64, start_from_us: i64) {
        if let Some(g) = self.groups.get_mut(&gid) {
            g.start_from_us = start_from_us;
        }
    }
}
