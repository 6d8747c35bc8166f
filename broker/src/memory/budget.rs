//! One memory budget per node, split into shares (docs/memory.md "The budget").

/// The default budget: this share of the cgroup limit (else of physical RAM), leaving the
/// rest to what no pool counts (allocator slack, thread stacks, the binary, page tables).
pub const DEFAULT_PERCENT_OF_LIMIT: u64 = 75;
/// The entry cache may use this share of the budget (or `entry_cache_bytes`, if smaller).
pub const CACHE_PERCENT: u64 = 20;
/// The pools that cannot be evicted (state, dedup, waiters, requests) together. The other
/// half is for what they do not count: the checkpoint being written, connection buffers,
/// threads, allocator slack (30-60 MB measured under load). The checkpoint holds about as
/// much as the held pools, not the 40 % once reckoned (session 29, test_memory at ~7 700
/// single-message pushes a second under a 256 MiB budget: held 98 MiB, checkpoint 94 MiB,
/// RSS 288 MiB, past the 10 % the budget allows, with this share at 40 %), so the held
/// pools get 30 %: 30 for them, about 30 for the checkpoint, 20 for the cache, 20 for the rest.
pub const HELD_PERCENT: u64 = 30;
/// HTTP connections and the requests in flight on them, out of the 40 % the other shares
/// leave: the connection and long-poll caps are derived from it (docs/memory.md).
pub const CONNECTIONS_PERCENT: u64 = 20;
/// The derived caps never go below these, so a tiny budget still serves a few clients.
pub const MIN_CONNECTIONS: usize = 128;
pub const MIN_LONG_POLLS: usize = 64;
/// Refused writes are accepted again once the held pools are below this share of theirs,
/// so admission does not flap around the line.
pub const RESUME_PERCENT: u64 = 90;
/// The node metrics ring (`metrics_history_samples`, allocated whole at start) may take at
/// most this share of the budget: half of the 20 % "the rest" that no share claims, so the
/// checkpoint, stacks and allocator slack keep the other half (docs/memory.md).
pub const METRICS_RING_PERCENT: u64 = 10;
/// The cluster listener's request bodies in flight (review s14 F6) may hold this share of the
/// budget, out of the 20 % "the rest" no share claims, but never less than one body of the
/// largest kind, so a peer's snapshot chunk can always be read.
pub const CLUSTER_BODIES_PERCENT: u64 = 5;
/// The smallest budget accepted (and used when nothing can be read).
pub const MIN_BUDGET: u64 = 32 << 20;
/// A row of the dedup hot table, as the `dedup` pool counts it (docs/memory.md).
pub const HOT_ID_ROW_BYTES: u64 = 57;
/// The derived `dedup_hot_ids` takes this fraction of the budget per group (1/16: an eighth
/// of the `dedup` share's worth), within `HOT_IDS_DERIVED`: at least ~1.3 s of ids at
/// 50 000 msg/s, so a spill is not a file per push; at most 4 Mi rows (~228 MiB), since the
/// bound is per group and N busy groups hold N times it.
pub const HOT_IDS_DIVISOR: u64 = 16;
pub const HOT_IDS_DERIVED: std::ops::RangeInclusive<u64> = (1 << 16)..=(1 << 22);

/// `dedup_hot_ids` when it is 0: `budget / 16 / 57` rows, clamped to 2^16..=2^22.
pub fn hot_ids_for_budget(total: u64) -> u64 {
    (total / HOT_IDS_DIVISOR / HOT_ID_ROW_BYTES)
        .clamp(*HOT_IDS_DERIVED.start(), *HOT_IDS_DERIVED.end())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub total: u64,
    /// Where `total` came from, for the start-up log line.
    pub source: &'static str,
}

fn percent(v: u64, p: u64) -> u64 {
    // u128: a 64 GiB limit times 100 is fine in u64, but a limit read from a file need not be.
    u64::try_from(u128::from(v) * u128::from(p) / 100).unwrap_or(u64::MAX)
}

impl Budget {
    /// `configured` is `memory_limit_bytes` (0 = derive it); `cgroup` and `ram` are what the
    /// machine says.
    pub fn derive(configured: u64, cgroup: Option<u64>, ram: Option<u64>) -> Budget {
        if configured > 0 {
            return Budget {
                total: configured.max(MIN_BUDGET),
                source: "memory_limit_bytes",
            };
        }
        let (limit, source) = match (cgroup, ram) {
            (Some(c), Some(r)) if r < c => (r, "75% of physical RAM"),
            (Some(c), _) => (c, "75% of the cgroup memory limit"),
            (None, Some(r)) => (r, "75% of physical RAM"),
            (None, None) => (MIN_BUDGET * 100 / DEFAULT_PERCENT_OF_LIMIT, "the minimum"),
        };
        Budget {
            total: percent(limit, DEFAULT_PERCENT_OF_LIMIT).max(MIN_BUDGET),
            source,
        }
    }

    /// The entry cache's size: `entry_cache_bytes`, shrunk to the cache's share.
    pub fn cache_bytes(&self, entry_cache_bytes: u64) -> usize {
        let b = entry_cache_bytes.min(percent(self.total, CACHE_PERCENT));
        usize::try_from(b).unwrap_or(usize::MAX)
    }

    /// Refuses a node metrics ring of `samples` × `sample_bytes` past its share of the budget.
    pub fn check_metrics_ring(&self, samples: u64, sample_bytes: u64) -> Result<(), String> {
        let ring = samples.saturating_mul(sample_bytes);
        let share = percent(self.total, METRICS_RING_PERCENT);
        if ring <= share {
            return Ok(());
        }
        Err(format!(
            "= {samples} takes {ring} bytes ({sample_bytes} a sample), more than the \
             {METRICS_RING_PERCENT} % of the {} byte memory budget it may use ({share}); \
             lower it or raise memory_limit_bytes",
            self.total
        ))
    }

    /// The share of the pools that cannot be evicted.
    pub fn held_bytes(&self) -> usize {
        usize::try_from(percent(self.total, HELD_PERCENT)).unwrap_or(usize::MAX)
    }

    /// The cluster listener's body budget: its share, at least `largest_body`.
    pub fn cluster_bodies_bytes(&self, largest_body: usize) -> usize {
        usize::try_from(percent(self.total, CLUSTER_BODIES_PERCENT))
            .unwrap_or(usize::MAX)
            .max(largest_body)
    }

    /// The connections' share of the budget.
    pub fn connections_bytes(&self) -> usize {
        usize::try_from(percent(self.total, CONNECTIONS_PERCENT)).unwrap_or(usize::MAX)
    }

    /// How many connections (probe slots included) fifteen sixteenths of the share hold at
    /// `per_connection` bytes each (a connection with a request in flight: any of them may
    /// have one, a parked poll or not); the last sixteenth is for answers being written
    /// (review s22 lead M3: with three quarters for idle connections, requests in flight on
    /// them ran the pool over its share at the caps with no slow client at all).
    pub fn connection_cap(&self, per_connection: usize) -> usize {
        (self.connections_bytes() / 16 * 15 / per_connection.max(1)).max(MIN_CONNECTIONS)
    }

    /// How many parked long polls the last quarter of the share holds at `per_poll` bytes
    /// each beyond their connection, so that connections and polls at their caps fit together.
    pub fn long_poll_cap(&self, per_poll: usize) -> usize {
        (self.connections_bytes() / 4 / per_poll.max(1)).max(MIN_LONG_POLLS)
    }

    /// Below this, refused writes are accepted again.
    pub fn resume_bytes(&self) -> usize {
        let held = u64::try_from(self.held_bytes()).unwrap_or(u64::MAX);
        usize::try_from(percent(held, RESUME_PERCENT)).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_derived_hot_table_follows_the_budget_within_its_bounds() {
        use super::hot_ids_for_budget;
        // The 256 MiB budget of test_memory: ~294 000 rows, ~16 MiB.
        assert_eq!(hot_ids_for_budget(256 << 20), (256 << 20) / 16 / 57);
        assert_eq!(hot_ids_for_budget(256 << 20), 294_337);
        assert_eq!(hot_ids_for_budget(32 << 20), 1 << 16, "the least budget");
        assert_eq!(
            hot_ids_for_budget(4 << 30),
            1 << 22,
            "4 GiB is past the cap"
        );
        assert_eq!(hot_ids_for_budget(u64::MAX), 1 << 22);
    }

    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn a_configured_budget_wins() {
        let b = Budget::derive(256 << 20, Some(GIB), Some(8 * GIB));
        assert_eq!(b.total, 256 << 20);
        assert_eq!(b.cache_bytes(256 << 20), (256 << 20) / 5);
        assert_eq!(b.held_bytes(), (256 << 20) * 3 / 10);
    }

    #[test]
    fn default_is_a_share_of_the_cgroup_limit_else_of_ram() {
        assert_eq!(
            Budget::derive(0, Some(2 * GIB), Some(64 * GIB)).total,
            3 * GIB / 2
        );
        assert_eq!(Budget::derive(0, None, Some(8 * GIB)).total, 6 * GIB);
        // A cgroup limit above the machine's RAM is not a limit.
        assert_eq!(
            Budget::derive(0, Some(64 * GIB), Some(4 * GIB)).total,
            3 * GIB
        );
        assert_eq!(Budget::derive(0, None, None).total, MIN_BUDGET);
    }

    #[test]
    fn the_cache_keeps_a_smaller_configured_size() {
        let b = Budget::derive(0, None, Some(64 * GIB));
        assert_eq!(b.cache_bytes(256 << 20), 256 << 20);
    }

    #[test]
    fn connection_caps_follow_the_budget() {
        let b = Budget::derive(64 << 20, None, None);
        let share = (64 << 20) / 5;
        assert_eq!(b.connections_bytes(), share);
        let (conn, poll) = (60 << 10, 26 << 10);
        assert_eq!(
            b.connection_cap(conn + poll),
            share / 16 * 15 / (conn + poll)
        );
        assert!(b.connection_cap(conn + poll) * (conn + poll) <= share / 16 * 15);
        let tiny = Budget::derive(MIN_BUDGET, None, None);
        assert_eq!(tiny.connection_cap(usize::MAX), MIN_CONNECTIONS);
        assert_eq!(tiny.long_poll_cap(usize::MAX), MIN_LONG_POLLS);
        assert_eq!(tiny.long_poll_cap(0), tiny.connections_bytes() / 4);
        let huge = Budget::derive(u64::MAX, None, None);
        assert!(huge.connection_cap(1) > 1 << 40);
    }

    #[test]
    fn the_cluster_body_budget_is_its_share_but_one_body_at_least() {
        let b = Budget::derive(1 << 30, None, None);
        assert_eq!(b.cluster_bodies_bytes(3 << 20), (1 << 30) / 20);
        let tiny = Budget::derive(MIN_BUDGET, None, None);
        assert_eq!(tiny.cluster_bodies_bytes(3 << 20), 3 << 20);
    }

    #[test]
    fn tiny_and_huge_values_stay_in_range() {
        assert_eq!(Budget::derive(1, None, None).total, MIN_BUDGET);
        let b = Budget::derive(u64::MAX, None, None);
        assert_eq!(
            b.cache_bytes(u64::MAX),
            usize::try_from(u64::MAX / 5).unwrap_or(usize::MAX)
        );
        assert!(b.resume_bytes() < b.held_bytes());
    }
}
