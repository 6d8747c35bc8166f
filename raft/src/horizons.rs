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
    use super::later;
    use crate::types::log_id;

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
