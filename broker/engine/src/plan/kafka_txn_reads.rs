//! The Kafka transaction reads of one cycle share one answer budget (review s17 lead H1):
//! the engine keeps every answer of the cycle until its entry commits, so a cycle of many
//! DescribeProducers held one full answer each. Each read is granted what the cycle has
//! left: `MAX_READ_ENTRIES_PER_CYCLE` entries, and bytes (each entry `READ_ENTRY_BYTES`
//! plus its names, review s18 kafka M1) within the reads' own share of the memory budget's
//! answer room (`1 / ADMIN_READ_SHARE_DIVISOR`, review s18 kafka M2: pops never take it,
//! and reads never take the pops' part). The cycle's first read that lists anything gets
//! its own answer's budget whatever is left, so reads always progress, except under memory
//! pressure (review s19 kafka L1). What does not fit is `OverBudget` (a retriable per-item
//! error at the door) or, for ListTransactions, the whole list refused retriably.

use queenmq_protocol::kafka_txn_reads::{
    KafkaTxnRead, KafkaTxnReadAnswer, ADMIN_READ_SHARE_DIVISOR, MAX_READ_ENTRIES_PER_CYCLE,
};
use queenmq_protocol::QueenError;

use super::Planner;
use crate::reads::kafka_txns::Grant;

/// Whether `cmd` is a read the pops leave their share of the answer room for
/// (`Cycle::has_admin_reads`, set before a cycle plans): the Kafka transaction reads, a
/// ListGroups and a whole group's OffsetFetch. A consumer's named-partition OffsetFetch is
/// consumption, charged with the pops (review s20 kafka L1).
pub fn is_admin_read(cmd: &queenmq_protocol::Command) -> bool {
    use queenmq_protocol::kafka_groups::KafkaGroupsReq as G;
    use queenmq_protocol::Command;
    matches!(
        cmd,
        Command::Read(queenmq_protocol::ReadReq::KafkaTxns(_))
            | Command::KafkaGroups(
                G::List
                    | G::Fetch {
                        partitions: None,
                        ..
                    }
            )
    )
}

impl Planner<'_> {
    pub fn plan_kafka_txn_read(
        &mut self,
        q: &KafkaTxnRead,
    ) -> Result<KafkaTxnReadAnswer, QueenError> {
        let granted = self.txn_read_grant();
        let (answer, spent) = crate::reads::kafka_txns::answer(self.st, q, granted)?;
        self.charge_admin_read(spent);
        Ok(answer)
    }

    /// Counts what an admin read of this cycle listed (the Kafka transaction reads, and the
    /// groups' List and Fetch: review s19 kafka H2) against the cycle's grant.
    pub(crate) fn charge_admin_read(&mut self, spent: Grant) {
        self.cycle.txn_read_entries = self.cycle.txn_read_entries.saturating_add(spent.entries);
        self.cycle.txn_read_bytes = self.cycle.txn_read_bytes.saturating_add(spent.bytes);
    }

    /// What the next Kafka transaction read of this cycle may list. Under memory pressure the
    /// first read has no exemption: an unlimited answer built every cycle while the door
    /// refuses answers is the churn the pressure asks to stop (review s19 kafka L1).
    pub(crate) fn txn_read_grant(&self) -> Grant {
        if self.cycle.txn_read_entries == 0 && !self.memory_pressed() {
            return Grant::UNLIMITED;
        }
        Grant {
            entries: MAX_READ_ENTRIES_PER_CYCLE.saturating_sub(self.cycle.txn_read_entries),
            bytes: self
                .admin_read_share()
                .saturating_sub(self.cycle.txn_read_bytes),
        }
    }

    /// Whether the memory budget refuses writes now (reads lose their first-read exemption).
    pub(crate) fn memory_pressed(&self) -> bool {
        self.memory.is_some_and(|m| m.pressed())
    }

    /// The Kafka transaction reads' share of the answer room (without a budget, unbounded).
    pub(crate) fn admin_read_share(&self) -> usize {
        match self.memory {
            Some(m) => m.answer_room() / ADMIN_READ_SHARE_DIVISOR,
            None => usize::MAX,
        }
    }
}
