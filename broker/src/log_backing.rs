//! Whether the log still holds every record the state about to be served points into.
//!
//! A checkpoint's runs name the Raft log index of the entry holding their messages' bytes, and
//! a pop reads them back from the segments. Recovery checks that the log is one contiguous run
//! and reaches the durable point, but not where it starts: with the first segment deleted the
//! log still opens, and the messages of the runs below its new start could never be read.

use std::path::Path;

use queenmq_storage::segment_file_name;

use crate::state::model::PENDING_INDEX;
use crate::state::State;

/// A log starting at or below this index is whole: openraft's first entry (the initial
/// membership) has index 0, and 1 is accepted too.
const ORIGIN: u64 = 1;

/// The log record with the lowest index the state's runs point into, and whose it is.
fn lowest_run(st: &State) -> Option<(u64, String)> {
    st.partitions
        .values()
        .filter_map(|p| {
            let low = p
                .runs
                .iter()
                .map(|r| r.index)
                .filter(|&i| i != PENDING_INDEX)
                .min()?;
            Some((low, p))
        })
        .min_by_key(|(low, _)| *low)
        .map(|(low, p)| {
            let queue = st.queues.get(&p.queue()).map_or("?", |q| q.name.as_str());
            (
                low,
                format!("messages of partition '{}' of queue '{queue}'", p.name),
            )
        })
}

/// `Some(sentence)` naming what is missing when the log in `log_dir`, starting at `log_first`,
/// no longer holds records the loaded state needs: a run's entry, or, for a state rebuilt
/// from the log alone (`from_checkpoint` false), the log's very first entries.
pub fn missing(
    st: &State,
    from_checkpoint: bool,
    log_first: Option<u64>,
    log_dir: &Path,
) -> Option<String> {
    let first = log_first?;
    let (low, whose) = if from_checkpoint {
        lowest_run(st)?
    } else if first > ORIGIN {
        (
            0,
            "no checkpoint: the state is rebuilt from the log alone".to_owned(),
        )
    } else {
        return None;
    };
    if first <= low {
        return None;
    }
    Some(format!(
        "the log in {} starts at index {first} ({}) but log record {low} is still needed ({whose}): \
         records {low}..={} are missing, with the segment files that held them",
        log_dir.display(),
        segment_file_name(first),
        first - 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::model::{test_partition, Run};

    fn state_with_runs(indexes: &[u64]) -> State {
        let mut st = State::default();
        let mut p = test_partition(7, "p7");
        p.runs = indexes
            .iter()
            .map(|&index| Run {
                base_offset: 0,
                count: 1,
                created_us: 0,
                index,
                pos: 0,
            })
            .collect();
        st.partitions.insert(7, p);
        st
    }

    #[test]
    fn a_run_below_the_first_segment_is_missing_and_named() {
        let st = state_with_runs(&[40, 12, PENDING_INDEX]);
        let dir = Path::new("/data/log");
        let what = missing(&st, true, Some(30), dir).expect("runs below the log's start");
        assert!(what.contains("starts at index 30"), "{what}");
        assert!(what.contains("seg-00000000000000000030.qlog"), "{what}");
        assert!(what.contains("records 12..=29 are missing"), "{what}");
        assert!(what.contains("partition 'p7'"), "{what}");
        assert_eq!(missing(&st, true, Some(12), dir), None);
        assert_eq!(missing(&st, true, None, dir), None);
    }

    #[test]
    fn runs_pending_or_absent_need_nothing() {
        let dir = Path::new("/data/log");
        assert_eq!(
            missing(&state_with_runs(&[PENDING_INDEX]), true, Some(99), dir),
            None
        );
        assert_eq!(missing(&State::default(), true, Some(99), dir), None);
    }

    #[test]
    fn a_state_rebuilt_from_the_log_needs_its_start() {
        let dir = Path::new("/data/log");
        assert_eq!(missing(&State::default(), false, Some(0), dir), None);
        assert_eq!(missing(&State::default(), false, Some(1), dir), None);
        let what = missing(&State::default(), false, Some(17), dir).expect("start gone");
        assert!(what.contains("records 0..=16 are missing"), "{what}");
    }
}
