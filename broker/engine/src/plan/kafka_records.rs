//! Kafka DeleteRecords (protocol/src/kafka_records.rs): each partition's first held offset
//! moves up to the requested offset, exactly, with the same cursor moves a retention trim
//! makes (state/retention.rs), so Kafka reads, HTTP pops and listings all lose the records.

use queenmq_protocol::kafka_records::*;
use queenmq_protocol::QueenError;

use super::Planner;
use crate::entry::Effect;

impl Planner<'_> {
    pub fn plan_kafka_delete_records(
        &mut self,
        req: &DeleteRecordsReq,
    ) -> Result<Vec<DeleteRecordsVerdict>, QueenError> {
        if req.targets.len() > MAX_DELETE_RECORDS_TARGETS {
            return Err(QueenError::bad_request(format!(
                "DeleteRecords names more than {MAX_DELETE_RECORDS_TARGETS} partitions"
            )));
        }
        let mut work = 0usize;
        Ok(req
            .targets
            .iter()
            .map(|t| self.delete_records(t, &mut work))
            .collect())
    }

    /// One target; `work` is what the command's earlier targets cost.
    fn delete_records(
        &mut self,
        t: &DeleteRecordsTarget,
        work: &mut usize,
    ) -> DeleteRecordsVerdict {
        let Some(q) = self
            .st
            .queue_by_name
            .get(&t.queue)
            .and_then(|qid| self.st.queues.get(qid))
        else {
            return DeleteRecordsVerdict::UnknownQueue;
        };
        // A partition without messages has no row yet: its log is empty, 0..0.
        let pid = q.partitions.get(&t.partition, &self.st.partitions);
        let cost = q.groups.len().saturating_add(1);
        let (low, high) = pid
            .and_then(|pid| self.st.partitions.get(&pid))
            .map_or((0, 0), |p| (p.low_offset(), p.next_offset));
        let to = match t.offset {
            HIGH_WATERMARK => high,
            o => match u64::try_from(o) {
                Ok(o) if o <= high => o,
                _ => return DeleteRecordsVerdict::OutOfRange,
            },
        };
        if let Some(pid) = pid.filter(|_| to > low) {
            if *work > 0 && work.saturating_add(cost) > DELETE_RECORDS_WORK_PER_COMMAND {
                return DeleteRecordsVerdict::Busy;
            }
            *work = work.saturating_add(cost);
            self.emit(Effect::KafkaDeleteRecords { pid, low: to });
        }
        DeleteRecordsVerdict::Deleted {
            low_watermark: to.max(low),
        }
    }
}
