//! Failed logins: counted per mechanism (`queen_kafka_auth_failures_total`) and logged with
//! the user name the client gave — never the password — at most one line per 10 s (`quiet_log`), so a
//! flood of guesses cannot flood the log; a line says how many failures it stands for.

use std::net::SocketAddr;

use crate::quiet_log::Throttle;

/// Every value of the `mechanism` label ("none": a token came before any mechanism).
pub const MECHANISMS: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "none"];

#[derive(Default)]
pub struct FailureLog {
    throttle: Throttle,
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
        let Some(before) = self.throttle.admit() else {
            return;
        };
        tracing::warn!(
            %peer,
            mechanism,
            user = ?user.unwrap_or(""),
            failures_not_logged = before,
            "kafka SASL login failed: {why}"
        );
    }
}
