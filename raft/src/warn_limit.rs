//! At most one warning per source address per period (review s14 F9): a wrong cluster token
//! must be visible in the log, but a misconfigured node reconnects every backoff and a
//! scanner may knock from many ports, so the log line is rate-limited by source IP, and the
//! table of sources is capped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

pub struct WarnLimit {
    every: Duration,
    cap: usize,
    last: Mutex<HashMap<IpAddr, Instant>>,
}

impl WarnLimit {
    /// One warning per source per `every`, tracking at most `cap` sources.
    pub fn new(every: Duration, cap: usize) -> WarnLimit {
        WarnLimit {
            every,
            cap,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a warning about `source` may be logged now (and, if so, notes that it was).
    pub fn allow(&self, source: IpAddr, now: Instant) -> bool {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = last.get(&source) {
            if now.saturating_duration_since(*t) < self.every {
                return false;
            }
        }
        if last.len() >= self.cap && !last.contains_key(&source) {
            // Entries older than the period say nothing any more; if all are fresh the table
            // is reset rather than grown: at worst a source warns twice in one period.
            last.retain(|_, t| now.saturating_duration_since(*t) < self.every);
            if last.len() >= self.cap {
                last.clear();
            }
        }
        last.insert(source, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_source_per_period_and_the_table_stays_capped() {
        let w = WarnLimit::new(Duration::from_secs(60), 2);
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        assert!(w.allow(a, t0));
        assert!(!w.allow(a, t0 + Duration::from_secs(59)));
        assert!(w.allow(b, t0));
        assert!(w.allow(a, t0 + Duration::from_secs(60)));
        assert!(w.allow(c, t0 + Duration::from_secs(61)));
        assert!(w.last.lock().unwrap().len() <= 2);
    }
}
