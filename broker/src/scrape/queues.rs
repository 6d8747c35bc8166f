//! Queue depth and consumer-group lag, read through the functions the HTTP reads use, so a
//! dashboard and `GET /api/v1/resources/queues` give the same numbers.

use std::collections::HashSet;

use crate::reads::{group_lag, queue_depth};
use crate::state::State;

pub struct QueueRow {
    pub queue: String,
    pub depth: u64,
}

pub struct GroupRow {
    pub group: String,
    pub queue: String,
    pub messages: u64,
    pub oldest_pending_us: Option<i64>,
}

pub struct Sample {
    pub queues: Vec<QueueRow>,
    pub groups: Vec<GroupRow>,
    pub partitions: usize,
}

/// Runs under the state lock, taken by the engine between its cycles (engine/metrics_sample.rs),
/// never by a scrape: it only copies numbers out (queues × groups × partitions steps) and the
/// gauges are set after the lock is gone.
pub fn sample(st: &State) -> Sample {
    let queues = st
        .queues
        .values()
        .map(|q| QueueRow {
            queue: q.name.clone(),
            depth: queue_depth(st, q),
        })
        .collect();
    let groups = st
        .groups
        .values()
        .filter_map(|g| {
            let q = st.queues.get(&g.queue)?;
            let lag = group_lag(st, g)?;
            Some(GroupRow {
                group: g.name.clone(),
                queue: q.name.clone(),
                messages: lag.messages,
                oldest_pending_us: lag.oldest_pending_us,
            })
        })
        .collect();
    Sample {
        queues,
        groups,
        partitions: st.partitions.len(),
    }
}

/// Label sets the previous scrape set. The recorder cannot forget a series, so those of a
/// deleted queue or group are set to 0 once rather than showing their last lag for ever.
#[derive(Default)]
pub struct Seen {
    queues: HashSet<String>,
    groups: HashSet<(String, String)>,
}

/// One tenant's group: every series carries its `tenant` label; `seen` is that group's.
pub fn record(tenant: &str, s: &Sample, now_us: i64, seen: &mut Seen) {
    let t = [("tenant", tenant.to_owned())];
    metrics::gauge!("queen_queues", &t).set(s.queues.len() as f64);
    metrics::gauge!("queen_partitions", &t).set(s.partitions as f64);
    let depth = |queue: &str, v: f64| {
        let labels = [("queue", queue.to_owned()), ("tenant", tenant.to_owned())];
        metrics::gauge!("queen_queue_depth", &labels).set(v);
    };
    let mut queues = HashSet::with_capacity(s.queues.len());
    for r in &s.queues {
        depth(&r.queue, r.depth as f64);
        queues.insert(r.queue.clone());
    }
    for gone in seen.queues.difference(&queues) {
        depth(gone, 0.0);
    }
    let mut groups = HashSet::with_capacity(s.groups.len());
    for r in &s.groups {
        let age_us = r.oldest_pending_us.map_or(0, |t| (now_us - t).max(0));
        set_lag(
            tenant,
            &r.group,
            &r.queue,
            r.messages as f64,
            age_us as f64 / 1e6,
        );
        groups.insert((r.group.clone(), r.queue.clone()));
    }
    for (group, queue) in seen.groups.difference(&groups) {
        set_lag(tenant, group, queue, 0.0, 0.0);
    }
    seen.queues = queues;
    seen.groups = groups;
}

fn set_lag(tenant: &str, group: &str, queue: &str, messages: f64, seconds: f64) {
    let labels = [
        ("group", group.to_owned()),
        ("queue", queue.to_owned()),
        ("tenant", tenant.to_owned()),
    ];
    metrics::gauge!("queen_consumer_group_lag_messages", &labels).set(messages);
    metrics::gauge!("queen_consumer_group_lag_seconds", &labels).set(seconds);
}

#[cfg(test)]
mod tests {
    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;
    use crate::entry::Effect;
    use crate::state::config::QueueConfig;
    use crate::state::model::CursorRow;
    use crate::state::Loc;

    const SECOND: i64 = 1_000_000;

    /// Queue "orders": p0 holds 3 messages written at 1 s, p1 holds 2 written at 2 s.
    /// "billing" completed the first 2 of p0; "audit" nothing.
    fn state() -> State {
        let mut st = State::default();
        let loc = Loc { index: 1, pos: 0 };
        let effects = [
            Effect::QueueUpsert {
                qid: 1,
                name: "orders",
                namespace: "",
                task: "",
                configured: true,
                config: QueueConfig::default(),
            },
            Effect::PartitionCreate {
                qid: 1,
                pid: 1,
                name: "p0",
            },
            Effect::PartitionCreate {
                qid: 1,
                pid: 2,
                name: "p1",
            },
            Effect::GroupRegister {
                qid: 1,
                gid: 1,
                name: "billing",
                start_from_us: i64::MIN,
            },
            Effect::GroupRegister {
                qid: 1,
                gid: 2,
                name: "audit",
                start_from_us: i64::MIN,
            },
        ];
        for e in &effects {
            st.apply(e, SECOND, loc);
        }
        let append = |pid, n: u64| Effect::Append {
            pid,
            base_offset: 0,
            hashes: (0..n).map(|h| h + pid * 100).collect(),
            frames: &[],
        };
        st.apply(&append(1, 3), SECOND, loc);
        st.apply(&append(2, 2), 2 * SECOND, loc);
        let row = CursorRow {
            committed: 2,
            ..CursorRow::default()
        };
        st.apply(
            &Effect::CursorPut {
                gid: 1,
                pid: 1,
                row,
            },
            3 * SECOND,
            loc,
        );
        st
    }

    #[test]
    fn depth_is_the_slowest_group_and_lag_is_per_group() {
        let s = sample(&state());
        assert_eq!(s.partitions, 2);
        assert_eq!(s.queues.len(), 1);
        assert_eq!(s.queues[0].depth, 5);
        let lag = |name: &str| {
            let r = s.groups.iter().find(|g| g.group == name).unwrap();
            (r.messages, r.oldest_pending_us)
        };
        assert_eq!(lag("billing"), (3, Some(SECOND)));
        assert_eq!(lag("audit"), (5, Some(SECOND)));
    }

    #[test]
    fn a_deleted_group_reads_zero_instead_of_its_last_lag() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let mut st = state();
        let mut seen = Seen::default();
        metrics::with_local_recorder(&recorder, || {
            record("t1", &sample(&st), 4 * SECOND, &mut seen);
        });
        let text = handle.render();
        for want in [
            r#"queen_queue_depth{queue="orders",tenant="t1"} 5"#,
            r#"queen_consumer_group_lag_messages{group="billing",queue="orders",tenant="t1"} 3"#,
            r#"queen_consumer_group_lag_seconds{group="audit",queue="orders",tenant="t1"} 3"#,
            r#"queen_partitions{tenant="t1"} 2"#,
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
        st.apply(
            &Effect::GroupDelete { gid: 2 },
            5 * SECOND,
            Loc { index: 2, pos: 0 },
        );
        metrics::with_local_recorder(&recorder, || {
            record("t1", &sample(&st), 5 * SECOND, &mut seen);
        });
        let text = handle.render();
        for want in [
            r#"queen_consumer_group_lag_messages{group="audit",queue="orders",tenant="t1"} 0"#,
            r#"queen_consumer_group_lag_seconds{group="audit",queue="orders",tenant="t1"} 0"#,
            r#"queen_consumer_group_lag_messages{group="billing",queue="orders",tenant="t1"} 3"#,
            r#"queen_queue_depth{queue="orders",tenant="t1"} 3"#,
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }
}
