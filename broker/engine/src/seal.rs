//! Payload encryption at rest, as the planner and the reader see it: a seal turns a payload into
//! the stored envelope and back. The cipher itself (AES-256-GCM, the broker key, the OS random
//! nonces) lives with the process (`broker/src/encryption.rs`), so this core stays free of I/O
//! and its tests can use a stand-in.
//!
//! Sealing happens while a push is planned, before the cycle's entry is proposed: the entry, the
//! log, every replica and the entry cache hold only the envelope, and apply stays a pure function
//! of the entry (the random nonce is decided once, by the planner).

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SealError {
    /// The envelope is not one this broker writes (version, key id or length).
    #[error("{0}")]
    Malformed(String),
    /// Authentication failed: the bytes were changed, or sealed under another key.
    #[error("the payload fails authentication (damaged, or sealed under another key)")]
    Unauthentic,
    /// Sealing failed (the OS random source or the cipher refused).
    #[error("{0}")]
    Failed(String),
}

/// The most bytes a seal may add to a payload: the entry bounds (`limits.rs`) count on it.
pub const MAX_SEAL_OVERHEAD: usize = 64;

pub trait PayloadSeal: Send + Sync {
    /// The envelope of `plain`, bound to the message id `id` (a sealed payload does not open
    /// as another message's); at most [`MAX_SEAL_OVERHEAD`] bytes longer than `plain`.
    fn seal(&self, id: &[u8; 16], plain: &[u8]) -> Result<Vec<u8>, SealError>;
    /// The payload an envelope holds, if it authenticates for message `id`.
    fn open(&self, id: &[u8; 16], sealed: &[u8]) -> Result<Vec<u8>, SealError>;
}

/// A stand-in for tests: "sealed" = `0xE5` + the payload with every byte inverted, so plaintext
/// never appears in an entry and a changed first byte fails to open.
#[cfg(any(test, feature = "test-support"))]
pub struct TestSeal;

#[cfg(any(test, feature = "test-support"))]
impl PayloadSeal for TestSeal {
    fn seal(&self, _id: &[u8; 16], plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let mut out = Vec::with_capacity(plain.len() + 1);
        out.push(0xE5);
        out.extend(plain.iter().map(|b| !b));
        Ok(out)
    }
    fn open(&self, _id: &[u8; 16], sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        match sealed.split_first() {
            Some((0xE5, rest)) => Ok(rest.iter().map(|b| !b).collect()),
            _ => Err(SealError::Unauthentic),
        }
    }
}
