//! The samples kept: a ring allocated whole at start (`metrics_history_samples` of them), so
//! what it holds is fixed by its capacity, never by traffic; the oldest sample goes first.

use std::collections::VecDeque;

use queenmq_protocol::NodeCounts;

/// One sample of the process, taken every `metrics_sample_s`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeSample {
    pub at_us: i64,
    /// CPU time over the interval before the sample, percent × 100. `None` (here and in the
    /// next three) when `/proc` could not be read: unknown, never stored as a zero.
    pub cpu_user: Option<f64>,
    pub cpu_system: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub threads: Option<u64>,
    pub http_connections: u64,
    pub engine_queued: u64,
    pub loop_lag_ms: f64,
    /// Requests served during the interval before the sample.
    pub counts: NodeCounts,
}

pub struct Ring {
    samples: VecDeque<NodeSample>,
    capacity: usize,
}

impl Ring {
    pub fn new(capacity: usize) -> Ring {
        let capacity = capacity.max(1);
        Ring {
            samples: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    pub fn push(&mut self, s: NodeSample) {
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    /// Oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &NodeSample> + Clone {
        self.samples.iter()
    }

    /// Bytes the ring holds whatever its length.
    pub fn bytes(&self) -> usize {
        self.capacity * std::mem::size_of::<NodeSample>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_sample_goes_past_the_capacity() {
        let mut r = Ring::new(3);
        for at_us in 1..=5 {
            r.push(NodeSample {
                at_us,
                ..NodeSample::default()
            });
        }
        let kept: Vec<i64> = r.iter().map(|s| s.at_us).collect();
        assert_eq!(kept, vec![3, 4, 5]);
        assert_eq!(r.bytes(), 3 * std::mem::size_of::<NodeSample>());
    }

    #[test]
    fn a_sample_weighs_what_docs_memory_and_configuration_say() {
        // docs/memory.md and docs/configuration.md quote 200 bytes a sample.
        assert_eq!(std::mem::size_of::<NodeSample>(), 200);
    }
}
