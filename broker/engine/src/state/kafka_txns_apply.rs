//! Applying the Kafka transaction effects (55..=59, 66) to the state. What the planner never
//! emits (a stale epoch, a partition not in the transaction, a marker past its partition's
//! end) is skipped with a warning, alike on every replica.

use super::kafka_txns::{PendingOffset, TxnEnd};
use super::State;
use crate::entry_kafka_txns::TxnEffect;

impl State {
    pub(super) fn apply_kafka_txn(&mut self, e: &TxnEffect<'_>, now_us: i64) {
        let applied = match e {
            TxnEffect::Init {
                txn_id,
                producer_id,
                epoch,
                timeout_ms,
            } => self
                .kafka_txns
                .init(txn_id, *producer_id, *epoch, *timeout_ms, now_us),
            TxnEffect::Add {
                txn_id,
                producer_id,
                epoch,
                pids,
                groups,
            } => {
                // A partition is added only once it exists (the planner creates it first).
                pids.iter().all(|pid| self.partitions.get(pid).is_some())
                    && self
                        .kafka_txns
                        .add(txn_id, *producer_id, *epoch, pids, groups, now_us)
            }
            TxnEffect::Offset {
                txn_id,
                group,
                topic,
                partition,
                offset,
                leader_epoch,
                metadata,
            } => self.kafka_txns.offset(
                txn_id,
                ((*group).to_owned(), (*topic).to_owned(), *partition),
                PendingOffset {
                    offset: *offset,
                    leader_epoch: *leader_epoch,
                    metadata: (*metadata).to_owned(),
                },
                now_us,
            ),
            TxnEffect::End {
                txn_id,
                how,
                markers,
            } => {
                let inside = markers.iter().all(|(pid, offset)| {
                    self.partitions
                        .get(pid)
                        .is_some_and(|p| *offset < p.next_offset)
                });
                inside && self.kafka_txns.end(txn_id, *how, markers, now_us)
            }
            TxnEffect::Records {
                txn_id,
                pid,
                base_offset,
                count,
            } => match self.partitions.get(pid).map(|p| p.next_offset) {
                Some(next) => self
                    .kafka_txns
                    .records(txn_id, *pid, *base_offset, *count, next),
                None => false,
            },
            TxnEffect::BumpedFrom {
                txn_id,
                producer_id,
                epoch,
            } => self.kafka_txns.bumped_from(txn_id, (*producer_id, *epoch)),
        };
        if !applied {
            tracing::warn!(effect = ?e, "kafka transaction effect the planner never makes skipped");
        }
    }
}

/// `TxnEnd` is matched by the planner too; keep the byte values where the format says.
const _: () = assert!(TxnEnd::Abort as u8 == 0 && TxnEnd::Commit as u8 == 1);

#[cfg(test)]
mod tests {
    use crate::entry::Effect;
    use crate::entry_kafka_txns::TxnEffect;
    use crate::state::config::QueueConfig;
    use crate::state::kafka_txns::{StretchKind, TxnEnd};
    use crate::state::model::Run;
    use crate::state::{decode_state, encode_state, Loc, State};

    /// Queue "t" (id 1) with partition "0" (id 1) holding `next_offset` messages.
    fn state_with_partition(next_offset: u64) -> State {
        let mut st = State::default();
        let loc = Loc { index: 1, pos: 0 };
        let upsert = Effect::QueueUpsert {
            qid: 1,
            name: "t",
            namespace: "",
            task: "",
            configured: false,
            config: QueueConfig::default(),
        };
        st.apply(&upsert, 0, loc);
        let create = Effect::PartitionCreate {
            qid: 1,
            pid: 1,
            name: "0",
        };
        st.apply(&create, 0, loc);
        if let Some(p) = st.partitions.get_mut(&1) {
            p.next_offset = next_offset;
        }
        st
    }

    fn apply(st: &mut State, e: TxnEffect<'_>, now_us: i64) {
        st.apply(&Effect::KafkaTxn(e), now_us, Loc { index: 1, pos: 0 });
    }

    #[test]
    fn effects_drive_a_transaction_and_refuse_markers_past_the_end() {
        let mut st = state_with_partition(4);
        apply(
            &mut st,
            TxnEffect::Init {
                txn_id: "tx",
                producer_id: 3,
                epoch: 0,
                timeout_ms: 1000,
            },
            10,
        );
        let add = |pids: Vec<u64>| TxnEffect::Add {
            txn_id: "tx",
            producer_id: 3,
            epoch: 0,
            pids,
            groups: vec![],
        };
        apply(&mut st, add(vec![9]), 20);
        assert!(
            st.kafka_txns
                .get("tx")
                .is_some_and(|r| r.partitions.is_empty()),
            "an unknown partition is not added"
        );
        apply(&mut st, add(vec![1]), 20);
        let records = TxnEffect::Records {
            txn_id: "tx",
            pid: 1,
            base_offset: 2,
            count: 2,
        };
        apply(&mut st, records, 30);
        assert_eq!(st.kafka_txns.lso(1, 0, 4), 2);
        let end = |offset| TxnEffect::End {
            txn_id: "tx",
            how: TxnEnd::Abort,
            markers: vec![(1, offset)],
        };
        apply(&mut st, end(4), 40);
        assert_eq!(
            st.kafka_txns.lso(1, 0, 4),
            2,
            "a marker past the end is skipped"
        );
        if let Some(p) = st.partitions.get_mut(&1) {
            p.next_offset = 5;
            p.runs.push(Run {
                base_offset: 0,
                count: 5,
                created_us: 0,
                index: 1,
                pos: 0,
            });
        }
        apply(&mut st, end(4), 40);
        assert_eq!(st.kafka_txns.lso(1, 0, 5), 5);
        let kinds: Vec<_> = st
            .kafka_txns
            .stretches_in(1, 0, 5)
            .into_iter()
            .map(|(b, s)| (b, s.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![(2, StretchKind::Aborted)],
            "records and marker merge"
        );
        st.last_now_us = 40;
        // A checkpoint carries it all (section 8) and a tenant without it writes none.
        let back = decode_state(&encode_state(&st)).expect("decodes");
        assert_eq!(back.kafka_txns.part(1), st.kafka_txns.part(1));
        assert_eq!(back.kafka_txns.get("tx"), st.kafka_txns.get("tx"));
        let plain = encode_state(&state_with_partition(4));
        assert!(decode_state(&plain).is_ok_and(|s| s.kafka_txns.is_empty()));
        // Retention past the aborted records forgets them.
        st.delete_records(1, 4);
        assert_eq!(st.kafka_txns.stretches_in(1, 0, 5).len(), 1);
    }
}
