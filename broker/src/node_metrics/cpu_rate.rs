//! CPU percent between two good `/proc` reads, over the time that really passed between them.
//! A failed read yields nothing and keeps the previous baseline, so the next good read is not
//! charged the process's whole lifetime CPU (review s13 A4); a timer that fired late does not
//! inflate the percentage, since the divisor is the measured elapsed time, not the nominal
//! period (review s13 A10).

use std::time::Duration;

use tokio::time::Instant;

use super::proc_stat::CpuThreads;

#[derive(Default)]
pub struct CpuRate {
    last: Option<(CpuThreads, Instant)>,
}

impl CpuRate {
    /// `(user, system)` in percent × 100 since the last good read, or `None` when this read
    /// failed, when there is no earlier good read, or when no time passed.
    pub fn step(&mut self, now: Option<CpuThreads>, at: Instant) -> Option<(f64, f64)> {
        let now = now?;
        let before = self.last.replace((now, at));
        let (prev, then) = before?;
        let secs = at.saturating_duration_since(then).as_secs_f64();
        if secs <= Duration::from_millis(1).as_secs_f64() {
            return None;
        }
        // µs of CPU per second of wall time / 100: percent × 100.
        let rate = |now: u64, prev: u64| now.saturating_sub(prev) as f64 / (secs * 100.0);
        Some((
            rate(now.user_us, prev.user_us),
            rate(now.system_us, prev.system_us),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(user_s: u64, system_s: u64) -> Option<CpuThreads> {
        Some(CpuThreads {
            user_us: user_s * 1_000_000,
            system_us: system_s * 1_000_000,
            threads: 4,
        })
    }

    #[test]
    fn a_failed_read_is_unknown_and_keeps_the_baseline() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut r = CpuRate::default();
        // A process up for a day: 43 200 s of CPU before the sampler started.
        assert_eq!(r.step(cpu(43_200, 100), t0), None);
        assert_eq!(r.step(cpu(43_205, 100), t0 + s(10)), Some((5_000.0, 0.0)));
        assert_eq!(r.step(None, t0 + s(20)), None);
        // Ten more seconds of CPU over the twenty since the last good read: 50 %, not the
        // lifetime's 432 000 %.
        let (user, system) = r.step(cpu(43_215, 100), t0 + s(30)).unwrap();
        assert_eq!((user, system), (5_000.0, 0.0));
    }

    #[test]
    fn a_first_read_that_fails_gives_nothing_until_two_good_reads() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut r = CpuRate::default();
        assert_eq!(r.step(None, t0), None);
        assert_eq!(r.step(cpu(1_000, 0), t0 + s(10)), None);
        assert_eq!(r.step(cpu(1_001, 1), t0 + s(20)), Some((1_000.0, 1_000.0)));
    }

    #[test]
    fn the_divisor_is_the_time_that_passed_not_the_period() {
        let t0 = Instant::now();
        let mut r = CpuRate::default();
        r.step(cpu(0, 0), t0);
        // A 10 s period whose timer fired 30 s late: 20 s of CPU over 40 s is 50 %.
        let got = r.step(cpu(20, 0), t0 + Duration::from_secs(40));
        assert_eq!(got, Some((5_000.0, 0.0)));
        assert_eq!(r.step(cpu(30, 0), t0 + Duration::from_secs(40)), None);
    }
}
