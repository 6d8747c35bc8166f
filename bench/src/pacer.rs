//! Open-loop send schedule: request `i` of a producer is due at `start + offset + i * interval`
//! whatever happened to earlier requests. Latency is measured from the due time, so a broker
//! that stalls is charged for every request that should have gone out meanwhile (no
//! coordinated omission).

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Pacer {
    first: Instant,
    interval: Duration,
    sent: u32,
}

impl Pacer {
    /// Schedule for producer `index` of `producers` sharing `rate` msg/s in batches of
    /// `batch`. Producers are staggered evenly inside one interval. `None` if `rate` is not
    /// a positive finite number.
    pub fn new(
        start: Instant,
        rate: f64,
        producers: usize,
        index: usize,
        batch: usize,
    ) -> Option<Self> {
        if !rate.is_finite() || rate <= 0.0 {
            return None;
        }
        let producers = producers.max(1);
        let per_producer = rate / producers as f64;
        let interval = Duration::from_secs_f64(batch.max(1) as f64 / per_producer);
        let offset = interval.mul_f64(index as f64 / producers as f64);
        Some(Self {
            first: start + offset,
            interval,
            sent: 0,
        })
    }

    /// Due time of the next request; advances the schedule.
    pub fn next_due(&mut self) -> Instant {
        let due = self.first + self.interval.saturating_mul(self.sent);
        self.sent = self.sent.saturating_add(1);
        due
    }

    #[cfg(test)]
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_spreads_the_rate_over_producers() -> anyhow::Result<()> {
        let start = Instant::now();
        // 10 000 msg/s over 2 producers in batches of 100 → 50 batches/s each, 20 ms apart.
        let mut p0 =
            Pacer::new(start, 10_000.0, 2, 0, 100).ok_or_else(|| anyhow::anyhow!("none"))?;
        let mut p1 =
            Pacer::new(start, 10_000.0, 2, 1, 100).ok_or_else(|| anyhow::anyhow!("none"))?;
        assert_eq!(p0.interval(), Duration::from_millis(20));
        assert_eq!(p0.next_due(), start);
        assert_eq!(p0.next_due(), start + Duration::from_millis(20));
        assert_eq!(p1.next_due(), start + Duration::from_millis(10));
        assert_eq!(p1.next_due(), start + Duration::from_millis(30));
        Ok(())
    }

    #[test]
    fn schedule_does_not_slip_when_the_sender_is_late() -> anyhow::Result<()> {
        let start = Instant::now();
        let mut p = Pacer::new(start, 1_000.0, 1, 0, 1).ok_or_else(|| anyhow::anyhow!("none"))?;
        let due: Vec<_> = (0..5).map(|_| p.next_due()).collect();
        assert_eq!(due[4] - due[0], Duration::from_millis(4));
        Ok(())
    }

    #[test]
    fn no_schedule_without_a_rate() {
        assert!(Pacer::new(Instant::now(), 0.0, 1, 0, 1).is_none());
        assert!(Pacer::new(Instant::now(), f64::NAN, 1, 0, 1).is_none());
    }
}
