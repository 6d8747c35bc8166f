//! Messages written per time bucket, counted from the partitions' runs (each run is one
//! append: its creation time and message count), so the series is what the log holds.

use queenmq_protocol::{AnalyticsQuery, AnalyticsSeries, QueenError, MAX_ANALYTICS_BUCKETS};

use crate::state::State;

const DAY_US: i64 = 86_400_000_000;

pub fn series(st: &State, q: &AnalyticsQuery) -> Result<AnalyticsSeries, QueenError> {
    let width = q.interval.width_us();
    let to = q.to_us.unwrap_or(st.last_now_us);
    let from = q.from_us.unwrap_or(to.saturating_sub(DAY_US));
    if from > to {
        return Err(QueenError::bad_request("from is after to"));
    }
    let first = from.div_euclid(width).saturating_mul(width);
    let buckets = to.div_euclid(width) - from.div_euclid(width) + 1;
    if buckets > MAX_ANALYTICS_BUCKETS {
        return Err(QueenError::bad_request(format!(
            "{buckets} {} buckets asked; at most {MAX_ANALYTICS_BUCKETS} per answer: narrow \
             from/to or widen the interval",
            q.interval.name()
        )));
    }
    // Fits: at most MAX_ANALYTICS_BUCKETS.
    let mut counts = vec![0u64; buckets as usize];
    let matches = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
    for queue in st.queues.values() {
        if !matches(&q.queue, &queue.name)
            || !matches(&q.namespace, &queue.namespace)
            || !matches(&q.task, &queue.task)
        {
            continue;
        }
        for pid in &queue.partition_order {
            let Some(p) = st.partitions.get(&pid) else {
                continue;
            };
            // Runs are in append order, so in creation-time order.
            let start = p.runs.partition_point(|r| r.created_us < from);
            for run in p.runs.iter_from(start) {
                if run.created_us > to {
                    break;
                }
                let i = (run.created_us.div_euclid(width) - from.div_euclid(width)) as usize;
                if let Some(c) = counts.get_mut(i) {
                    *c += u64::from(run.count);
                }
            }
        }
    }
    Ok(AnalyticsSeries {
        interval: q.interval,
        from_us: from,
        to_us: to,
        points: counts
            .into_iter()
            .enumerate()
            .map(|(i, c)| (first + i as i64 * width, c))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use queenmq_protocol::AnalyticsInterval;

    use super::*;
    use crate::plan::fixture::{Fixture, NOW, SECOND};

    fn query(from_us: i64, to_us: i64, queue: Option<&str>) -> AnalyticsQuery {
        AnalyticsQuery {
            from_us: Some(from_us),
            to_us: Some(to_us),
            interval: AnalyticsInterval::Minute,
            queue: queue.map(str::to_string),
            namespace: None,
            task: None,
        }
    }

    #[test]
    fn messages_are_counted_in_the_bucket_of_their_append() {
        let mut fx = Fixture::new();
        let minute = 60 * SECOND;
        let start = NOW.div_euclid(minute) * minute;
        fx.advance_to(start);
        fx.push("a", "p", 3);
        fx.push("b", "p", 1);
        fx.advance_to(start + 2 * minute + SECOND);
        fx.push("a", "q", 2);
        fx.advance(SECOND);
        let all =
            series(&fx.st, &query(start, start + 2 * minute + 2 * SECOND, None)).expect("series");
        let counts: Vec<u64> = all.points.iter().map(|p| p.1).collect();
        assert_eq!(counts, vec![4, 0, 2]);
        assert_eq!(all.points[1].0, start + minute);
        let a = series(
            &fx.st,
            &query(start, start + 2 * minute + 2 * SECOND, Some("a")),
        )
        .expect("series");
        assert_eq!(
            a.points.iter().map(|p| p.1).collect::<Vec<_>>(),
            vec![3, 0, 2]
        );
    }

    #[test]
    fn a_window_too_wide_or_backwards_is_refused() {
        let st = State::default();
        assert!(series(&st, &query(0, MAX_ANALYTICS_BUCKETS * 60 * SECOND, None)).is_err());
        assert!(series(&st, &query(10, 5, None)).is_err());
        let ok = series(
            &st,
            &query(0, (MAX_ANALYTICS_BUCKETS - 1) * 60 * SECOND, None),
        );
        assert_eq!(
            ok.map(|s| s.points.len()).ok(),
            Some(MAX_ANALYTICS_BUCKETS as usize)
        );
    }
}
