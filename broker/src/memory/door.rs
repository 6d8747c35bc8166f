//! The HTTP door's connections in the `connections` pool: each open connection and each
//! request in flight counts what it was measured to hold (`size::CONNECTION_BYTES`,
//! `size::IN_FLIGHT_BYTES`), and the door's connection and long-poll caps are derived from
//! the pool's share of the budget so the pool cannot outgrow it. Answers waiting for their
//! client count their bytes too; those are bounded by the door refusing new requests while
//! the pool is over its share (native-api `answer.rs`), and big answers reserve room out of
//! the share before they are built (native-api `reserve.rs`).

use std::sync::Arc;

use queenmq_native_api::ConnectionMeter;

use super::size::{CONNECTION_BYTES, IN_FLIGHT_BYTES};
use super::{Memory, Pool};

/// The node's sampled series count open connections too (crate::node_metrics), when given.
pub struct DoorMeter(
    pub Arc<Memory>,
    pub Option<Arc<crate::node_metrics::NodeMetrics>>,
);

impl std::fmt::Debug for DoorMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DoorMeter").field(&self.0).finish()
    }
}

impl ConnectionMeter for DoorMeter {
    fn connection(&self, open: bool) {
        self.change(open, CONNECTION_BYTES);
        if let Some(n) = &self.1 {
            n.connection(open);
        }
    }

    fn request(&self, started: bool) {
        self.change(started, IN_FLIGHT_BYTES);
    }

    fn answer(&self, bytes: usize, held: bool) {
        self.change(held, bytes);
    }

    fn over_share(&self) -> bool {
        self.0.pools.get(Pool::Connections) > self.0.budget.connections_bytes()
    }

    /// Answers being built reserve out of the same share their held bytes are gated by: at
    /// most a share is being built while at most a share (and one answer) is held.
    fn answer_room(&self) -> usize {
        self.0.budget.connections_bytes()
    }
}

impl DoorMeter {
    fn change(&self, up: bool, bytes: usize) {
        let pools = &self.0.pools;
        if up {
            pools.add(Pool::Connections, bytes);
        } else {
            pools.sub(Pool::Connections, bytes);
        }
    }
}

/// The door's effective limits under the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorCaps {
    pub connections: usize,
    pub long_polls: usize,
}

/// The configured limits, lowered to what the budget's connection share holds: connections
/// (with the `probe_reserve` slots beyond them) each with a request in flight
/// (`CONNECTION_BYTES + IN_FLIGHT_BYTES`) in fifteen sixteenths of it, so the pool stays
/// within its share at the caps whatever the requests are; parked polls at most a quarter's
/// worth of `IN_FLIGHT_BYTES`, and never more than the connections.
pub fn caps(
    mem: &Memory,
    max_connections: usize,
    probe_reserve: usize,
    max_long_polls: usize,
) -> DoorCaps {
    let b = &mem.budget;
    let held = b
        .connection_cap(CONNECTION_BYTES + IN_FLIGHT_BYTES)
        .saturating_sub(probe_reserve)
        .max(super::budget::MIN_CONNECTIONS);
    let connections = max_connections.min(held);
    DoorCaps {
        connections,
        long_polls: max_long_polls
            .min(b.long_poll_cap(IN_FLIGHT_BYTES))
            .min(connections.max(super::budget::MIN_LONG_POLLS)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Budget;

    #[test]
    fn connections_and_requests_count_what_they_hold_and_give_it_back() {
        let mem = Memory::new(Budget::derive(64 << 20, None, None));
        let m = DoorMeter(mem.clone(), None);
        m.connection(true);
        m.connection(true);
        m.request(true);
        assert_eq!(
            mem.pools.get(Pool::Connections),
            2 * CONNECTION_BYTES + IN_FLIGHT_BYTES
        );
        m.answer(1000, true);
        assert_eq!(
            mem.pools.get(Pool::Connections),
            2 * CONNECTION_BYTES + IN_FLIGHT_BYTES + 1000
        );
        m.request(false);
        m.answer(1000, false);
        m.connection(false);
        m.connection(false);
        assert_eq!(mem.pools.get(Pool::Connections), 0);
        assert!(
            !Pool::Connections.held(),
            "bounded by the caps, not by refusing writes"
        );
    }

    #[test]
    fn answers_past_the_share_put_the_pool_over_it() {
        let mem = Memory::new(Budget::derive(64 << 20, None, None));
        let m = DoorMeter(mem.clone(), None);
        let share = mem.budget.connections_bytes();
        assert_eq!(
            m.answer_room(),
            share,
            "answers being built reserve out of the share"
        );
        m.connection(true);
        assert!(!m.over_share());
        m.answer(share - CONNECTION_BYTES, true);
        assert!(!m.over_share(), "exactly the share is not over it");
        m.answer(1, true);
        assert!(m.over_share());
        m.answer(share - CONNECTION_BYTES + 1, false);
        assert!(!m.over_share());
        // More given back than held (never by the door) stays at zero, not wrapped.
        m.answer(usize::MAX, false);
        assert_eq!(mem.pools.get(Pool::Connections), 0);
    }

    #[test]
    fn a_small_budget_lowers_the_caps_and_a_large_one_keeps_the_configured_ones() {
        let small = Memory::new(Budget::derive(64 << 20, None, None));
        let c = caps(&small, 10_000, 16, 20_000);
        // 10 000 idle connections would hold ~600 MB; the share of a 64 MiB budget holds 142
        // with a request in flight on each (16 of them probe slots; 126 of those requests
        // may be parked polls), and leaves a sixteenth for answers being written.
        assert_eq!((c.connections, c.long_polls), (128, 126));
        let worst = (c.connections + 16) * (CONNECTION_BYTES + IN_FLIGHT_BYTES);
        assert!(worst <= small.budget.connections_bytes(), "{worst}");
        // A large one keeps the configured caps, polls at most one per connection (an
        // HTTP/1 connection parks one request at a time).
        let large = Memory::new(Budget::derive(64 << 30, None, None));
        assert_eq!(
            caps(&large, 10_000, 16, 5_000),
            DoorCaps {
                connections: 10_000,
                long_polls: 5_000
            }
        );
        assert_eq!(caps(&large, 10_000, 16, 20_000).long_polls, 10_000);
        // A reserve larger than the share leaves the floor, never zero.
        let tiny = Memory::new(Budget::derive(32 << 20, None, None));
        assert_eq!(
            caps(&tiny, 10_000, 1_000, 20_000).connections,
            crate::memory::budget::MIN_CONNECTIONS
        );
    }
}
