//! One node-wide allowance for every group's window filters (review s26 H3): a group's
//! filters used to be a full `dedup_filter_bytes` each, so four spilling tenant groups could
//! hold half the memory budget for good and the node refused writes. Now a group's filters
//! are drawn from one total when it first spills and given back when it stops.
//!
//! Why half of what is left: the rate of a group is unknown when it draws (filters cannot
//! grow without a rebuild), so the first group to spill gets half the total, enough for the
//! design load on its own, and every later one half of what remains. However many groups
//! spill, the filters never hold more than the total.

use std::sync::atomic::{AtomicU64, Ordering};

use super::bloom::BLOCK_BYTES;

pub struct FilterAllowance {
    drawn: AtomicU64,
}

/// The process's allowance (one node per process): every group's spill draws from it.
pub static NODE_FILTERS: FilterAllowance = FilterAllowance::new();

impl Default for FilterAllowance {
    fn default() -> Self {
        FilterAllowance::new()
    }
}

impl FilterAllowance {
    pub const fn new() -> FilterAllowance {
        FilterAllowance {
            drawn: AtomicU64::new(0),
        }
    }

    /// Bytes drawn by the groups now.
    pub fn drawn(&self) -> u64 {
        self.drawn.load(Ordering::Relaxed)
    }

    /// Draws half of what is left of `total` (whole 64-byte blocks), at least `min`: None
    /// when less than `min` is left.
    pub fn draw(&'static self, total: u64, min: u64) -> Option<FilterDraw> {
        let mut taken = 0;
        self.drawn
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |drawn| {
                let left = total.saturating_sub(drawn);
                let half = (left / 2) / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
                let want = if half >= min {
                    half
                } else {
                    left / BLOCK_BYTES as u64 * BLOCK_BYTES as u64
                };
                if want < min || want == 0 {
                    return None;
                }
                taken = want;
                Some(drawn + want)
            })
            .ok()?;
        Some(FilterDraw {
            from: self,
            bytes: taken,
        })
    }
}

/// A group's share of the allowance, given back when dropped.
pub struct FilterDraw {
    from: &'static FilterAllowance,
    bytes: u64,
}

impl FilterDraw {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for FilterDraw {
    fn drop(&mut self) {
        let _ = self
            .from
            .drawn
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                Some(d.saturating_sub(self.bytes))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_draw_halves_of_what_is_left_and_give_them_back() {
        static A: FilterAllowance = FilterAllowance::new();
        let total = 1 << 20;
        let a = A.draw(total, 4096).expect("first");
        assert_eq!(a.bytes(), total / 2);
        let b = A.draw(total, 4096).expect("second");
        assert_eq!(b.bytes(), total / 4);
        let draws: Vec<FilterDraw> = (0..6).filter_map(|_| A.draw(total, 4096)).collect();
        assert!(A.drawn() <= total, "never more than the total");
        assert!(A.draw(total, total).is_none());
        drop(draws);
        drop(a);
        assert_eq!(A.drawn(), total / 4);
        drop(b);
        assert_eq!(A.drawn(), 0);
    }

    #[test]
    fn the_last_share_too_small_to_halve_is_taken_whole() {
        static A: FilterAllowance = FilterAllowance::new();
        let d = A.draw(6000, 4096).expect("whole");
        assert_eq!(d.bytes(), 5952);
        assert!(A.draw(6000, 64).is_none());
    }
}
