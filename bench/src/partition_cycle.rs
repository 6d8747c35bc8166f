//! Which partition each message of a producer goes to: producer `k` of `n` owns the
//! partitions `k, k + n, k + 2n, …` (all of them when there are fewer partitions than
//! producers) and walks them round robin, one message each, so a run of `partitions`
//! messages touches every partition once.
//!
//! `spread` scatters the walk (`--partition-spread`): consecutive messages go to partitions
//! at least that far apart (`k, k + s, k + 2s, …` to the end, then `k + n, k + n + s, …`),
//! still each owned partition once per round. A batch then lands in as many distinct blocks
//! of the broker's partition table and cursor shards as it has messages (with `s` ≥ 256),
//! where round robin packs it into one or two: the checkpoint bench's scattered writers.

#[derive(Debug, Clone)]
pub struct PartitionCycle {
    first: u32,
    step: u32,
    limit: u32,
    next: u32,
    /// Distance between consecutive partitions, a multiple of `step`.
    jump: u32,
    /// Where the current pass over `first + i * jump` started.
    lane: u32,
}

impl PartitionCycle {
    pub fn new(partitions: u32, producers: usize, index: usize) -> Self {
        let partitions = partitions.max(1);
        let producers = u32::try_from(producers.max(1)).unwrap_or(u32::MAX);
        let index = u32::try_from(index).unwrap_or(0) % producers;
        if partitions >= producers {
            Self {
                first: index,
                step: producers,
                limit: partitions,
                next: index,
                jump: producers,
                lane: index,
            }
        } else {
            let first = index % partitions;
            Self {
                first: 0,
                step: 1,
                limit: partitions,
                next: first,
                jump: 1,
                // The pass starts where `next` does, or a spread walk repeats it at once
                // (review s28 ckpt L3: 1, 1, 0, … for 2 partitions, 3 producers).
                lane: first,
            }
        }
    }

    /// Consecutive partitions at least `apart` apart (1: round robin).
    pub fn spread(mut self, apart: u32) -> Self {
        let steps = apart.div_ceil(self.step).max(1);
        self.jump = self.step.saturating_mul(steps);
        self
    }

    pub fn next_partition(&mut self) -> u32 {
        let current = self.next;
        self.next = match self.next.checked_add(self.jump) {
            Some(n) if n < self.limit => n,
            _ => {
                // The next pass starts one owned partition further; after `jump / step`
                // passes every owned partition had its message.
                self.lane = match self.lane.checked_add(self.step) {
                    Some(l) if l < self.limit && l < self.first.saturating_add(self.jump) => l,
                    _ => self.first,
                };
                self.lane
            }
        };
        current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(cycle: &mut PartitionCycle, n: usize) -> Vec<u32> {
        (0..n).map(|_| cycle.next_partition()).collect()
    }

    #[test]
    fn producers_own_disjoint_partitions() {
        let mut a = PartitionCycle::new(5, 2, 0);
        let mut b = PartitionCycle::new(5, 2, 1);
        assert_eq!(take(&mut a, 4), vec![0, 2, 4, 0]);
        assert_eq!(take(&mut b, 3), vec![1, 3, 1]);
    }

    #[test]
    fn a_spread_walk_jumps_and_still_gives_each_partition_one_message_a_round() {
        let mut a = PartitionCycle::new(1000, 2, 1).spread(256);
        let round = take(&mut a, 500);
        assert_eq!(&round[..5], &[1, 257, 513, 769, 3]);
        let mut sorted = round.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..500).map(|i| i * 2 + 1).collect::<Vec<_>>());
        assert_eq!(take(&mut a, 2), vec![1, 257], "the next round starts over");
        let mut plain = PartitionCycle::new(5, 2, 0).spread(1);
        assert_eq!(take(&mut plain, 4), vec![0, 2, 4, 0], "1 is round robin");
        let mut shared = PartitionCycle::new(2, 3, 1).spread(256);
        assert_eq!(
            take(&mut shared, 4),
            vec![1, 0, 1, 0],
            "fewer partitions than producers"
        );
        let mut three = PartitionCycle::new(3, 4, 1).spread(256);
        assert_eq!(take(&mut three, 6), vec![1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn fewer_partitions_than_producers_are_shared() {
        let mut a = PartitionCycle::new(2, 3, 2);
        assert_eq!(take(&mut a, 3), vec![0, 1, 0]);
        let mut one = PartitionCycle::new(1, 4, 3);
        assert_eq!(take(&mut one, 2), vec![0, 0]);
    }
}
