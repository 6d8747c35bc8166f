//! PLAIN password checks run PBKDF2 (up to 65 536 iterations of SHA-512) for any stranger
//! who sends a password: they run on the blocking pool, never on the async workers that
//! serve every connection, and at most `permits` at once. A check waits for a permit at
//! most `WAIT` (within the login deadline); a node that busy refuses the login as a normal
//! authentication failure, and the client retries.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{Login, Token, Users};

const WAIT: Duration = Duration::from_secs(1);
/// What a login refused for want of a permit is told.
pub const BUSY: &str = "Authentication failed: the broker is busy checking passwords; retry";

pub struct KdfLimit {
    permits: Arc<Semaphore>,
}

impl KdfLimit {
    pub fn new(permits: usize) -> Self {
        KdfLimit {
            permits: Arc::new(Semaphore::new(permits.clamp(1, 64))),
        }
    }

    /// Permits as many as the machine has cores: the checks together take at most that
    /// many threads of the blocking pool.
    pub fn for_this_machine() -> Self {
        KdfLimit::new(std::thread::available_parallelism().map_or(1, |n| n.get()))
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
                    return Token::Failed(BUSY.into());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_busy_limit_refuses_instead_of_queueing_forever() {
        let limit = KdfLimit::new(1);
        let _held = limit.permits.clone().try_acquire_owned().expect("permit");
        let mut login = Login::default();
        let now = Instant::now();
        let token = limit
            .token(&mut login, Arc::new(Users::default()), Bytes::new(), now)
            .await;
        assert!(matches!(token, Token::Failed(why) if why == BUSY));
    }
}
