//! One node-wide allowance for every group's window filters (review s26 H3): a group's
//! filters used to be a full `dedup_filter_bytes` each, so four spilling tenant groups could
//! hold half the memory budget for good and the node refused writes. Now a group's filters
//! are drawn from one total when it first spills and given back when it stops.
//!
//! How much a group draws (review s27 B2): at its first spill a group knows its rate (the
//! spilled rows over their time span), so it draws what its window needs at that rate, with
//! headroom, and at most half of what is left (`Want::Rate`): a quiet group that spills once
//! no longer holds half the total for good, so a busy group spilling later is not starved.
//! When the rate cannot be told (one batch, one entry time) it draws half of what is left
//! (`Want::Half`, the session 27 rule). At a start with persisted filters it asks for the
//! size they were made with (`Want::Exact`, up to all that is left), since bits made for
//! other sizes cannot be used. A group whose rate rises draws a second, bigger share for its
//! next generations (`Want::Rate` again, review s28 finding 2) and gives the first back when
//! its last generation leaves the window. However many groups spill and grow, the filters
//! never hold more than the total: no draw passes what is left (review s28 finding 6).

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
        self.draw_want(total, min, Want::Half)
    }

    /// Draws what `want` says (whole 64-byte blocks), at least `min`: None when less than
    /// `min` is left.
    pub fn draw_want(&'static self, total: u64, min: u64, want: Want) -> Option<FilterDraw> {
        let mut taken = 0;
        let blocks = |b: u64| b / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
        self.drawn
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |drawn| {
                let left = total.saturating_sub(drawn);
                let half = blocks(left / 2);
                let want = match want {
                    Want::Half if half >= min => half,
                    Want::Half => blocks(left),
                    // Never past what is left (review s28 finding 6: with less than `min`
                    // left, `half.max(min)` asked for `min` and drew past the total).
                    Want::Rate(w) => blocks(w.max(min).min(half.max(min)).min(left)),
                    Want::Exact(w) => blocks(w.max(min).min(left)),
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

/// How much a group asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Half of what is left (the rate is unknown).
    Half,
    /// What its rate needs: at most half of what is left.
    Rate(u64),
    /// The size its persisted filters were made with: up to all that is left.
    Exact(u64),
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
    fn a_quiet_group_draws_for_its_rate_and_leaves_room_for_a_busy_one() {
        // Review s27 B2: the quiet group spills first.
        static A: FilterAllowance = FilterAllowance::new();
        let total = 512 << 20;
        let quiet = A
            .draw_want(total, 4096, Want::Rate(3 << 20))
            .expect("quiet");
        assert_eq!(
            quiet.bytes(),
            3 << 20,
            "what its rate needs, not half the total"
        );
        let busy = A
            .draw_want(total, 4096, Want::Rate(240 << 20))
            .expect("busy");
        assert_eq!(
            busy.bytes(),
            240 << 20,
            "the later busy group gets what it needs"
        );
        let huge = A
            .draw_want(total, 4096, Want::Rate(1 << 40))
            .expect("capped");
        assert_eq!(
            huge.bytes(),
            (total - (243 << 20)) / 2,
            "at most half of what is left"
        );
        drop((quiet, busy, huge));
        let exact = A
            .draw_want(total, 4096, Want::Exact(300 << 20))
            .expect("exact");
        assert_eq!(
            exact.bytes(),
            300 << 20,
            "a start gets the size its files were made with"
        );
    }

    #[test]
    fn a_rate_draw_never_passes_the_total() {
        // Review s28 finding 6: with less than the ring's minimum left, `Want::Rate` drew the
        // minimum anyway.
        static A: FilterAllowance = FilterAllowance::new();
        let (total, min) = (10_000, 4096);
        let a = A.draw_want(total, min, Want::Rate(6000)).expect("first");
        let b = A.draw_want(total, min, Want::Rate(1)).expect("second");
        assert_eq!(a.bytes() + b.bytes(), 9088);
        assert!(A.draw_want(total, min, Want::Rate(1)).is_none());
        assert!(A.draw_want(total, min, Want::Rate(u64::MAX)).is_none());
        assert_eq!(A.drawn(), 9088);
    }

    #[test]
    fn many_groups_drawing_and_giving_back_never_hold_more_than_the_total() {
        static A: FilterAllowance = FilterAllowance::new();
        let (total, min) = (1u64 << 20, 26 * 64);
        let mut held: Vec<FilterDraw> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let want = match x % 4 {
                0 => Want::Half,
                1 => Want::Rate(x >> 44),
                2 => Want::Exact(x >> 43),
                _ => Want::Rate(u64::MAX),
            };
            if x.is_multiple_of(3) && !held.is_empty() {
                held.swap_remove((x >> 8) as usize % held.len());
            } else if let Some(d) = A.draw_want(total, min, want) {
                assert!(d.bytes() >= min && d.bytes() % 64 == 0);
                held.push(d);
            }
            let sum: u64 = held.iter().map(|d| d.bytes()).sum();
            assert_eq!(A.drawn(), sum);
            assert!(sum <= total, "{sum} drawn of {total}");
        }
        drop(held);
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
