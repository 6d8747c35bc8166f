//! The planner: command → deterministic effects (emitted into the cycle) → outcome.
//! Refusals and empty answers emit nothing.

mod ack;
mod admin;
#[cfg(test)]
mod clock_tests;
mod compaction;
#[cfg(test)]
mod compaction_tests;
mod dlq_admin;
#[cfg(test)]
mod dlq_admin_tests;
mod ephemeral;
#[cfg(any(test, feature = "test-support"))]
pub mod fixture;
mod id_space;
mod ids;
mod kafka_batch_bound;
#[cfg(test)]
mod kafka_batch_bound_tests;
mod kafka_groups;
#[cfg(test)]
mod kafka_groups_reads_tests;
#[cfg(test)]
mod kafka_groups_tests;
mod kafka_producers;
#[cfg(test)]
mod kafka_producers_tests;
mod kafka_records;
#[cfg(test)]
mod kafka_records_tests;
pub mod kafka_txn_reads;
#[cfg(test)]
mod kafka_txn_reads_tests;
mod kafka_txns;
#[cfg(test)]
mod kafka_txns_hide_tests;
#[cfg(test)]
mod kafka_txns_stretch_tests;
#[cfg(test)]
mod kafka_txns_tests;
mod kv;
#[cfg(test)]
mod kv_bounds_tests;
#[cfg(test)]
mod kv_tests;
mod locks;
#[cfg(test)]
mod lost_tests;
mod memory_gate;
mod pop;
mod push;
#[cfg(test)]
mod replay_props;
mod retention;
#[cfg(test)]
mod retention_tests;
#[cfg(test)]
mod seal_tests;
#[cfg(test)]
mod seek_tests;
mod streams_cap;
mod streams_purge;
#[cfg(test)]
mod streams_purge_tests;
mod tenants;
#[cfg(test)]
mod tests;
mod timers;
#[cfg(test)]
mod timers_tests;
mod txn;
mod txn_kv;
#[cfg(test)]
mod txn_search_tests;
mod txn_timers;
#[cfg(test)]
mod unit_tests;

use queenmq_protocol::{QueenError, QUEUE_MODE_GROUP};
use uuid::Uuid;

use crate::cache::EntryCache;
use crate::cycle::Cycle;
use crate::entry::Effect;
use crate::log::ReplicatedLog;
use crate::reader::MessageReader;
use crate::seal::PayloadSeal;
use crate::state::model::secs_us;
use crate::state::{FindError, State, FILTER_WINDOW_MAX_US};

pub use compaction::{Compacted, CompactionBudget, Memo, Segment, TooLive};
pub use kafka_txns::entry_bound as kafka_txn_entry_bound;
pub use kv::{applied_gets, KV_SWEEP_PER_CYCLE};
pub use memory_gate::MemoryGate;
pub use pop::PopPlan;
pub use retention::{has_retention, retention_low, RetentionSweep};
pub use streams_purge::STREAMS_PURGE_PER_CYCLE;
pub use timers::{
    check_op as check_timer_op, check_ops as check_timer_ops, fire_bound as timer_fire_bound,
};

pub struct Planner<'a> {
    pub st: &'a mut State,
    pub cycle: &'a mut Cycle,
    pub cache: &'a mut EntryCache,
    pub log: &'a dyn ReplicatedLog,
    /// The node's memory budget: while it refuses writes, pops may not register new groups
    /// and configure may not create queues. None accounts nothing (tests).
    pub memory: Option<&'a dyn MemoryGate>,
    /// The group's tenant: the `tenant` label of the message counters.
    pub tenant: &'a str,
    /// Seals the payloads of queues with `encryptionEnabled` and opens them on every read;
    /// None when the broker has no `encryption_key` (such queues are then refused).
    pub seal: Option<&'a dyn PayloadSeal>,
    /// The most groups a tenant declaration may bring the cluster to, `default` included
    /// (`max_tenants`); `u64::MAX` caps nothing (a group that declares no tenants).
    pub max_tenants: u64,
}

/// Names are used verbatim in paths by the SDKs: refuse what cannot travel there.
pub fn check_name(kind: &str, name: &str) -> Result<(), QueenError> {
    if name.is_empty() {
        return Err(QueenError::bad_request(format!("{kind} is required")));
    }
    if name.len() > 255 {
        return Err(QueenError::bad_request(format!(
            "{kind} is longer than 255 bytes"
        )));
    }
    if name.chars().any(|c| c.is_control()) {
        return Err(QueenError::bad_request(format!(
            "{kind} contains control characters"
        )));
    }
    Ok(())
}

pub fn group_name(g: &Option<String>) -> &str {
    match g.as_deref() {
        Some(s) if !s.is_empty() => s,
        _ => QUEUE_MODE_GROUP,
    }
}

pub fn lease_text(id: u128) -> String {
    Uuid::from_u128(id).to_string()
}

pub fn parse_lease(s: &str) -> Option<u128> {
    Uuid::parse_str(s).ok().map(|u| u.as_u128())
}

pub fn queue_uuid(qid: u64) -> String {
    Uuid::from_u128(u128::from(qid)).to_string()
}

impl Planner<'_> {
    pub fn emit(&mut self, e: Effect<'_>) {
        self.cycle.emit(self.st, e);
    }

    pub fn now(&self) -> i64 {
        self.cycle.now_us
    }

    /// Resolves a partition id as the SDK echoes it (decimal text).
    pub fn partition_id(&self, text: &str) -> Option<u64> {
        let pid: u64 = text.trim().parse().ok()?;
        self.st.partitions.contains_key(&pid).then_some(pid)
    }

    /// Offset of `txn` in partition `pid`, verified against the stored frame. Refused
    /// (retryably) only when the cycle's by-time searches of the id files ran out before the
    /// partition's window was searched and the caller's range did not hold it either.
    pub fn resolve_txn(
        &mut self,
        pid: u64,
        txn: &str,
        scan: Option<(u64, u64)>,
    ) -> Result<Option<u64>, QueenError> {
        self.resolve_txn_or(pid, txn, scan, None)
    }

    /// [`Self::resolve_txn`] with a `second` range read only when the search by time was
    /// refused (review s34 d H2): a message in flight (a group's leased or delivered range)
    /// is found there, and only a miss in it too refuses. Read only then, since it is a scan
    /// of up to 10 000 frames where the id index answers in one lookup.
    pub fn resolve_txn_or(
        &mut self,
        pid: u64,
        txn: &str,
        scan: Option<(u64, u64)>,
        second: Option<(u64, u64)>,
    ) -> Result<Option<u64>, QueenError> {
        let hash = xxhash_rust::xxh3::xxh3_64(txn.as_bytes());
        let Some(p) = self.st.partitions.get(&pid) else {
            return Ok(None);
        };
        let candidate = self.st.txn_ids.get(pid, hash);
        let (pending, cache, log) = (self.cycle.entry.bytes(), &mut *self.cache, self.log);
        let mut reader = MessageReader {
            pending,
            cache,
            log,
            seal: self.seal,
        };
        if let Some(off) = candidate {
            if reader.txn_is(p, off, txn) {
                return Ok(Some(off));
            }
        }
        // Older than the hot table: the id files (state/txn_spill.rs), over the partition's
        // own queue window (review s33 H2: the group's longest made an unknown id acked on a
        // 1 h queue search a 7-day queue's buckets). A queue without a dedup window still has
        // its ids remembered (for acks by transactionId) as far as the filters cover. An id
        // file that cannot be read only sends the ack on to the scan below.
        let mut refused = None;
        if let Some(spill) = self.st.txn_spill.as_deref() {
            let now = self.cycle.now_us;
            let window = self
                .st
                .queues
                .get(&p.queue())
                .map(|q| secs_us(q.config.dedup_window_seconds))
                .filter(|w| *w > 0)
                .unwrap_or_else(|| self.st.txn_keep_us().min(FILTER_WINDOW_MAX_US));
            let left = &mut self.cycle.dedup_by_time_left;
            let mut check = |off: u64| reader.txn_is(p, off, txn);
            // `txn_is` answers false for a frame it cannot read: nothing is remembered.
            match spill.find_unremembered(pid, hash, now, window, left, &mut check) {
                Ok(Some(off)) => return Ok(Some(off)),
                Ok(None) | Err(FindError::Unreadable(_)) => {}
                Err(e @ FindError::OverBudget { .. }) => refused = Some(e),
            }
        }
        // Not in the id index (older than its memory, or a hash collision): look through the
        // range the caller holds.
        let mut within =
            |(from, to): (u64, u64)| reader.find_txn(p, from, to.min(from + 10_000), txn);
        let found = scan.and_then(&mut within);
        let found = match (found, &refused) {
            (None, Some(_)) => second.filter(|r| Some(*r) != scan).and_then(within),
            (found, _) => found,
        };
        match (found, refused) {
            (None, Some(e)) => Err(QueenError::unavailable(format!(
                "could not resolve transactionId {txn} in partition {pid} in this cycle ({e}); \
                 nothing was changed, retry"
            ))),
            (found, _) => Ok(found),
        }
    }
}

impl Planner<'_> {
    /// Whether the message at `offset` of partition `pid` carries `txn`, read from its frame.
    pub fn txn_at(&mut self, pid: u64, offset: u64, txn: &str) -> bool {
        let Some(p) = self.st.partitions.get(&pid) else {
            return false;
        };
        let (pending, cache, log) = (self.cycle.entry.bytes(), &mut *self.cache, self.log);
        MessageReader {
            pending,
            cache,
            log,
            seal: self.seal,
        }
        .txn_is(p, offset, txn)
    }

    /// The state (read-only) and a message reader, for reads answered inside a cycle.
    pub fn reader_parts(&mut self) -> (&crate::state::State, MessageReader<'_>) {
        (
            &*self.st,
            MessageReader {
                pending: self.cycle.entry.bytes(),
                cache: self.cache,
                log: self.log,
                seal: self.seal,
            },
        )
    }
}
