//! Applying a seek's instant: the group reads from the time the seek named.
//!
//! A seek to a timestamp moves every cursor of the group on the queue (CursorPut effects) and
//! stores the instant it was sent as the group's `start_from_us` (effect kind 65,
//! [`Effect::GroupStartFrom`](crate::entry::Effect::GroupStartFrom)). Its detail then shows that
//! instant as `subscribedAt`, to the millisecond, as after a subscription-timestamp change; and
//! a partition created after the seek starts where the seek would have put it. The field is
//! already a column of the group record of every checkpoint version, so no section changes.

use super::State;

impl State {
    /// A group that is gone (deleted in the same entry) is left alone.
    pub(super) fn set_group_start(&mut self, gid: u64, start_from_us: i64) {
        if let Some(g) = self.groups.get_mut(&gid) {
            g.start_from_us = start_from_us;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::entry::Effect;
    use crate::state::config::QueueConfig;
    use crate::state::{Loc, State};

    fn loc() -> Loc {
        Loc { index: 3, pos: 0 }
    }

    #[test]
    fn a_seek_instant_replaces_the_start_and_survives_a_checkpoint() {
        let mut s = State::default();
        s.apply(
            &Effect::QueueUpsert {
                qid: 1,
                name: "q",
                namespace: "",
                task: "",
                configured: true,
                config: QueueConfig::default(),
            },
            10,
            loc(),
        );
        s.apply(
            &Effect::GroupRegister {
                qid: 1,
                gid: 4,
                name: "g",
                start_from_us: i64::MIN,
            },
            11,
            loc(),
        );
        let at = 1_709_618_828_123_000;
        s.apply(
            &Effect::GroupStartFrom {
                gid: 4,
                start_from_us: at,
            },
            12,
            loc(),
        );
        // An unknown group is no error: it was deleted before this effect.
        s.apply(
            &Effect::GroupStartFrom {
                gid: 99,
                start_from_us: 1,
            },
            12,
            loc(),
        );
        assert_eq!(s.groups[&4].start_from_us, at);
        let back = super::super::snapshot::decode_state(&super::super::snapshot::encode_state(&s))
            .expect("the checkpoint reads back");
        assert_eq!(back.groups[&4].start_from_us, at);
        assert!(!back.groups.contains_key(&99));
    }
}
