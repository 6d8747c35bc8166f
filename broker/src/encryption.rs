//! Encryption at rest of the payloads of queues with `encryptionEnabled`: AES-256-GCM under the
//! broker key (`encryption_key`, QUEEN_ENCRYPTION_KEY), a fresh random 96-bit nonce per message
//! from the OS. The envelope (docs/storage-format.md "Payload envelope"):
//!
//! `u8 version (1) | [u8; 4] key id | [u8; 12] nonce | ciphertext | [u8; 16] tag`
//!
//! The additional authenticated data is the envelope's first 5 bytes followed by the message's
//! 16-byte id, so an envelope moved onto another message does not open.
//!
//! The key id is the first 4 bytes of HMAC-SHA256(key, "queenmq payload key id"): it names the
//! key an envelope was sealed under (for a future rotation, and for a clear error when the
//! broker holds another key) without saying anything about the key itself.

use std::fmt;

use queenmq_engine::seal::{PayloadSeal, SealError};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

pub const ENVELOPE_VERSION: u8 = 1;
const KEY_ID_LEN: usize = 4;
const HEADER_LEN: usize = 1 + KEY_ID_LEN + NONCE_LEN;
const TAG_LEN: usize = 16;
/// What an envelope adds to its payload.
pub const ENVELOPE_OVERHEAD: usize = HEADER_LEN + TAG_LEN;
// The engine's entry bounds count on at most this much.
const _: () = assert!(ENVELOPE_OVERHEAD <= queenmq_engine::seal::MAX_SEAL_OVERHEAD);

/// The 32 key bytes of 64 hex digits; the error never quotes the value.
pub fn parse_key(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return Err(format!(
            "must be 64 hex digits (an AES-256 key), not {} characters",
            hex.len()
        ));
    }
    let mut key = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks_exact(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => key[i] = (h * 16 + l) as u8,
            _ => return Err("must be 64 hex digits (0-9, a-f); it holds another character".into()),
        }
    }
    Ok(key)
}

/// The broker key, ready to seal and open payloads.
pub struct PayloadKey {
    key: LessSafeKey,
    id: [u8; KEY_ID_LEN],
    rng: SystemRandom,
    /// Records the key id in the data directory before the first seal (crate::key_record).
    recorder: Option<crate::key_record::Recorder>,
}

impl fmt::Debug for PayloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PayloadKey(id {})", hex4(&self.id))
    }
}

fn hex4(id: &[u8; KEY_ID_LEN]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

impl PayloadKey {
    pub fn new(key: &[u8; 32]) -> Result<Self, String> {
        let unbound = UnboundKey::new(&AES_256_GCM, key)
            .map_err(|_| "the AES-256-GCM key was refused".to_string())?;
        let tag = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, key),
            b"queenmq payload key id",
        );
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&tag.as_ref()[..KEY_ID_LEN]);
        Ok(PayloadKey {
            key: LessSafeKey::new(unbound),
            id,
            rng: SystemRandom::new(),
            recorder: None,
        })
    }

    /// Checks the key against the id recorded in `dir` (refusing another key) and records it
    /// there at the first seal.
    pub fn bound_to(mut self, dir: &std::path::Path) -> anyhow::Result<Self> {
        let already = crate::key_record::check(dir, Some(&self.id_text()))?;
        self.recorder = Some(crate::key_record::Recorder::new(
            dir,
            self.id_text(),
            already,
        ));
        Ok(self)
    }

    /// The key id envelopes carry, as hex (safe to log).
    pub fn id_text(&self) -> String {
        hex4(&self.id)
    }
}

fn aad(header: &[u8], id: &[u8; 16]) -> [u8; 1 + KEY_ID_LEN + 16] {
    let mut a = [0u8; 1 + KEY_ID_LEN + 16];
    a[..1 + KEY_ID_LEN].copy_from_slice(&header[..1 + KEY_ID_LEN]);
    a[1 + KEY_ID_LEN..].copy_from_slice(id);
    a
}

impl PayloadSeal for PayloadKey {
    fn seal(&self, id: &[u8; 16], plain: &[u8]) -> Result<Vec<u8>, SealError> {
        if let Some(r) = &self.recorder {
            r.ensure().map_err(SealError::Failed)?;
        }
        let mut out = Vec::with_capacity(plain.len() + ENVELOPE_OVERHEAD);
        out.push(ENVELOPE_VERSION);
        out.extend_from_slice(&self.id);
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .map_err(|_| SealError::Failed("the OS random source failed".into()))?;
        out.extend_from_slice(&nonce);
        let aad = aad(&out, id);
        let mut body = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut body,
            )
            .map_err(|_| SealError::Failed("AES-256-GCM refused the payload".into()))?;
        out.extend_from_slice(&body);
        Ok(out)
    }

    fn open(&self, id: &[u8; 16], sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < ENVELOPE_OVERHEAD {
            return Err(SealError::Malformed(format!(
                "an envelope of {} bytes is shorter than its {ENVELOPE_OVERHEAD}-byte frame",
                sealed.len()
            )));
        }
        let (header, body) = sealed.split_at(HEADER_LEN);
        if header[0] != ENVELOPE_VERSION {
            return Err(SealError::Malformed(format!(
                "envelope version {} is not one this broker reads ({ENVELOPE_VERSION})",
                header[0]
            )));
        }
        if header[1..1 + KEY_ID_LEN] != self.id {
            let mut theirs = [0u8; KEY_ID_LEN];
            theirs.copy_from_slice(&header[1..1 + KEY_ID_LEN]);
            return Err(SealError::Malformed(format!(
                "sealed under key id {}, this broker's encryption_key has id {}",
                hex4(&theirs),
                hex4(&self.id)
            )));
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&header[1 + KEY_ID_LEN..]);
        let mut buf = body.to_vec();
        let plain = self
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(header, id)),
                &mut buf,
            )
            .map_err(|_| SealError::Unauthentic)?;
        let n = plain.len();
        buf.truncate(n);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    fn key() -> PayloadKey {
        PayloadKey::new(&parse_key(HEX).unwrap()).unwrap()
    }

    #[test]
    fn keys_parse_only_as_64_hex_digits_and_errors_do_not_quote_them() {
        assert_eq!(parse_key(HEX).unwrap()[31], 0x1f);
        assert_eq!(parse_key(&HEX.to_uppercase()).unwrap()[10], 0x0a);
        for bad in ["", &HEX[..62], &format!("{HEX}00"), &HEX.replace('0', "g")] {
            let e = parse_key(bad).unwrap_err();
            assert!(!e.contains("0102"), "{e}");
        }
    }

    #[test]
    fn an_envelope_opens_to_its_payload_and_holds_no_plaintext() {
        let k = key();
        let plain = b"{\"secret\":\"distinctive-plaintext\"}";
        let a = k.seal(&[7; 16], plain).unwrap();
        let b = k.seal(&[7; 16], plain).unwrap();
        assert_eq!(a.len(), plain.len() + ENVELOPE_OVERHEAD);
        assert_eq!(a[0], ENVELOPE_VERSION);
        assert_ne!(a, b, "nonces must differ");
        assert!(!a.windows(11).any(|w| w == b"distinctive"));
        assert_eq!(k.open(&[7; 16], &a).unwrap(), plain);
        assert_eq!(
            k.open(&[7; 16], &k.seal(&[7; 16], b"").unwrap()).unwrap(),
            b""
        );
    }

    #[test]
    fn a_changed_byte_another_message_or_another_key_never_opens() {
        let k = key();
        let sealed = k.seal(&[7; 16], b"[1,2,3]").unwrap();
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x01;
            assert!(k.open(&[7; 16], &bad).is_err(), "byte {i}");
        }
        assert_eq!(k.open(&[8; 16], &sealed), Err(SealError::Unauthentic));
        assert!(k.open(&[7; 16], &sealed[..ENVELOPE_OVERHEAD - 1]).is_err());
        let other = PayloadKey::new(&[9; 32]).unwrap();
        match other.open(&[7; 16], &sealed) {
            Err(SealError::Malformed(m)) => assert!(m.contains("key id"), "{m}"),
            e => panic!("{e:?}"),
        }
    }
}
