//! How long a request may wait at the bus before it is answered `unavailable`.
//!
//! A disk that hangs (an fsync that never returns: a dead NFS server, a failing device) stops
//! the group's engine inside a proposal. Without these bounds every later request of that
//! tenant waited for it forever: the door's connections and the job queue filled, and
//! clients saw nothing but silence. With them, a request that cannot get into the queue, or
//! whose answer does not come, is answered 503 (retriable) and the door's slot is freed.

use std::time::Duration;

use queenmq_protocol::Command;

#[derive(Debug, Clone, Copy)]
pub struct BusWaits {
    /// Finding (or starting) the tenant's group and getting into its bounded job queue.
    pub enqueue: Duration,
    /// The engine's answer, on top of the wait the command itself asked for (a long poll).
    pub answer: Duration,
}

impl Default for BusWaits {
    fn default() -> Self {
        BusWaits {
            // A healthy engine drains a full queue (16 384 jobs) in well under a second; a
            // queue full for this long is a group that has stopped.
            enqueue: Duration::from_secs(10),
            // Longer than any commit of a healthy disk and any checkpoint pause, shorter than
            // the SDKs' own request timeouts, so the client hears why.
            answer: Duration::from_secs(30),
        }
    }
}

impl BusWaits {
    /// The longest a command's answer may take: a long-poll pop may legitimately take its
    /// own `timeout` before the engine answers.
    pub fn answer_bound(&self, cmd: &Command) -> Duration {
        let asked = match cmd {
            Command::Pop(req) if req.wait => Duration::from_millis(req.timeout_ms),
            _ => Duration::ZERO,
        };
        self.answer.saturating_add(asked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use queenmq_protocol::{PopReq, PopSource, Subscription};

    fn pop(wait: bool, timeout_ms: u64) -> Command {
        Command::Pop(PopReq {
            source: PopSource::Queue("q".into()),
            group: None,
            batch: 1,
            partitions: 1,
            wait,
            timeout_ms,
            auto_ack: false,
            subscription: Subscription::Default,
            lease_seconds: None,
            autopilot: false,
            conflation: false,
            parked_echo: Default::default(),
        })
    }

    #[test]
    fn a_long_poll_gets_its_own_wait_on_top_of_the_answer_bound() {
        let w = BusWaits {
            enqueue: Duration::from_secs(1),
            answer: Duration::from_secs(2),
        };
        assert_eq!(
            w.answer_bound(&pop(true, 300_000)),
            Duration::from_secs(302)
        );
        assert_eq!(w.answer_bound(&pop(false, 300_000)), Duration::from_secs(2));
        assert_eq!(w.answer_bound(&Command::Health), Duration::from_secs(2));
        // No overflow on a value no door lets through (the doors cap waits at 300 s).
        assert!(w.answer_bound(&pop(true, u64::MAX)) > Duration::from_secs(1 << 50));
    }
}
