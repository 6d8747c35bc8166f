//! The two places the log can be said to start (docs/raft-storage.md, `LogStore`).

use crate::types::RaftLogId;

/// Where the log starts, as openraft sees it and as the disk holds it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Horizons {
    /// openraft's view: read at open, moved only by `purge`. Reads below it are clamped.
    pub raft: Option<RaftLogId>,
    /// Meta `raft/purged`: the larger of every `purge` and `reclaim_upto`. Never moves back,
    /// so a restart never expects entries a reclamation deleted.
    pub durable: Option<RaftLogId>,
}

/// What `append` does with one entry, given openraft's horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtHorizon {
    /// Above the horizon: stored.
    Store,
    /// At or below it, with the same term as what is known there, or with no term known (the
    /// record is gone): purged by definition (covered by the applied state), so not stored.
    Drop,
    /// At or below it with a term other than the one known at that index: two entries with one
    /// index and two terms, at an index already applied. A Raft safety violation, refused.
    Conflict { known: u64 },
}

/// Classifies an entry `(term, index)` against openraft's horizon; `known_term` gives the term
/// a record still present at an index below the horizon carries (purge keeps the records).
pub fn at_horizon(
    term: u64,
    index: u64,
    horizon: Option<RaftLogId>,
    known_term: impl FnOnce(u64) -> Option<u64>,
) -> AtHorizon {
    let Some(h) = horizon.filter(|h| index <= h.index) else {
        return AtHorizon::Store;
    };
    let known = if index == h.index {
        Some(h.leader_id.term)
    } else {
        known_term(index)
    };
    match known {
        Some(known) if known != term => AtHorizon::Conflict { known },
        _ => AtHorizon::Drop,
    }
}

/// The one with the higher index (None is lowest).
pub fn later(a: Option<RaftLogId>, b: Option<RaftLogId>) -> Option<RaftLogId> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.index > x.index { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::{at_horizon, later, AtHorizon};
    use crate::types::log_id;

    /// Review s12 F7: after `purge((2, 5))` an append of `(3, 5)` is an error, `(2, 5)` is
    /// dropped; below the horizon a surviving record's term decides, an unknown term drops.
    #[test]
    fn a_term_conflict_at_or_below_the_horizon_is_refused_not_dropped() {
        let h = Some(log_id(2, 5));
        let gone = |_| None;
        assert_eq!(at_horizon(3, 5, h, gone), AtHorizon::Conflict { known: 2 });
        assert_eq!(at_horizon(2, 5, h, gone), AtHorizon::Drop);
        assert_eq!(at_horizon(1, 3, h, gone), AtHorizon::Drop);
        assert_eq!(
            at_horizon(2, 3, h, |i| (i == 3).then_some(1)),
            AtHorizon::Conflict { known: 1 }
        );
        assert_eq!(at_horizon(1, 3, h, |_| Some(1)), AtHorizon::Drop);
        assert_eq!(at_horizon(9, 6, h, |_| Some(1)), AtHorizon::Store);
        assert_eq!(at_horizon(9, 0, None, |_| Some(1)), AtHorizon::Store);
    }

    #[test]
    fn later_takes_the_higher_index_and_ignores_none() {
        assert_eq!(later(None, None), None);
        assert_eq!(later(Some(log_id(1, 5)), None), Some(log_id(1, 5)));
        assert_eq!(later(None, Some(log_id(1, 5))), Some(log_id(1, 5)));
        assert_eq!(
            later(Some(log_id(2, 9)), Some(log_id(1, 5))),
            Some(log_id(2, 9))
        );
        assert_eq!(
            later(Some(log_id(1, 5)), Some(log_id(2, 9))),
            Some(log_id(2, 9))
        );
    }
}
