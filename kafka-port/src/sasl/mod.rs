//! SASL on the Kafka port (docs/kafka-compat.md "Security"): SaslHandshake (17) v0-1 and
//! SaslAuthenticate (36) v0-2 with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512. When users are
//! configured a connection must authenticate before anything but ApiVersions; it then acts
//! as its user (tenant and roles) for every request. A failed login is answered
//! SASL_AUTHENTICATION_FAILED with a message and the connection closed, as Kafka does.
//!
//! After a v0 handshake the tokens travel as bare length-prefixed frames (Kafka's original
//! layout, kept for old clients); after v1, inside SaslAuthenticate requests.

pub mod backoff;
pub mod failures;
pub mod kdf;
pub mod plain;
pub mod scram;
pub mod users;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use ring::rand::SecureRandom;

use crate::connection::{encode, Reply};
use crate::wire::Reader;
use scram::{Hash, ScramCredential, ServerFirst};
pub use users::{User, Users};

pub const HANDSHAKE_VERSIONS: std::ops::RangeInclusive<i16> = 0..=1;
pub const AUTHENTICATE_VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;
/// Largest frame an unauthenticated connection may announce: the SASL messages are small,
/// and a stranger must not make the node set aside `max_request_bytes` for it.
pub const MAX_FRAME_BEFORE_LOGIN: usize = 8 << 10;
/// Frames a connection may send before it has logged in: ApiVersions twice (a client
/// retries at v0 when its first version is refused), SaslHandshake and two tokens (SCRAM's
/// two messages), and two more of margin (a client that retries ApiVersions at another
/// version, as kafka-python does after UNSUPPORTED_VERSION). One more closes it: the login
/// deadline and the 8 KiB frame cap bound the work anyway.
pub const MAX_FRAMES_BEFORE_LOGIN: usize = 7;
pub const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
const ILLEGAL_SASL_STATE: i16 = 34;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// What a failed login is told: the same for an unknown user and a wrong password.
const FAILED: &str = "Authentication failed: invalid credentials";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mechanism {
    Plain,
    Scram(Hash),
}

impl Mechanism {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "SCRAM-SHA-256" => Some(Mechanism::Scram(Hash::Sha256)),
            "SCRAM-SHA-512" => Some(Mechanism::Scram(Hash::Sha512)),
            _ => None,
        }
    }
}

enum Step {
    /// Nothing yet (ApiVersions may come and go).
    Start,
    /// The handshake chose a mechanism; `raw` after a v0 handshake.
    Chosen { mech: Mechanism, raw: bool },
    /// SCRAM sent its first message and waits for the client's proof.
    Scram {
        user: Arc<User>,
        cred: ScramCredential,
        first: ServerFirst,
        raw: bool,
    },
    /// Logged in: any further handshake is refused (no re-authentication).
    Done,
    /// Refused: the connection closes.
    Failed,
}

/// One connection's login.
pub struct Login {
    step: Step,
    /// The mechanism the handshake asked for, kept for the failure counter's label.
    mech: Option<Mechanism>,
    /// The user name the last token named, for the failure log (never the password).
    tried: Option<String>,
}

/// What a token led to.
pub enum Token {
    /// Send these bytes and wait for the next token.
    Continue(Vec<u8>),
    /// Logged in as this user; send these bytes (SCRAM's server-final, or nothing).
    Success(Vec<u8>, Arc<User>),
    /// Refused with this message; the connection closes after the answer.
    Failed(String),
    /// Not checked: the node is busy checking other passwords. The connection closes
    /// without an answer, which clients retry like any network error; it is neither a
    /// failed login nor charged to the client's back-off.
    Busy,
}

impl Default for Login {
    fn default() -> Self {
        Login {
            step: Step::Start,
            mech: None,
            tried: None,
        }
    }
}

impl Login {
    /// Whether the next frame is a bare token (after a v0 handshake), not a request.
    pub fn raw(&self) -> bool {
        matches!(
            self.step,
            Step::Chosen { raw: true, .. } | Step::Scram { raw: true, .. }
        )
    }

    /// Whether the login is done.
    pub fn done(&self) -> bool {
        matches!(self.step, Step::Done)
    }

    /// Whether the next token costs a key derivation (a PLAIN password check: PBKDF2 with
    /// up to 65 536 iterations), which must run off the async workers and under a limit.
    pub fn costly(&self) -> bool {
        matches!(
            self.step,
            Step::Chosen {
                mech: Mechanism::Plain,
                ..
            }
        )
    }

    /// The `mechanism` label of a failure: the one the handshake asked for.
    pub fn mechanism(&self) -> &'static str {
        match self.mech {
            Some(Mechanism::Plain) => "PLAIN",
            Some(Mechanism::Scram(h)) => h.mechanism(),
            None => "none",
        }
    }

    /// The user name the client last named, cut short, for the failure log.
    pub fn tried(&self) -> Option<&str> {
        self.tried.as_deref()
    }

    /// Ends the login as refused without looking at the token (the node is too busy to
    /// check a password now).
    pub fn refuse(&mut self) {
        self.step = Step::Failed;
    }

    /// SaslHandshake: the mechanism asked. Answered with the list either way; a second
    /// handshake, or one after login, is an illegal state and closes.
    pub fn handshake(&mut self, version: i16, mut r: Reader) -> Reply {
        let mechanism = match r.string() {
            Ok(m) => m,
            Err(e) => return Reply::Close(format!("SaslHandshake: {}", e.0)),
        };
        let list = MECHANISMS
            .iter()
            .map(|m| StrBytes::from_static_str(m))
            .collect();
        let resp = SaslHandshakeResponse::default().with_mechanisms(list);
        if !matches!(self.step, Step::Start) {
            self.step = Step::Failed;
            return last(
                encode(&resp.with_error_code(ILLEGAL_SASL_STATE), version),
                "a second SaslHandshake",
            );
        }
        match Mechanism::parse(&mechanism) {
            Some(mech) => {
                self.mech = Some(mech);
                self.step = Step::Chosen {
                    mech,
                    raw: version == 0,
                };
                encode(&resp, version)
            }
            None => {
                self.step = Step::Failed;
                let why = format!("unsupported SASL mechanism {:?}", truncated(&mechanism));
                last(
                    encode(&resp.with_error_code(UNSUPPORTED_SASL_MECHANISM), version),
                    &why,
                )
            }
        }
    }

    /// SaslAuthenticate: the token it carries, or the answer that ends the login when it
    /// comes out of turn or does not parse. [`Login::token`] then checks the token and
    /// [`answer`] makes the response.
    pub fn authenticate(&mut self, version: i16, mut r: Reader) -> Result<Bytes, Reply> {
        let bytes = match r.nullable_bytes() {
            Ok(Some(b)) => b,
            Ok(None) => Bytes::new(),
            Err(e) => return Err(Reply::Close(format!("SaslAuthenticate: {}", e.0))),
        };
        if matches!(self.step, Step::Start | Step::Done | Step::Failed) {
            self.step = Step::Failed;
            let resp = SaslAuthenticateResponse::default()
                .with_error_code(ILLEGAL_SASL_STATE)
                .with_error_message(Some(StrBytes::from_static_str(
                    "SaslAuthenticate without a SaslHandshake, or after the login",
                )));
            return Err(last(encode(&resp, version), "SaslAuthenticate out of turn"));
        }
        Ok(bytes)
    }

    /// The next token of the chosen mechanism.
    pub fn token(&mut self, users: &Users, bytes: &[u8]) -> Token {
        let step = std::mem::replace(&mut self.step, Step::Failed);
        self.tried = named_user(&step, bytes).or(self.tried.take());
        let (next, out) = match step {
            Step::Chosen {
                mech: Mechanism::Plain,
                ..
            } => match plain_login(users, bytes) {
                Ok(user) => (Step::Done, Token::Success(Vec::new(), user)),
                Err(why) => (Step::Failed, Token::Failed(why)),
            },
            Step::Chosen {
                mech: Mechanism::Scram(hash),
                raw,
            } => match scram_first(users, hash, bytes) {
                Ok((user, cred, first)) => {
                    let msg = first.message.clone().into_bytes();
                    (
                        Step::Scram {
                            user,
                            cred,
                            first,
                            raw,
                        },
                        Token::Continue(msg),
                    )
                }
                Err(why) => (Step::Failed, Token::Failed(why)),
            },
            Step::Scram {
                user, cred, first, ..
            } => match scram::client_final(&first, &cred, bytes) {
                Ok(fin) => (Step::Done, Token::Success(fin.into_bytes(), user)),
                Err(why) => (Step::Failed, Token::Failed(failure(why))),
            },
            Step::Start | Step::Done | Step::Failed => (
                Step::Failed,
                Token::Failed("no SASL exchange is in progress".into()),
            ),
        };
        self.step = next;
        out
    }
}

/// SaslAuthenticate's answer to what a token led to; a refusal closes after it.
pub fn answer(version: i16, token: Token) -> (Reply, Option<Arc<User>>) {
    let resp = SaslAuthenticateResponse::default();
    match token {
        Token::Continue(out) => (
            encode(&resp.with_auth_bytes(Bytes::from(out)), version),
            None,
        ),
        Token::Success(out, user) => (
            encode(&resp.with_auth_bytes(Bytes::from(out)), version),
            Some(user),
        ),
        Token::Failed(why) => {
            let resp = resp
                .with_error_code(SASL_AUTHENTICATION_FAILED)
                .with_error_message(Some(StrBytes::from_string(why.clone())));
            (last(encode(&resp, version), &why), None)
        }
        Token::Busy => (Reply::Close(kdf::BUSY.into()), None),
    }
}

/// The user name a token names (PLAIN's, SCRAM's first message), cut to 64 characters.
fn named_user(step: &Step, bytes: &[u8]) -> Option<String> {
    let name = match step {
        Step::Chosen {
            mech: Mechanism::Plain,
            ..
        } => plain::parse(bytes).ok()?.0,
        Step::Chosen {
            mech: Mechanism::Scram(_),
            ..
        } => scram::client_first(bytes).ok()?.user,
        _ => return None,
    };
    Some(truncated(&name))
}

/// A reply after which the connection closes.
fn last(reply: Reply, why: &str) -> Reply {
    match reply {
        Reply::Send { version, body } => Reply::Last {
            version,
            body,
            why: why.to_string(),
        },
        other => other,
    }
}

/// A refusal's text for the client: a wrong proof reads as bad credentials, a malformed
/// message says what was wrong with it.
fn failure(why: &str) -> String {
    if why == "invalid credentials" {
        FAILED.to_string()
    } else {
        format!("Authentication failed: {why}")
    }
}

fn truncated(s: &str) -> String {
    s.chars().take(64).collect()
}

fn plain_login(users: &Users, bytes: &[u8]) -> Result<Arc<User>, String> {
    let (name, password) = plain::parse(bytes).map_err(failure)?;
    let Some(user) = users.get(&name) else {
        // The key derivation most known users' check costs: how long a refusal takes must
        // not tell which names exist.
        if let Some((hash, c)) = users.unknown() {
            std::hint::black_box(c.matches(*hash, password));
        }
        return Err(FAILED.to_string());
    };
    match users::plain_credential(user) {
        Some((hash, c)) if c.matches(hash, password) => Ok(user.clone()),
        _ => Err(FAILED.to_string()),
    }
}

fn scram_first(
    users: &Users,
    hash: Hash,
    bytes: &[u8],
) -> Result<(Arc<User>, ScramCredential, ServerFirst), String> {
    let first = scram::client_first(bytes).map_err(failure)?;
    let user = users.get(&first.user).ok_or_else(|| FAILED.to_string())?;
    // A user without this mechanism's credential is told what an unknown one is (the
    // answer must not tell which names exist); the operator learns why from the log.
    let cred = user
        .credential(hash)
        .ok_or_else(|| {
            tracing::info!(user = %first.user, mechanism = hash.mechanism(), "kafka login: the user has no credential for this mechanism");
            FAILED.to_string()
        })?
        .clone();
    let nonce = server_nonce().ok_or_else(|| "Authentication failed: no randomness".to_string())?;
    let sf = scram::server_first(hash, &first, &cred, &nonce);
    Ok((user.clone(), cred, sf))
}

/// 18 random bytes as base64: printable, no ','.
fn server_nonce() -> Option<String> {
    use base64::Engine;
    let mut b = [0u8; 18];
    ring::rand::SystemRandom::new().fill(&mut b).ok()?;
    Some(base64::engine::general_purpose::STANDARD.encode(b))
}

/// Random bytes for the salts of password-derived credentials.
pub fn fill_random(buf: &mut [u8]) -> Result<(), String> {
    ring::rand::SystemRandom::new()
        .fill(buf)
        .map_err(|_| "the system random source failed".to_string())
}

/// A bare token frame's answer (after a v0 handshake): the bytes alone.
pub fn raw_answer(out: Vec<u8>) -> BytesMut {
    BytesMut::from(&out[..])
}

#[cfg(test)]
mod tests;
