//! A small HDR-style latency histogram: log-bucketed, values in microseconds.
//!
//! Values below `2 * SUB` are counted exactly. Above that, every power-of-two range
//! `[2^k, 2^(k+1))` is split into `SUB` equal buckets, so a reported value is at most
//! `1 / SUB` (< 0.8 %) above the true one. Percentiles report the upper edge of the bucket
//! (capped at the recorded maximum), never an under-estimate. The whole `u64` range fits in a
//! fixed array, so recording never allocates and two histograms merge by adding counts.

/// log2 of the number of sub-buckets per power of two.
const SUB_BITS: u32 = 7;
/// Sub-buckets per power of two (relative precision `1 / SUB`).
const SUB: u64 = 1 << SUB_BITS;
/// Values below this are counted one per bucket.
const LINEAR: u64 = 2 * SUB;
/// Number of buckets to cover every `u64`.
const BUCKETS: usize = (LINEAR + (63 - SUB_BITS as u64) * SUB) as usize;

#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("total", &self.total)
            .field("min", &self.min)
            .field("max", &self.max)
            .finish()
    }
}

/// Bucket index of a value.
fn index_of(value: u64) -> usize {
    if value < LINEAR {
        return value as usize;
    }
    // `shift` >= 1 here: the top SUB_BITS + 1 bits select a bucket in [SUB, 2 * SUB).
    let shift = 63 - value.leading_zeros() - SUB_BITS;
    let sub = (value >> shift) - SUB;
    (LINEAR + u64::from(shift - 1) * SUB + sub) as usize
}

/// Highest value that lands in bucket `index`.
fn upper_of(index: usize) -> u64 {
    let index = index as u64;
    if index < LINEAR {
        return index;
    }
    let shift = (index - LINEAR) / SUB + 1;
    let sub = (index - LINEAR) % SUB;
    let low = (SUB + sub) << shift;
    low.saturating_add((1u64 << shift) - 1)
}

impl Histogram {
    pub fn new() -> Self {
        Self {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
            min: u64::MAX,
            max: 0,
            sum: 0,
        }
    }

    pub fn record(&mut self, value: u64) {
        self.record_n(value, 1);
    }

    pub fn record_n(&mut self, value: u64, count: u64) {
        if count == 0 {
            return;
        }
        self.counts[index_of(value)] += count;
        self.total += count;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.sum += u128::from(value) * u128::from(count);
    }

    pub fn merge(&mut self, other: &Histogram) {
        if other.total == 0 {
            return;
        }
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.total += other.total;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn min(&self) -> Option<u64> {
        (self.total > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<u64> {
        (self.total > 0).then_some(self.max)
    }

    pub fn mean(&self) -> Option<f64> {
        (self.total > 0).then(|| self.sum as f64 / self.total as f64)
    }

    /// The value at quantile `q` (0.0..=1.0): the smallest recorded bucket such that at least
    /// `ceil(q * count)` values are at or below it, reported as that bucket's upper edge.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0u64;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(upper_of(index).clamp(self.min, self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact() {
        for v in 0..LINEAR {
            assert_eq!(upper_of(index_of(v)), v);
        }
    }

    #[test]
    fn buckets_are_contiguous_and_cover_u64() {
        let mut expected_low = LINEAR;
        for index in LINEAR as usize..BUCKETS {
            assert_eq!(index_of(expected_low), index, "low edge of bucket {index}");
            let upper = upper_of(index);
            assert_eq!(index_of(upper), index, "high edge of bucket {index}");
            if index + 1 < BUCKETS {
                expected_low = upper + 1;
            } else {
                assert_eq!(upper, u64::MAX);
            }
        }
        assert_eq!(index_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn relative_error_is_bounded() {
        let mut v = 1u64;
        while v < u64::MAX / 3 {
            let reported = upper_of(index_of(v));
            assert!(reported >= v);
            let error = (reported - v) as f64 / v as f64;
            assert!(error <= 1.0 / SUB as f64, "value {v} reported {reported}");
            v = v * 3 + 1;
        }
    }

    #[test]
    fn empty_histogram_has_no_quantiles() {
        let h = Histogram::new();
        assert_eq!(h.quantile(0.5), None);
        assert_eq!(h.max(), None);
        assert_eq!(h.mean(), None);
        assert_eq!(h.count(), 0);
    }

    #[test]
    fn quantiles_of_a_uniform_range() {
        let mut h = Histogram::new();
        for v in 1..=100_000u64 {
            h.record(v);
        }
        for (q, exact) in [(0.5, 50_000.0), (0.99, 99_000.0), (0.999, 99_900.0)] {
            let got = h.quantile(q).unwrap_or_default() as f64;
            assert!(got >= exact, "q{q}: {got} < {exact}");
            assert!(
                (got - exact) / exact <= 1.0 / SUB as f64,
                "q{q}: {got} vs {exact}"
            );
        }
        assert_eq!(h.quantile(1.0), Some(100_000));
        assert_eq!(h.quantile(0.0), Some(1));
        assert_eq!(h.min(), Some(1));
        assert_eq!(h.mean(), Some(50_000.5));
    }

    #[test]
    fn a_single_outlier_shows_in_the_tail_only() {
        let mut h = Histogram::new();
        h.record_n(100, 999);
        h.record(1_000_000);
        assert_eq!(h.quantile(0.5), Some(100));
        assert_eq!(h.quantile(0.999), Some(100));
        assert_eq!(h.quantile(0.9999), Some(1_000_000));
        assert_eq!(h.max(), Some(1_000_000));
    }

    #[test]
    fn merge_equals_recording_into_one() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        let mut both = Histogram::new();
        for v in 0..5_000u64 {
            let value = v * v % 70_001;
            if v % 2 == 0 {
                a.record(value);
            } else {
                b.record(value);
            }
            both.record(value);
        }
        a.merge(&b);
        assert_eq!(a.count(), both.count());
        assert_eq!(a.min(), both.min());
        assert_eq!(a.max(), both.max());
        for q in [0.1, 0.5, 0.9, 0.99, 0.999] {
            assert_eq!(a.quantile(q), both.quantile(q));
        }
    }

    #[test]
    fn merging_an_empty_histogram_changes_nothing() {
        let mut a = Histogram::new();
        a.record(42);
        a.merge(&Histogram::new());
        assert_eq!(a.min(), Some(42));
        assert_eq!(a.count(), 1);
    }
}
