//! What a joining node's horizon read (`join_read`) tells the operator, rate-limited (review
//! s33 M-2): a read that never ends looked the same whether no peer was there to ask, the
//! token was wrong, the peers ran a build without the commit read, or no leader was
//! confirmed, since the per-peer reasons were at debug only.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How often the same complaint is said at warn.
pub(crate) const SAY_EVERY: Duration = Duration::from_secs(60);
/// The peers whose last warning is remembered: a follower's answers can name any id, so
/// the table is bounded; past it the oldest are forgotten, which only repeats a warning early.
const PEERS_MAX: usize = 64;

/// The rate limits and the counts a test reads.
#[derive(Debug, Default)]
pub(crate) struct ReadLog {
    no_peer_said: Option<Instant>,
    peer_said: BTreeMap<u64, Instant>,
    /// Rounds in which there was nobody to ask.
    pub(crate) no_peer_rounds: u64,
    /// Per-peer failures said at warn.
    pub(crate) peer_warnings: u64,
}

fn due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|at| now.saturating_duration_since(at) >= SAY_EVERY)
}

impl ReadLog {
    /// A round found no peer to ask: neither `peers` nor a membership names another node.
    pub(crate) fn no_peer(&mut self, me: u64) {
        self.no_peer_rounds = self.no_peer_rounds.saturating_add(1);
        let now = Instant::now();
        if due(self.no_peer_said, now) {
            self.no_peer_said = Some(now);
            tracing::warn!(
                node = me,
                "joining: no peer to ask for the horizon: `peers` names only this node and no \
                 membership is known; appends stay refused. Restart it with `peers` naming at \
                 least one current member (docs/cluster.md \"Replacing a node\")"
            );
        }
    }

    /// Peer `peer` gave no horizon, for `why`: at warn once per peer per `SAY_EVERY`.
    pub(crate) fn peer_failed(&mut self, me: u64, peer: u64, why: &str) {
        let now = Instant::now();
        if !due(self.peer_said.get(&peer).copied(), now) {
            tracing::debug!(node = me, peer, %why, "joining: no horizon from this peer");
            return;
        }
        if self.peer_said.len() >= PEERS_MAX && !self.peer_said.contains_key(&peer) {
            if let Some(oldest) = self
                .peer_said
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(id, _)| *id)
            {
                self.peer_said.remove(&oldest);
            }
        }
        self.peer_said.insert(peer, now);
        self.peer_warnings = self.peer_warnings.saturating_add(1);
        tracing::warn!(node = me, peer, %why, "joining: no horizon from this peer; appends stay refused");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_complaint_is_said_once_per_interval_and_the_table_stays_bounded() {
        let mut log = ReadLog::default();
        log.no_peer(4);
        log.no_peer(4);
        assert_eq!(log.no_peer_rounds, 2);
        log.peer_failed(4, 1, "closed");
        log.peer_failed(4, 1, "closed");
        log.peer_failed(4, 2, "closed");
        assert_eq!(log.peer_warnings, 2, "peer 1 once, peer 2 once");
        for id in 0..10_000 {
            log.peer_failed(4, id + 100, "x");
        }
        assert!(log.peer_said.len() <= PEERS_MAX);
    }
}
