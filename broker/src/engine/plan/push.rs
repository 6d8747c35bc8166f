//! Push: implicit queue and partition creation, per-partition transactionId dedup, one Append
//! effect per partition per command (so a request becomes visible atomically, in order).

use std::collections::HashMap;

use queenmq_protocol::{PushItem, PushResult, PushStatus, QueenError};

use super::{check_name, Planner};
use crate::entry::Effect;
use crate::state::frame::write_frame;

struct PendingAppend {
    pid: u64,
    base: u64,
    hashes: Vec<u64>,
    frames: Vec<u8>,
    /// hash → index in the results of messages in this command, for in-request dedup.
    txns: HashMap<u64, usize>,
}

impl Planner<'_> {
    /// Checks an item without changing anything (used before a transaction executes).
    pub fn check_push_item(item: &PushItem) -> Result<(), QueenError> {
        check_name("queue", &item.queue)?;
        check_name("partition", &item.partition)?;
        if let Some(t) = &item.transaction_id {
            if t.len() > usize::from(u16::MAX) {
                return Err(QueenError::bad_request(
                    "transactionId is longer than 65535 bytes",
                ));
            }
        }
        Ok(())
    }

    pub fn plan_push(&mut self, items: &[PushItem], producer: Option<&str>) -> Vec<PushResult> {
        let mut results: Vec<PushResult> = Vec::with_capacity(items.len());
        let mut pending: Vec<PendingAppend> = Vec::new();
        let mut by_pid: HashMap<u64, usize> = HashMap::new();
        let producer = producer.filter(|p| p.len() <= usize::from(u16::MAX));
        for item in items {
            if let Err(e) = Self::check_push_item(item) {
                results.push(failed(item, e.message));
                continue;
            }
            let qid = self.ensure_queue(&item.queue);
            let pid = self.ensure_partition(qid, &item.partition);
            let slot = *by_pid.entry(pid).or_insert_with(|| {
                let base = self.st.partitions.get(&pid).map_or(0, |p| p.next_offset);
                pending.push(PendingAppend {
                    pid,
                    base,
                    hashes: Vec::new(),
                    frames: Vec::new(),
                    txns: HashMap::new(),
                });
                pending.len() - 1
            });
            let id = super::ids::message_id(self.now());
            let id_text = id.to_string();
            let txn = item
                .transaction_id
                .clone()
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| id_text.clone());
            let hash = xxhash_rust::xxh3::xxh3_64(txn.as_bytes());
            if let Some(dup) = self.find_duplicate(pid, &txn, hash, &pending[slot], &results) {
                results.push(PushResult {
                    message_id: dup.1,
                    transaction_id: txn,
                    queue: item.queue.clone(),
                    partition_id: pid,
                    offset: dup.0,
                    status: PushStatus::Duplicate,
                    error: None,
                });
                continue;
            }
            let pa = &mut pending[slot];
            let offset = pa.base + pa.hashes.len() as u64;
            write_frame(
                &mut pa.frames,
                id.as_bytes(),
                item.trace_id.as_ref(),
                &txn,
                producer,
                &item.payload,
            );
            pa.hashes.push(hash);
            pa.txns.insert(hash, results.len());
            results.push(PushResult {
                message_id: id_text,
                transaction_id: txn,
                queue: item.queue.clone(),
                partition_id: pid,
                offset,
                status: PushStatus::Queued,
                error: None,
            });
        }
        for pa in pending {
            if pa.hashes.is_empty() {
                continue;
            }
            self.emit(Effect::Append {
                pid: pa.pid,
                base_offset: pa.base,
                hashes: pa.hashes,
                frames: &pa.frames,
            });
        }
        metrics_for(&results);
        results
    }

    /// (offset, message id) of an earlier message with this transactionId inside the dedup window.
    fn find_duplicate(
        &mut self,
        pid: u64,
        txn: &str,
        hash: u64,
        pending: &PendingAppend,
        results: &[PushResult],
    ) -> Option<(u64, String)> {
        if let Some(r) = pending.txns.get(&hash).and_then(|i| results.get(*i)) {
            if r.transaction_id == txn {
                return Some((r.offset, r.message_id.clone()));
            }
        }
        let p = self.st.partitions.get(&pid)?;
        let window_us = self.st.queues.get(&p.queue)?.config.dedup_window_seconds * 1_000_000;
        if window_us <= 0 {
            return None;
        }
        let off = self.st.txn_ids.get(pid, hash)?;
        let created = p.created_of(off)?;
        if created < self.now() - window_us {
            return None;
        }
        let id = {
            let mut reader = super::MessageReader {
                pending: self.cycle.entry.bytes(),
                cache: self.cache,
                log: self.log,
            };
            let m = reader.read_one(p, off).ok()??;
            (m.txn == txn).then(|| m.id_text())?
        };
        Some((off, id))
    }
}

fn failed(item: &PushItem, error: String) -> PushResult {
    PushResult {
        message_id: String::new(),
        transaction_id: item.transaction_id.clone().unwrap_or_default(),
        queue: item.queue.clone(),
        partition_id: 0,
        offset: 0,
        status: PushStatus::Failed,
        error: Some(error),
    }
}

fn metrics_for(results: &[PushResult]) {
    let mut per_queue: HashMap<&str, u64> = HashMap::new();
    for r in results {
        if r.status == PushStatus::Queued {
            *per_queue.entry(r.queue.as_str()).or_default() += 1;
        }
    }
    for (q, n) in per_queue {
        metrics::counter!("queen_messages_pushed_total", "queue" => q.to_string()).increment(n);
    }
}
