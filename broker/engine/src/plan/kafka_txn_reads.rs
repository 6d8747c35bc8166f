//! The Kafka transaction reads of one cycle share one answer budget (review s17 lead H1):
//! the engine keeps every answer of the cycle until its entry commits, so a cycle of many
//! DescribeProducers held one full answer each. Each read is granted what the cycle has
//! left (`MAX_READ_ENTRIES_PER_CYCLE`, and the memory budget's answer room at
//! `READ_ENTRY_BYTES` an entry); the cycle's first read that lists anything gets its own
//! answer's budget whatever is left, so reads always progress. What does not fit is
//! `OverBudget`, a retriable per-item error at the door.

use queenmq_protocol::kafka_txn_reads::{
    KafkaTxnRead, KafkaTxnReadAnswer, MAX_READ_ENTRIES_PER_CYCLE, READ_ENTRY_BYTES,
};
use queenmq_protocol::QueenError;

use super::Planner;

impl Planner<'_> {
    pub fn plan_kafka_txn_read(
        &mut self,
        q: &KafkaTxnRead,
    ) -> Result<KafkaTxnReadAnswer, QueenError> {
        let granted = self.txn_read_room();
        let (answer, listed) = crate::reads::kafka_txns::answer(self.st, q, granted)?;
        self.cycle.txn_read_entries = self.cycle.txn_read_entries.saturating_add(listed);
        self.cycle.answer_bytes = self
            .cycle
            .answer_bytes
            .saturating_add(listed.saturating_mul(READ_ENTRY_BYTES));
        Ok(answer)
    }

    /// Entries the next Kafka transaction read of this cycle may list.
    pub(crate) fn txn_read_room(&self) -> usize {
        if self.cycle.txn_read_entries == 0 {
            return usize::MAX;
        }
        let by_bytes = self.answer_room() / READ_ENTRY_BYTES;
        MAX_READ_ENTRIES_PER_CYCLE
            .saturating_sub(self.cycle.txn_read_entries)
            .min(by_bytes)
    }
}
