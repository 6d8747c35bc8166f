//! The streams reset purge as engine work: a reset writes `purging/<old query id>` in the
//! same KV call that fences the old id, and every cycle deletes a bounded page of that id's
//! state rows until none is left, then the marker. The rows are fenced (no cycle or read
//! reaches them) from the reset on; this gives their bytes back, whatever happens to the
//! client that asked or to the broker in between (the marker is replicated and checkpointed).

use queenmq_protocol::{streams_rows_prefix, STREAMS_NS, STREAMS_PURGE_PREFIX};

use super::Planner;
use crate::entry::Effect;

/// State rows one cycle's purge deletes at most: work on the engine's path, paced so one
/// tenant's reset of a large state never holds its other requests for long.
pub const STREAMS_PURGE_PER_CYCLE: usize = 1024;

impl Planner<'_> {
    /// Deletes up to `max` rows of the first query id marked for purging, while the entry
    /// stays within `max_entry_bytes`; the marker goes once its rows are all gone.
    pub fn plan_streams_purge(&mut self, max: usize, max_entry_bytes: usize) {
        let now = self.now();
        let Some(marker) = self
            .st
            .kv
            .prefix(STREAMS_NS, STREAMS_PURGE_PREFIX, None, now)
            .next()
            .map(|(k, _)| k.to_string())
        else {
            return;
        };
        let qid = &marker[STREAMS_PURGE_PREFIX.len()..];
        let prefix = streams_rows_prefix(qid);
        let rows: Vec<String> = self
            .st
            .kv
            .prefix(STREAMS_NS, &prefix, None, now)
            .take(max)
            .map(|(k, _)| k.to_string())
            .collect();
        let done = rows.is_empty();
        for key in rows.iter().chain(done.then_some(&marker)) {
            // KvDelete: kind and two length-prefixed strings.
            let size = 1 + 4 + STREAMS_NS.len() + 4 + key.len();
            if self.cycle.entry.len().saturating_add(size) > max_entry_bytes {
                return;
            }
            self.emit(Effect::KvDelete {
                ns: STREAMS_NS,
                key,
            });
        }
    }
}
