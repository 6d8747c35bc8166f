//! Dead-letter administration: delete a dead-lettered message's rows, replay it into its
//! partition, purge the rows a filter matches. Each is replicated effects (DlqDelete,
//! DlqPurge, and for a replay an Append), so the change survives a restart like any write.

use queenmq_protocol::{
    DlqAdminOutcome, DlqAdminReq, DlqQuery, ErrorCode, PushItem, PushStatus, QueenError,
};

use super::Planner;
use crate::entry::{Effect, ANY_PARTITION};

impl Planner<'_> {
    pub fn plan_dlq_admin(&mut self, req: &DlqAdminReq) -> Result<DlqAdminOutcome, QueenError> {
        match req {
            DlqAdminReq::Delete {
                partition_id,
                transaction_id,
            } => {
                let (pid, offset, rows) = self.dead_letter(partition_id, transaction_id)?;
                self.emit(Effect::DlqDelete { pid, offset });
                Ok(DlqAdminOutcome::Deleted {
                    partition_id: pid,
                    transaction_id: transaction_id.clone(),
                    rows,
                })
            }
            DlqAdminReq::Retry {
                partition_id,
                transaction_id,
            } => self.plan_dlq_retry(partition_id, transaction_id),
            DlqAdminReq::Purge(q) => self.plan_dlq_purge(q),
        }
    }

    /// The (partition, offset) of a dead-lettered message and how many rows hold it. A
    /// message that exists but is not dead-lettered is not found either (spec §2.19).
    fn dead_letter(
        &mut self,
        partition_id: &str,
        txn: &str,
    ) -> Result<(u64, u64, usize), QueenError> {
        let not_found = || QueenError::not_found("no dead-lettered message with that id");
        let pid = self.partition_id(partition_id).ok_or_else(not_found)?;
        let qid = self
            .st
            .partitions
            .get(&pid)
            .map(|p| p.queue())
            .ok_or_else(not_found)?;
        let mut offsets: Vec<u64> = self
            .st
            .queues
            .get(&qid)
            .map(|q| {
                q.dlq
                    .iter()
                    .filter(|d| d.partition == pid)
                    .map(|d| d.offset)
                    .collect()
            })
            .unwrap_or_default();
        offsets.sort_unstable();
        offsets.dedup();
        // The hot table answers for a message inside its memory; past it, each dead-lettered
        // offset of the partition is read and compared (the rows are capped per queue). The
        // id files are not searched (review s34 d H2): the message is one of these offsets,
        // and a search by time could only refuse the action before they were read.
        let hash = xxhash_rust::xxh3::xxh3_64(txn.as_bytes());
        let mut found = self
            .st
            .txn_ids
            .get(pid, hash)
            .filter(|o| offsets.binary_search(o).is_ok())
            .filter(|o| self.txn_at(pid, *o, txn));
        if found.is_none() {
            found = offsets.into_iter().find(|off| self.txn_at(pid, *off, txn));
        }
        let offset = found.ok_or_else(not_found)?;
        let rows = self.st.queues.get(&qid).map_or(0, |q| {
            q.dlq
                .iter()
                .filter(|d| d.partition == pid && d.offset == offset)
                .count()
        });
        Ok((pid, offset, rows))
    }

    /// The message goes back into its partition as a new one (every group of the queue sees
    /// it, as a push would), under a transaction id fixed by its place, so a retry sent twice
    /// appends it once while the id is remembered.
    fn plan_dlq_retry(
        &mut self,
        partition_id: &str,
        txn: &str,
    ) -> Result<DlqAdminOutcome, QueenError> {
        let (pid, offset, rows) = self.dead_letter(partition_id, txn)?;
        let (p, queue) = {
            let p = self
                .st
                .partitions
                .get(&pid)
                .ok_or_else(|| QueenError::not_found("partition gone"))?;
            let q = self
                .st
                .queues
                .get(&p.queue())
                .ok_or_else(|| QueenError::not_found("queue gone"))?;
            (p.name.to_string(), q.name.clone())
        };
        let msg = {
            let (st, mut rd) = self.reader_parts();
            let part = st
                .partitions
                .get(&pid)
                .ok_or_else(|| QueenError::not_found("partition gone"))?;
            rd.read_one(part, offset)
                .map_err(|e| QueenError::new(ErrorCode::Internal, e.to_string()))?
        };
        let Some(msg) = msg else {
            return Err(QueenError::not_found(
                "the dead-lettered message is no longer held (retention removed it)",
            ));
        };
        // A record a Kafka transaction hides is never re-pushed as a visible message.
        let withheld = self.st.partitions.get(&pid).is_some_and(|part| {
            self.st
                .kafka_txns
                .withheld(pid, part.low_offset(), part.next_offset, offset)
        });
        if withheld || msg.is_control_marker() {
            return Err(QueenError::not_found(
                "the dead-lettered offset holds a record of an open or aborted Kafka transaction",
            ));
        }
        let new_txn = format!("dlq:{pid}:{offset}");
        let item = PushItem {
            queue: queue.clone(),
            partition: p.clone(),
            payload: msg.payload.clone(),
            transaction_id: Some(new_txn.clone()),
            trace_id: msg.trace,
        };
        let prepared = self.prepare_push(std::slice::from_ref(&item), msg.producer.as_deref())?;
        let [result] = &self.commit_push(prepared)[..] else {
            return Err(QueenError::new(ErrorCode::Internal, "one item, one result"));
        };
        if result.status == PushStatus::Failed {
            return Err(result.error.clone().unwrap_or_else(|| {
                QueenError::new(ErrorCode::Internal, "the replay was refused")
            }));
        }
        let queued = result.status == PushStatus::Queued;
        self.emit(Effect::DlqDelete { pid, offset });
        Ok(DlqAdminOutcome::Retried {
            queue,
            partition: p,
            partition_id: pid,
            transaction_id: txn.to_string(),
            new_transaction_id: new_txn,
            queued,
            rows,
        })
    }

    fn plan_dlq_purge(&mut self, q: &DlqQuery) -> Result<DlqAdminOutcome, QueenError> {
        let name = q
            .queue
            .as_deref()
            .ok_or_else(|| QueenError::bad_request("queue is required"))?;
        let Some(queue) = self.st.queue_named(name) else {
            return Err(QueenError::not_found(format!("queue {name:?} not found")));
        };
        let qid = queue.id;
        let pid = match q.partition.as_deref() {
            None => ANY_PARTITION,
            Some(p) => match queue.partitions.get(p, &self.st.partitions) {
                Some(pid) => pid,
                // No such partition: no row can match.
                None => {
                    return Ok(DlqAdminOutcome::Purged {
                        queue: name.to_string(),
                        rows: 0,
                    })
                }
            },
        };
        let group = q.group.as_deref().unwrap_or("");
        let (from_us, to_us) = (q.from_us.unwrap_or(i64::MIN), q.to_us.unwrap_or(i64::MAX));
        let rows = queue
            .dlq
            .iter()
            .filter(|d| d.purged_by(group, pid, from_us, to_us))
            .count();
        if rows > 0 {
            let group = group.to_string();
            self.emit(Effect::DlqPurge {
                qid,
                group: &group,
                pid,
                from_us,
                to_us,
            });
        }
        Ok(DlqAdminOutcome::Purged {
            queue: name.to_string(),
            rows,
        })
    }
}
