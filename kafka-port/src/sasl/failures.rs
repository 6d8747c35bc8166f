//! Failed logins: counted per mechanism (`queen_kafka_auth_failures_total`) and logged with
//! the user name the client gave — never the password — at most one line per `EVERY`, so a
//! flood of guesses cannot flood the log; a line says how many failures it stands for.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Every value of the `mechanism` label ("none": a token came before any mechanism).
pub const MECHANISMS: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "none"];
const EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct FailureLog {
    /// When the last line was written, and the failures not logged since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl FailureLog {
    /// Exports the counter at 0 for every mechanism.
    pub fn export(&self) {
        for m in MECHANISMS {
            metrics::counter!("queen_kafka_auth_failures_total", "mechanism" => m).increment(0);
        }
    }

    pub fn record(&self, peer: SocketAddr, mechanism: &'static str, user: Option<&str>, why: &str) {
        metrics::counter!("queen_kafka_auth_failures_total", "mechanism" => mechanism).increment(1);
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last, unlogged) = &mut *state;
        if last.is_some_and(|t| now.saturating_duration_since(t) < EVERY) {
            *unlogged = unlogged.saturating_add(1);
            return;
        }
        let before = std::mem::take(unlogged);
        *last = Some(now);
        drop(state);
        tracing::warn!(
            %peer,
            mechanism,
            user = ?user.unwrap_or(""),
            failures_not_logged = before,
            "kafka SASL login failed: {why}"
        );
    }
}
