//! The memberships this node applied, oldest first (meta `raft/membership_history`; review
//! s25 H2): a checkpoint generation at applied index `A` records the `raft/membership` of its
//! save, which may have been applied past `A` (a node added to an idle group: the membership
//! entry comes after the last application entry, and the next checkpoint is still at that
//! entry's index). The membership in force at `A` is then the newest of the history at or
//! below `A`, provided the history holds the recorded one and reaches back to `A`: so such a
//! checkpoint is offered as a snapshot at once instead of after the next write and checkpoint.
//!
//! Every membership applied is recorded before `raft/membership` is written (a crash between
//! leaves it recorded, and the replay's apply finds it last and adds nothing); an install
//! starts the history again at the snapshot's membership (the ones between were never applied
//! here). A directory written before the history existed is seeded with its applied
//! membership at open. At most `KEPT` are kept: a checkpoint older than the oldest kept is
//! declined, as before.

// openraft's storage traits return `openraft::StorageError` (~200 bytes) by value.
#![allow(clippy::result_large_err)]

use openraft::ErrorSubject;

use crate::backend::StateStore;
use crate::meta;
use crate::types::{OrStorageError, StoredMembership};

pub const MEMBERSHIP_HISTORY: &str = "raft/membership_history";
/// Memberships change a few times in a group's life; a checkpoint is at most two checkpoint
/// intervals old when it is offered.
pub const KEPT: usize = 16;

/// The history as stored; an absent row is an empty history.
pub fn read(store: &StateStore) -> Result<Vec<StoredMembership>, OrStorageError> {
    Ok(meta::get(store, MEMBERSHIP_HISTORY, ErrorSubject::StateMachine)?.unwrap_or_default())
}

/// Appends `m` (applied now) unless it is the last already, keeping the newest `KEPT` (the
/// state machine writes `with`'s answer in its membership transaction; tests call this).
#[cfg(test)]
pub fn record(store: &StateStore, m: &StoredMembership) -> Result<(), OrStorageError> {
    match with(store, m)? {
        Some(h) => meta::put(store, MEMBERSHIP_HISTORY, &h, ErrorSubject::StateMachine),
        None => Ok(()),
    }
}

/// The history `record` would store for `m`; None when `m` is the last already.
pub fn with(
    store: &StateStore,
    m: &StoredMembership,
) -> Result<Option<Vec<StoredMembership>>, OrStorageError> {
    let mut h = read(store)?;
    if h.last() == Some(m) {
        return Ok(None);
    }
    h.push(m.clone());
    let over = h.len().saturating_sub(KEPT);
    h.drain(..over);
    Ok(Some(h))
}

/// The history of a node that installed a snapshot of membership `m`: `m` alone.
pub fn restart_at(m: &StoredMembership) -> Vec<StoredMembership> {
    vec![m.clone()]
}

/// Seeds an absent history with the applied membership `m` (a directory from before the
/// history): it is in force from its own log id on.
pub fn seed(store: &StateStore, m: &StoredMembership) -> Result<(), OrStorageError> {
    if m.log_id().is_none() || store_has(store)? {
        return Ok(());
    }
    meta::put(
        store,
        MEMBERSHIP_HISTORY,
        &restart_at(m),
        ErrorSubject::StateMachine,
    )
}

fn store_has(store: &StateStore) -> Result<bool, OrStorageError> {
    Ok(
        meta::get::<Vec<StoredMembership>>(store, MEMBERSHIP_HISTORY, ErrorSubject::StateMachine)?
            .is_some(),
    )
}

/// The membership in force at applied index `a` of a checkpoint that recorded `recorded`:
/// `recorded` itself when it was applied at or below `a`; otherwise the newest entry of
/// `history` before `recorded` whose log id is at or below `a`, when `history` holds
/// `recorded` and such an entry (so it reaches back to `a`). None: not known, declined.
pub fn in_force_at(
    recorded: &StoredMembership,
    history: &[StoredMembership],
    a: u64,
) -> Option<StoredMembership> {
    let at_or_below = |m: &StoredMembership| m.log_id().is_none_or(|l| l.index <= a);
    if at_or_below(recorded) {
        return Some(recorded.clone());
    }
    let p = history.iter().rposition(|m| m == recorded)?;
    history[..p].iter().rev().find(|m| at_or_below(m)).cloned()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::types::{log_id, Membership};

    fn m(index: u64, voters: &[u64]) -> StoredMembership {
        let v: BTreeSet<u64> = voters.iter().copied().collect();
        StoredMembership::new(Some(log_id(1, index)), Membership::new(vec![v], ()))
    }

    #[test]
    fn the_membership_in_force_at_a_is_the_newest_at_or_below_it() {
        let h = [m(0, &[1, 2, 3]), m(50, &[1, 2, 3, 4]), m(90, &[1, 2, 4])];
        // Recorded at or below A: itself.
        assert_eq!(in_force_at(&h[1], &h, 60), Some(h[1].clone()));
        // Applied past A: the one before it.
        assert_eq!(in_force_at(&h[1], &h, 49), Some(h[0].clone()));
        assert_eq!(in_force_at(&h[2], &h, 60), Some(h[1].clone()));
        assert_eq!(in_force_at(&h[2], &h, 20), Some(h[0].clone()));
        // A history that does not reach back to A, or does not hold the recorded one.
        assert_eq!(in_force_at(&h[2], &h[1..], 20), None);
        assert_eq!(in_force_at(&m(95, &[1]), &h, 60), None);
        assert_eq!(in_force_at(&h[2], &[], 60), None);
    }

    #[test]
    fn recording_appends_once_and_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("s.redb")).unwrap();
        seed(&store, &m(0, &[1])).unwrap();
        seed(&store, &m(3, &[1, 2])).unwrap();
        assert_eq!(read(&store).unwrap(), vec![m(0, &[1])]);
        record(&store, &m(0, &[1])).unwrap();
        record(&store, &m(5, &[1, 2])).unwrap();
        assert_eq!(read(&store).unwrap(), vec![m(0, &[1]), m(5, &[1, 2])]);
        for i in 0..(KEPT as u64 + 3) {
            record(&store, &m(10 + i, &[1, 2])).unwrap();
        }
        let h = read(&store).unwrap();
        assert_eq!(h.len(), KEPT);
        assert_eq!(h.last(), Some(&m(10 + KEPT as u64 + 2, &[1, 2])));
    }
}
