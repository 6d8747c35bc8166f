//! PLAIN password checks run PBKDF2 (up to 65 536 iterations of SHA-512) for any stranger
//! who sends a password: they run on the blocking pool, never on the async workers that
//! serve every connection, and at most `permits` at once. A check waits for a permit at
//! most `WAIT` (within the login deadline); a node that busy closes the connection without
//! an answer: clients retry a closed connection with their reconnect back-off, while an
//! authentication failure is final for Java clients, and a failure would charge the
//! client's address for the node's load.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{Login, Token, Users};

const WAIT: Duration = Duration::from_secs(1);
/// Why a login closed for want of a permit (the debug log's words; the client is told
/// nothing).
pub const BUSY: &str = "the broker is busy checking passwords";

pub struct KdfLimit {
    permits: Arc<Semaphore>,
}

impl KdfLimit {
    pub fn new(permits: usize) -> Self {
        KdfLimit {
            permits: Arc::new(Semaphore::new(permits.clamp(1, 64))),
        }
    }

    /// Permits for half the machine's cores (at least one): strangers' password checks
    /// cannot take every core from the engine, fsyncs and logged-in clients.
    pub fn for_this_machine() -> Self {
        KdfLimit::new(half_of(
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        ))
    }

    /// `login.token(users, bytes)` on the blocking pool under a permit.
    pub async fn token(
        &self,
        login: &mut Login,
        users: Arc<Users>,
        bytes: Bytes,
        login_by: Instant,
    ) -> Token {
        let wait_by = login_by.min(Instant::now() + WAIT);
        let permit =
            match tokio::time::timeout_at(wait_by, self.permits.clone().acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                _ => {
                    login.refuse();
                    metrics::counter!("queen_kafka_auth_busy_total").increment(1);
                    return Token::Busy;
                }
            };
        let mut owned = std::mem::take(login);
        let checked = tokio::task::spawn_blocking(move || {
            let token = owned.token(&users, &bytes);
            drop(permit);
            (owned, token)
        })
        .await;
        match checked {
            Ok((back, token)) => {
                *login = back;
                token
            }
            Err(_) => {
                login.refuse();
                Token::Failed("Authentication failed: the check did not finish".into())
            }
        }
    }
}

fn half_of(cores: usize) -> usize {
    (cores / 2).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_take_at_most_half_the_cores() {
        assert_eq!(
            (half_of(1), half_of(2), half_of(3), half_of(32)),
            (1, 1, 1, 16)
        );
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let limit = KdfLimit::for_this_machine();
        assert_eq!(limit.permits.available_permits(), (cores / 2).max(1));
    }

    #[tokio::test]
    async fn a_busy_limit_gives_up_after_wait_not_at_the_login_deadline() {
        let limit = KdfLimit::new(1);
        let _held = limit.permits.clone().try_acquire_owned().expect("permit");
        let mut login = Login::default();
        let start = Instant::now();
        let token = limit
            .token(
                &mut login,
                Arc::new(Users::default()),
                Bytes::new(),
                start + Duration::from_secs(10),
            )
            .await;
        assert!(matches!(token, Token::Busy));
        // Gave up after WAIT, well before the 10 s deadline (a 1-hour WAIT would fail).
        assert!(start.elapsed() >= WAIT && start.elapsed() < Duration::from_secs(5));
    }
}
