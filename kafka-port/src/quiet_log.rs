//! At most one log line per `EVERY` for events strangers can cause at will (refused
//! connections, bad frames, failed TLS handshakes, failed logins): each can be repeated
//! thousands of times a second, so a line stands for all the events since the last one.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct Throttle {
    /// When the last line was written, and the events not logged since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    /// `Some(events not logged before this one)` when a line may be written now; `None`
    /// when this event is only counted.
    pub fn admit(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last, unlogged) = &mut *state;
        if last.is_some_and(|t| now.saturating_duration_since(t) < EVERY) {
            *unlogged = unlogged.saturating_add(1);
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(unlogged))
    }
}

/// A throttled warn line about one kind of event.
pub struct QuietLog {
    what: &'static str,
    throttle: Throttle,
}

impl QuietLog {
    pub fn new(what: &'static str) -> Self {
        QuietLog {
            what,
            throttle: Throttle::default(),
        }
    }

    /// Logs this event (at debug always, at warn at most once per `EVERY`).
    pub fn note(&self, peer: SocketAddr, why: &str) {
        tracing::debug!(%peer, "{}: {why}", self.what);
        if let Some(not_logged) = self.throttle.admit() {
            tracing::warn!(%peer, not_logged, "{}: {why}", self.what);
        }
    }
}
