//! Which partition each message of a producer goes to: producer `k` of `n` owns the
//! partitions `k, k + n, k + 2n, …` (all of them when there are fewer partitions than
//! producers) and walks them round robin, one message each, so a run of `partitions`
//! messages touches every partition once.

#[derive(Debug, Clone)]
pub struct PartitionCycle {
    first: u32,
    step: u32,
    limit: u32,
    next: u32,
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
            }
        } else {
            let first = index % partitions;
            Self {
                first: 0,
                step: 1,
                limit: partitions,
                next: first,
            }
        }
    }

    pub fn next_partition(&mut self) -> u32 {
        let current = self.next;
        self.next = match self.next.checked_add(self.step) {
            Some(n) if n < self.limit => n,
            _ => self.first,
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
    fn fewer_partitions_than_producers_are_shared() {
        let mut a = PartitionCycle::new(2, 3, 2);
        assert_eq!(take(&mut a, 3), vec![0, 1, 0]);
        let mut one = PartitionCycle::new(1, 4, 3);
        assert_eq!(take(&mut one, 2), vec![0, 0]);
    }
}
