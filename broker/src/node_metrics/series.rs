//! A window of samples in buckets, the way the reference broker's dashboard views bucket them:
//! the bucket width follows the window's length (1, 5, 15, 60 or 360 minutes), a bucket is
//! named by its first minute, every gauge is `{avg, min, max, last}` over its samples and the
//! request counts are summed.

use queenmq_protocol::{Gauge, NodeCounts, NodeMetricsQuery, NodePoint, NodeSeries, QueenError};

use super::ring::NodeSample;

const US_PER_MIN: i64 = 60_000_000;
/// The "workers" rows cover the last five minutes, as the reference's do.
const RECENT_US: i64 = 5 * US_PER_MIN;
/// The node's one worker: its engine loop (spec native-api §2.1 rows 58-59, docs/api.md).
pub const WORKER_ID: &str = "worker-0";

pub struct Replica<'a> {
    pub hostname: &'a str,
    pub port: u16,
    pub sample_seconds: u64,
}

pub fn bucket_minutes(from_us: i64, to_us: i64) -> u32 {
    let minutes = (to_us.saturating_sub(from_us) as f64 / US_PER_MIN as f64).round();
    match minutes {
        m if m <= 60.0 => 1,
        m if m <= 360.0 => 5,
        m if m <= 1_440.0 => 15,
        m if m <= 10_080.0 => 60,
        _ => 360,
    }
}

pub fn series<'a>(
    samples: impl Iterator<Item = &'a NodeSample> + Clone,
    q: &NodeMetricsQuery,
    now_us: i64,
    me: &Replica<'_>,
) -> Result<NodeSeries, QueenError> {
    let to_us = q.to_us.unwrap_or(now_us);
    let from_us = q.from_us.unwrap_or(to_us.saturating_sub(60 * US_PER_MIN));
    if from_us > to_us {
        return Err(QueenError::bad_request("from must not be after to"));
    }
    let width = i64::from(bucket_minutes(from_us, to_us)) * US_PER_MIN;
    let mine = q.hostname.as_deref().is_none_or(|h| h == me.hostname)
        && q.worker_id.as_deref().is_none_or(|w| w == WORKER_ID);
    let mut points: Vec<(NodePoint, Vec<&NodeSample>)> = Vec::new();
    for s in samples.clone() {
        if !mine || s.at_us < from_us || s.at_us > to_us {
            continue;
        }
        let bucket_us = s.at_us.div_euclid(width) * width;
        match points.last_mut() {
            Some((p, members)) if p.bucket_us == bucket_us => members.push(s),
            _ => points.push((
                NodePoint {
                    bucket_us,
                    ..NodePoint::default()
                },
                vec![s],
            )),
        }
    }
    let since = now_us.saturating_sub(RECENT_US);
    // Another replica's or worker's filter leaves this node's workers row and summary out too.
    let recent: Vec<&NodeSample> = samples
        .clone()
        .filter(|s| mine && s.at_us >= since)
        .collect();
    let mut totals = NodeCounts::default();
    for s in samples.filter(|_| mine) {
        totals.add(&s.counts);
    }
    Ok(NodeSeries {
        hostname: me.hostname.to_string(),
        port: me.port,
        from_us,
        to_us,
        bucket_minutes: bucket_minutes(from_us, to_us),
        sample_seconds: me.sample_seconds,
        points: points
            .into_iter()
            .map(|(p, members)| point(p.bucket_us, &members))
            .collect(),
        recent_last_us: recent.last().map(|s| s.at_us),
        recent: (!recent.is_empty()).then(|| point(since, &recent)),
        totals,
    })
}

/// `members` is not empty and oldest first.
fn point(bucket_us: i64, members: &[&NodeSample]) -> NodePoint {
    let g = |f: fn(&NodeSample) -> f64| gauge(members.iter().map(|s| f(s))).unwrap_or_default();
    // A sample whose /proc read failed has no value: it is left out, not counted as 0.
    let k = |f: fn(&NodeSample) -> Option<f64>| gauge(members.iter().filter_map(|s| f(s)));
    let mut counts = NodeCounts::default();
    for s in members {
        counts.add(&s.counts);
    }
    NodePoint {
        bucket_us,
        samples: u32::try_from(members.len()).unwrap_or(u32::MAX),
        cpu_user: k(|s| s.cpu_user),
        cpu_system: k(|s| s.cpu_system),
        rss_bytes: k(|s| s.rss_bytes.map(|v| v as f64)),
        virtual_bytes: k(|s| s.virtual_bytes.map(|v| v as f64)),
        threads: k(|s| s.threads.map(|v| v as f64)),
        http_connections: g(|s| s.http_connections as f64),
        engine_queued: g(|s| s.engine_queued as f64),
        loop_lag_ms: g(|s| s.loop_lag_ms),
        counts,
    }
}

/// `None` when there is no value.
fn gauge(values: impl Iterator<Item = f64>) -> Option<Gauge> {
    let (mut sum, mut n) = (0.0, 0u32);
    let mut g = Gauge {
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        ..Gauge::default()
    };
    for v in values {
        sum += v;
        n += 1;
        g.min = g.min.min(v);
        g.max = g.max.max(v);
        g.last = v;
    }
    if n == 0 {
        return None;
    }
    g.avg = sum / f64::from(n);
    Some(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = US_PER_MIN;

    fn sample(at_us: i64, rss: u64, pushes: u64) -> NodeSample {
        NodeSample {
            at_us,
            rss_bytes: Some(rss),
            counts: NodeCounts {
                push_requests: 1,
                push_messages: pushes,
                ..NodeCounts::default()
            },
            ..NodeSample::default()
        }
    }

    fn me() -> Replica<'static> {
        Replica {
            hostname: "node-a",
            port: 6632,
            sample_seconds: 10,
        }
    }

    fn query(from_us: i64, to_us: i64) -> NodeMetricsQuery {
        NodeMetricsQuery {
            from_us: Some(from_us),
            to_us: Some(to_us),
            hostname: None,
            worker_id: None,
        }
    }

    #[test]
    fn samples_fall_in_minute_buckets_with_gauges_and_summed_counts() {
        let t0 = 1_000 * MIN;
        let s = [
            sample(t0 + 10_000_000, 100, 2),
            sample(t0 + 20_000_000, 300, 3),
            sample(t0 + MIN + 5_000_000, 200, 4),
            sample(t0 + 5 * MIN, 1, 100),
        ];
        let out = series(s.iter(), &query(t0, t0 + 2 * MIN), t0 + 2 * MIN, &me()).unwrap();
        assert_eq!(out.bucket_minutes, 1);
        assert_eq!(out.points.len(), 2);
        let first = &out.points[0];
        assert_eq!((first.bucket_us, first.samples), (t0, 2));
        assert_eq!(
            first.rss_bytes.unwrap(),
            Gauge {
                avg: 200.0,
                min: 100.0,
                max: 300.0,
                last: 300.0
            }
        );
        assert_eq!(first.counts.push_messages, 5);
        assert_eq!(out.points[1].counts.push_messages, 4);
        // Totals cover every sample kept, the window aside.
        assert_eq!(out.totals.push_messages, 109);
    }

    #[test]
    fn the_bucket_width_follows_the_window_and_a_backwards_window_is_refused() {
        assert_eq!(bucket_minutes(0, 60 * MIN), 1);
        assert_eq!(bucket_minutes(0, 6 * 60 * MIN), 5);
        assert_eq!(bucket_minutes(0, 24 * 60 * MIN), 15);
        assert_eq!(bucket_minutes(0, 7 * 24 * 60 * MIN), 60);
        assert_eq!(bucket_minutes(0, 30 * 24 * 60 * MIN), 360);
        assert!(series([].iter(), &query(2, 1), 0, &me()).is_err());
    }

    #[test]
    fn another_replica_or_worker_has_no_points_and_defaults_cover_the_last_hour() {
        let now = 1_000 * MIN;
        let s = [sample(now - 30 * MIN, 1, 1), sample(now - 90 * MIN, 1, 1)];
        let mut q = query(0, now);
        q.hostname = Some("node-b".into());
        assert!(series(s.iter(), &q, now, &me()).unwrap().points.is_empty());
        q.hostname = Some("node-a".into());
        q.worker_id = Some("worker-1".into());
        assert!(series(s.iter(), &q, now, &me()).unwrap().points.is_empty());
        let open = NodeMetricsQuery {
            from_us: None,
            to_us: None,
            hostname: None,
            worker_id: Some(WORKER_ID.into()),
        };
        let out = series(s.iter(), &open, now, &me()).unwrap();
        assert_eq!((out.from_us, out.to_us), (now - 60 * MIN, now));
        assert_eq!(out.points.len(), 1);
        assert!(out.recent.is_none(), "nothing in the last five minutes");
    }

    #[test]
    fn another_worker_gets_no_workers_row_nor_summary_of_this_one() {
        let now = 1_000 * MIN;
        let s = [sample(now - MIN, 1, 3)];
        let mut q = query(0, now);
        q.worker_id = Some("worker-1".into());
        let out = series(s.iter(), &q, now, &me()).unwrap();
        assert!(out.recent.is_none() && out.recent_last_us.is_none());
        assert_eq!((out.totals.push_requests, out.totals.push_messages), (0, 0));
        q.worker_id = Some(WORKER_ID.into());
        let out = series(s.iter(), &q, now, &me()).unwrap();
        assert!(out.recent.is_some());
        assert_eq!((out.totals.push_requests, out.totals.push_messages), (1, 3));
    }
}
