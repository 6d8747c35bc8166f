//! Queue, partition and status answers.

use queenmq_protocol::{
    LabelRow, MessageTotals, Overview, Page, PageInfo, PartitionDepth, PartitionRow, PartitionRows,
    PartitionSummary, QueenError, QueueDepth, QueueDoc, QueueStatus, QueueView, StatusView,
    QUEUE_MODE_GROUP,
};

use super::committed_of;
use crate::plan::queue_uuid;
use crate::state::model::{Partition, Queue};
use crate::state::State;

struct Counts {
    total: u64,
    pending: u64,
    processing: u64,
}

/// Totals of a queue as its slowest named group (or queue mode) sees them.
fn counts(st: &State, q: &Queue, group: Option<&str>) -> Counts {
    let total: u64 = q
        .partition_order
        .iter()
        .filter_map(|p| st.partitions.get(&p))
        // What is held: retention removed what lies below the first held offset.
        .map(|p| p.next_offset - p.low_offset())
        .sum();
    let mut worst: Option<(u64, u64)> = None;
    for (name, gid) in &q.groups {
        if group.is_some_and(|g| g != name) {
            continue;
        }
        let Some(g) = st.groups.get(gid) else {
            continue;
        };
        let (mut pending, mut processing) = (0u64, 0u64);
        for pid in &q.partition_order {
            let Some(p) = st.partitions.get(&pid) else {
                continue;
            };
            let (pend, proc_, _) = super::partition_stats::group_on_partition(st, g, p);
            pending += pend;
            processing += proc_;
        }
        if worst.is_none_or(|w| pending > w.0) {
            worst = Some((pending, processing));
        }
    }
    let (pending, processing) = worst.unwrap_or((if group.is_some() { 0 } else { total }, 0));
    Counts {
        total,
        pending,
        processing,
    }
}

/// Messages of the queue its slowest consumer group has not completed (every message while no
/// group reads it): the "pending" + "processing" of the queue documents.
pub fn queue_depth(st: &State, q: &Queue) -> u64 {
    counts(st, q, None).pending
}

/// The queue's dead-letter rows whose message is still held: a row below its partition's
/// floor (retention, Kafka DeleteRecords) names a message no reader serves any more.
pub(super) fn held_dead_letters(st: &State, q: &Queue) -> u64 {
    q.dlq.iter().filter(|d| dead_letter_held(st, d)).count() as u64
}

pub(super) fn dead_letter_held(st: &State, d: &crate::state::model::DlqRow) -> bool {
    st.partitions
        .get(&d.partition)
        .is_some_and(|p| d.offset >= p.low_offset())
}

fn totals(st: &State, q: &Queue) -> MessageTotals {
    let c = counts(st, q, None);
    MessageTotals {
        total: c.total,
        pending: c.pending.saturating_sub(c.processing),
        processing: c.processing,
        completed: c.total.saturating_sub(c.pending),
        // The messages waiting for a retry after a failed delivery, as the partitions count
        // them (`counters.failed` is not charged anywhere).
        failed: q
            .partition_order
            .iter()
            .filter_map(|pid| st.partitions.get(&pid))
            .map(|p| super::partition_stats::retrying_on_partition(st, q, p))
            .sum(),
        dead_letter: held_dead_letters(st, q),
    }
}

fn queue_view(st: &State, q: &Queue) -> QueueView {
    let bytes: u64 = q
        .partition_order
        .iter()
        .filter_map(|p| st.partitions.get(&p))
        .map(|p| p.bytes)
        .sum();
    QueueView {
        id: queue_uuid(q.id),
        name: q.name.clone(),
        namespace: q.namespace.clone(),
        task: q.task.clone(),
        partitions: q.partition_order.len(),
        messages: totals(st, q),
        retained_bytes: bytes,
        options: q.config.settings(),
        created_us: q.created_us,
    }
}

fn sorted_queues(st: &State) -> Vec<&Queue> {
    let mut v: Vec<&Queue> = st.queues.values().collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

pub fn list(st: &State) -> Vec<QueueView> {
    sorted_queues(st)
        .into_iter()
        .map(|q| queue_view(st, q))
        .collect()
}

pub fn one(st: &State, name: &str, page: Page) -> Result<QueueDoc, QueenError> {
    let q = st
        .queue_named(name)
        .ok_or_else(|| QueenError::not_found("Queue not found"))?;
    let listed: std::collections::HashSet<u64> = q
        .partition_order
        .iter()
        .skip(page.offset)
        .take(page.limit)
        .collect();
    let dead = super::partition_stats::held_dead_letters_by_partition(st, &q.dlq, |pid| {
        listed.contains(&pid)
    });
    let partitions = q
        .partition_order
        .iter()
        .skip(page.offset)
        .take(page.limit)
        .filter_map(|pid| st.partitions.get(&pid))
        .map(|p| PartitionSummary {
            id: p.id(),
            name: p.name.to_string(),
            created_us: p.created_us,
            messages: p.next_offset - p.low_offset(),
            last_write_us: p.last_write_us,
            // Below the floor (retention, DeleteRecords inside a write) nothing is held.
            oldest_us: p.created_of(p.low_offset()),
            newest_us: p
                .runs
                .last()
                .filter(|_| p.low_offset() < p.next_offset)
                .map(|r| r.created_us),
            retained_bytes: p.bytes,
            stats: super::partition_stats::partition_stats(
                st,
                q,
                p,
                dead.get(&p.id()).copied().unwrap_or(0),
            ),
            consumed: super::partition_stats::consumed_on_partition(st, q, p),
        })
        .collect();
    Ok(QueueDoc {
        queue: queue_view(st, q),
        partitions,
        page: page_info(page, q.partition_order.len()),
    })
}

fn page_info(page: Page, total: usize) -> PageInfo {
    PageInfo {
        limit: page.limit,
        offset: page.offset,
        total,
    }
}

pub fn depth(
    st: &State,
    name: &str,
    group: Option<&str>,
    page: Page,
) -> Result<QueueDepth, QueenError> {
    let q = st
        .queue_named(name)
        .ok_or_else(|| QueenError::not_found("Queue not found"))?;
    let gname = group.unwrap_or(QUEUE_MODE_GROUP);
    let g = q.groups.get(gname).and_then(|g| st.groups.get(g));
    let now = st.last_now_us;
    let mut parts = Vec::new();
    let (mut pending, mut processing, mut pp, mut pr) = (0u64, 0u64, 0u64, 0u64);
    for (i, pid) in q.partition_order.iter().enumerate() {
        let Some(p) = st.partitions.get(&pid) else {
            continue;
        };
        let committed = g.map_or(p.low_offset(), |g| committed_of(g, p));
        let pend = p.next_offset.saturating_sub(committed);
        let proc_ = g
            .and_then(|g| g.cursors.get(&pid))
            .and_then(|c| c.live_lease(now))
            .map_or(0, |l| l.end.saturating_sub(committed));
        let ready = if proc_ > 0 { 0 } else { pend };
        pending += pend;
        processing += proc_;
        pp += u64::from(pend > 0);
        pr += u64::from(ready > 0);
        // Totals cover every partition; only the listed rows are paged.
        if i >= page.offset && parts.len() < page.limit {
            parts.push(PartitionDepth {
                partition: p.name.to_string(),
                pending: pend,
                processing: proc_,
                ready,
            });
        }
    }
    Ok(QueueDepth {
        queue: name.to_string(),
        group: gname.to_string(),
        pending,
        processing,
        ready: pending.saturating_sub(processing),
        partitions_pending: pp,
        partitions_ready: pr,
        conflation: g.is_some_and(|g| g.conflation),
        partitions: parts,
        page: page_info(page, q.partition_order.len()),
    })
}

pub fn overview(st: &State) -> Overview {
    let (mut total, mut pending, mut processing, mut dlq) = (0u64, 0u64, 0u64, 0u64);
    for q in st.queues.values() {
        let c = counts(st, q, None);
        total += c.total;
        pending += c.pending;
        processing += c.processing;
        dlq += held_dead_letters(st, q);
    }
    let namespaces: std::collections::HashSet<&str> = st
        .queues
        .values()
        .map(|q| q.namespace.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    let tasks: std::collections::HashSet<&str> = st
        .queues
        .values()
        .map(|q| q.task.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    Overview {
        queues: st.queues.len(),
        partitions: st.partitions.len(),
        namespaces: namespaces.len(),
        tasks: tasks.len(),
        messages: MessageTotals {
            total,
            pending: pending.saturating_sub(processing),
            processing,
            completed: total.saturating_sub(pending),
            failed: 0,
            dead_letter: dlq,
        },
        lag: super::groups::lag_spread(st),
        at_us: crate::time::wall_clock_us(),
    }
}

pub fn labels(st: &State, namespaces: bool) -> Vec<LabelRow> {
    let mut map: std::collections::BTreeMap<&str, (u64, u64, u64, u64)> = Default::default();
    for q in st.queues.values() {
        let label = if namespaces { &q.namespace } else { &q.task };
        if label.is_empty() {
            continue;
        }
        let c = counts(st, q, None);
        let e = map.entry(label.as_str()).or_default();
        e.0 += 1;
        e.1 += q.partition_order.len() as u64;
        e.2 += c.total;
        e.3 += c.pending;
    }
    map.into_iter()
        .map(|(k, (queues, partitions, total, pending))| LabelRow {
            label: k.to_string(),
            queues,
            partitions,
            total,
            pending,
        })
        .collect()
}

/// Messages of partition `p` its slowest group of `q` has not completed (all it holds while no
/// group reads the queue), as `counts` sees a queue.
fn partition_pending(st: &State, q: &Queue, p: &Partition) -> u64 {
    let groups = q.groups.values().filter_map(|gid| st.groups.get(gid));
    let worst = groups
        .map(|g| p.next_offset.saturating_sub(committed_of(g, p)))
        .max();
    worst.unwrap_or(p.next_offset - p.low_offset())
}

fn partition_row(st: &State, q: &Queue, p: &Partition) -> PartitionRow {
    PartitionRow {
        id: p.id(),
        name: p.name.to_string(),
        queue: q.name.clone(),
        messages: p.next_offset - p.low_offset(),
        pending: partition_pending(st, q, p),
        created_us: p.created_us,
        last_write_us: p.last_write_us,
    }
}

/// With `queue` the queue's partitions ranked by pending count, most first (the dashboard's
/// "where is the backlog"); the work is that queue's partitions. Without it every queue's
/// partitions in creation order, of which only the page is built.
pub fn partitions(st: &State, queue: Option<&str>, limit: usize, offset: usize) -> PartitionRows {
    if let Some(name) = queue {
        let Some(q) = st.queue_named(name) else {
            return PartitionRows {
                rows: Vec::new(),
                page: PageInfo {
                    limit,
                    offset,
                    total: 0,
                },
            };
        };
        let mut rows: Vec<PartitionRow> = q
            .partition_order
            .iter()
            .filter_map(|pid| st.partitions.get(&pid))
            .map(|p| partition_row(st, q, p))
            .collect();
        let total = rows.len();
        // Stable: equal counts keep creation order.
        rows.sort_by_key(|r| std::cmp::Reverse(r.pending));
        let rows = rows.into_iter().skip(offset).take(limit).collect();
        return PartitionRows {
            rows,
            page: PageInfo {
                limit,
                offset,
                total,
            },
        };
    }
    let mut rows = Vec::new();
    let (mut total, mut skipped) = (0usize, 0usize);
    for q in sorted_queues(st) {
        total += q.partition_order.len();
        for pid in &q.partition_order {
            if rows.len() >= limit {
                break;
            }
            if skipped < offset {
                skipped += 1;
                continue;
            }
            if let Some(p) = st.partitions.get(&pid) {
                rows.push(partition_row(st, q, p));
            }
        }
    }
    PartitionRows {
        rows,
        page: PageInfo {
            limit,
            offset,
            total,
        },
    }
}

pub fn status(st: &State, only: Option<&str>) -> StatusView {
    let queues = sorted_queues(st)
        .into_iter()
        .filter(|q| only.is_none_or(|n| n == q.name))
        .map(|q| QueueStatus {
            queue: q.name.clone(),
            namespace: q.namespace.clone(),
            task: q.task.clone(),
            partitions: q.partition_order.len(),
            messages: totals(st, q),
            consumer_groups: q.groups.len(),
        })
        .collect();
    StatusView {
        queues,
        overview: overview(st),
    }
}

#[cfg(test)]
mod tests {
    use queenmq_protocol::kafka_records::{DeleteRecordsReq, DeleteRecordsTarget};
    use queenmq_protocol::Page;

    use crate::plan::fixture::{Fixture, SECOND};

    #[test]
    fn a_partitions_oldest_message_is_the_first_above_the_floor() {
        let mut fx = Fixture::new();
        fx.push("t", "0", 3);
        fx.advance(SECOND);
        let second_write = fx.planner().now();
        fx.push("t", "0", 3);
        let mut delete = |offset: i64| {
            let req = DeleteRecordsReq {
                targets: vec![DeleteRecordsTarget {
                    queue: "t".into(),
                    partition: "0".into(),
                    offset,
                }],
            };
            assert!(fx.planner().plan_kafka_delete_records(&req).is_ok());
            let page = Page {
                limit: 10,
                offset: 0,
            };
            let doc = super::one(&fx.st, "t", page).expect("queue");
            let p = &doc.partitions[0];
            (p.messages, p.oldest_us, p.newest_us)
        };
        assert_eq!(delete(4), (2, Some(second_write), Some(second_write)));
        assert_eq!(delete(-1), (0, None, None), "nothing held");
    }

    #[test]
    fn dead_letters_of_deleted_messages_are_not_counted() {
        use queenmq_protocol::{AckStatus, DlqQuery, Setting};

        use crate::plan::fixture::opts;
        use crate::reader::MessageReader;

        let mut fx = Fixture::new();
        fx.configure("q", opts(|o| o.retry_limit = Some(Setting::Value(0))));
        fx.push("q", "0", 4);
        fx.commit();
        let got = fx.pop("q", None, 1, None);
        fx.commit();
        assert!(fx.ack(&got, AckStatus::Failed)[0].success);
        fx.advance(SECOND);
        let counted = |fx: &mut Fixture| {
            let page = Page {
                limit: 10,
                offset: 0,
            };
            let doc = super::one(&fx.st, "q", page).expect("queue");
            let query = DlqQuery {
                queue: Some("q".into()),
                group: None,
                partition: None,
                limit: 10,
                offset: 0,
                from_us: None,
                to_us: None,
            };
            let mut rd = MessageReader {
                pending: &[],
                cache: &mut fx.cache,
                log: &fx.log,
                seal: None,
            };
            let listed = super::super::messages::dlq(&fx.st, &mut rd, &query).expect("dlq");
            (
                doc.queue.messages.dead_letter,
                listed.page.total,
                listed.messages.len(),
                super::overview(&fx.st).messages.dead_letter,
            )
        };
        assert_eq!(counted(&mut fx), (1, 1, 1, 1));
        let req = DeleteRecordsReq {
            targets: vec![DeleteRecordsTarget {
                queue: "q".into(),
                partition: "0".into(),
                offset: 2,
            }],
        };
        assert!(fx.planner().plan_kafka_delete_records(&req).is_ok());
        fx.commit();
        assert_eq!(counted(&mut fx), (0, 0, 0, 0));
    }
}
