//! When an engine that was busy goes idle, hand the memory its burst freed back to the OS.
//!
//! Why (issue 12, session 30): a burst of creates grows tables by doubling (the name index
//! frees tables of 1, 2, 4 ... 17 MB on its way to 34 MB at a million names, the id tables
//! likewise) and frees request buffers; mimalloc (v3) keeps that memory until it purges, and
//! it purges only when a later allocation visits the arenas, which an idle broker never makes.
//! Session 29 counted ~85-115 B of RSS a partition at a million idle partitions in no
//! structure at all. The checkpoint writer gives back after each write, but a burst that ends
//! between checkpoints stayed resident until the next one, and an idle broker's checkpoint may
//! be skipped altogether.
//!
//! Once per idle stretch, not per tick: `mi_collect(true)` walks the calling thread's pages
//! and every arena, so it is paid when the engine has had no job for [`IDLE_AFTER`], and at
//! most once every [`MIN_GAP`] (a broker busy in bursts a second apart does not walk the
//! arenas every other second).

use std::time::{Duration, Instant};

/// No job for this long counts as idle.
pub const IDLE_AFTER: Duration = Duration::from_secs(1);
/// The least time between two give-backs of one engine.
pub const MIN_GAP: Duration = Duration::from_secs(10);

/// Whether, and when, this engine gives freed memory back.
pub struct IdleGiveBack {
    /// A job ran since the last give-back.
    busy: bool,
    last_job: Instant,
    last_give_back: Option<Instant>,
}

impl IdleGiveBack {
    pub fn new(now: Instant) -> Self {
        IdleGiveBack {
            busy: false,
            last_job: now,
            last_give_back: None,
        }
    }

    /// A cycle ran with `jobs` jobs at `now`.
    pub fn ran(&mut self, jobs: usize, now: Instant) {
        if jobs > 0 {
            self.busy = true;
            self.last_job = now;
        }
    }

    /// True when the caller should give back now (and it is then counted as done).
    pub fn due(&mut self, now: Instant) -> bool {
        let idle = now.saturating_duration_since(self.last_job) >= IDLE_AFTER;
        let spaced = self
            .last_give_back
            .is_none_or(|t| now.saturating_duration_since(t) >= MIN_GAP);
        if !(self.busy && idle && spaced) {
            return false;
        }
        self.busy = false;
        self.last_give_back = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_back_once_per_idle_stretch_after_work_and_never_when_idle_throughout() {
        let t0 = Instant::now();
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        let mut g = IdleGiveBack::new(t0);
        assert!(!g.due(s(5_000)), "never busy: nothing to give back");
        g.ran(0, s(5_100));
        assert!(!g.due(s(7_000)), "a tick with no job is not work");
        g.ran(3, s(7_100));
        assert!(!g.due(s(7_600)), "not idle for a second yet");
        assert!(g.due(s(8_100)), "idle a second after work");
        assert!(!g.due(s(9_000)), "once per idle stretch");
        g.ran(1, s(9_100));
        assert!(!g.due(s(12_000)), "within the gap of the last one");
        assert!(
            g.due(s(18_100)),
            "after the gap, the pending work's give-back"
        );
        assert!(!g.due(s(40_000)));
    }
}
