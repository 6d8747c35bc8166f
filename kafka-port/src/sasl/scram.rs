//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the server side: two client
//! messages, two answers. Only what Kafka clients send is accepted: no channel binding, no
//! extensions (Kafka's `tokenauth` is for delegation tokens, which this broker has none of).

use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2};
use subtle::ConstantTimeEq;

/// Iterations a stored credential may name: RFC 7677's floor, and a ceiling that keeps a
/// PLAIN login (which derives the key once) cheap.
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 65_536;
/// Longest client message accepted; real ones are under 300 bytes.
pub const MAX_MESSAGE: usize = 2048;
/// Longest client nonce accepted (clients send 24 to 48 characters).
const MAX_NONCE: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, std::hash::Hash)]
pub enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    pub fn mechanism(self) -> &'static str {
        match self {
            Hash::Sha256 => "SCRAM-SHA-256",
            Hash::Sha512 => "SCRAM-SHA-512",
        }
    }

    fn hmac_alg(self) -> hmac::Algorithm {
        match self {
            Hash::Sha256 => hmac::HMAC_SHA256,
            Hash::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest_alg(self) -> &'static digest::Algorithm {
        match self {
            Hash::Sha256 => &digest::SHA256,
            Hash::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2_alg(self) -> pbkdf2::Algorithm {
        match self {
            Hash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Hash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    pub fn output_len(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha512 => 64,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac_alg(), key), data)
            .as_ref()
            .to_vec()
    }

    fn h(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest_alg(), data).as_ref().to_vec()
    }
}

/// What the server keeps for one user and one hash (RFC 5802 §3): never the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    /// The credential of `password` with `salt`.
    pub fn derive(hash: Hash, password: &[u8], salt: &[u8], iterations: u32) -> Self {
        let salted = salted_password(hash, password, salt, iterations);
        let client_key = hash.hmac(&salted, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            iterations,
            stored_key: hash.h(&client_key),
            server_key: hash.hmac(&salted, b"Server Key"),
        }
    }

    /// Whether `password` is the one this credential was made from (PLAIN logins), in
    /// constant time over the derived key.
    pub fn matches(&self, hash: Hash, password: &[u8]) -> bool {
        let again = ScramCredential::derive(hash, password, &self.salt, self.iterations);
        bool::from(again.stored_key.ct_eq(&self.stored_key))
    }
}

fn salted_password(hash: Hash, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mut out = vec![0u8; hash.output_len()];
    let n = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(hash.pbkdf2_alg(), n, salt, password, &mut out);
    out
}

/// The parts of the client-first message the exchange needs.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst {
    pub user: String,
    /// The GS2 header as sent (`n,,` or `y,,`), echoed back base64 in the final message.
    gs2: String,
    bare: String,
    nonce: String,
}

/// Reads `n,,n=user,r=nonce` (or `y,,`); an authzid, if given, must name the same user.
pub fn client_first(msg: &[u8]) -> Result<ClientFirst, &'static str> {
    if msg.len() > MAX_MESSAGE {
        return Err("SCRAM client-first message too long");
    }
    let text = std::str::from_utf8(msg).map_err(|_| "SCRAM message is not UTF-8")?;
    let (cb, rest) = text.split_once(',').ok_or("malformed GS2 header")?;
    match cb {
        "n" | "y" => {}
        _ if cb.starts_with("p=") => return Err("SCRAM channel binding is not supported"),
        _ => return Err("malformed GS2 header"),
    }
    let (authzid, bare) = rest.split_once(',').ok_or("malformed GS2 header")?;
    let authzid = match authzid {
        "" => None,
        a => Some(unescape(
            a.strip_prefix("a=").ok_or("malformed GS2 authzid")?,
        )?),
    };
    let gs2 = text[..text.len() - bare.len()].to_string();
    let mut parts = bare.split(',');
    let user = match parts.next() {
        Some(n) if n.starts_with("n=") => unescape(&n[2..])?,
        Some(m) if m.starts_with("m=") => {
            return Err("SCRAM mandatory extensions are not supported")
        }
        _ => return Err("SCRAM client-first has no user name"),
    };
    let nonce = parts
        .next()
        .and_then(|r| r.strip_prefix("r="))
        .ok_or("SCRAM client-first has no nonce")?;
    if parts.next().is_some() {
        return Err("SCRAM extensions are not supported");
    }
    check_nonce(nonce)?;
    if user.is_empty() {
        return Err("empty SCRAM user name");
    }
    if authzid.is_some_and(|a| a != user) {
        return Err("SCRAM authzid differs from the user name");
    }
    Ok(ClientFirst {
        user,
        gs2,
        bare: bare.to_string(),
        nonce: nonce.to_string(),
    })
}

/// RFC 5802 `printable`: 0x21-0x7E but ','.
fn check_nonce(nonce: &str) -> Result<(), &'static str> {
    if nonce.is_empty() || nonce.len() > MAX_NONCE {
        return Err("SCRAM nonce empty or too long");
    }
    if !nonce
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
    {
        return Err("SCRAM nonce has characters outside printable ASCII");
    }
    Ok(())
}

/// `saslname`: `=2C` is ',' and `=3D` is '='; any other '=' is malformed.
fn unescape(name: &str) -> Result<String, &'static str> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 3)
            .ok_or("malformed SCRAM user name escape")?;
        match code {
            "2C" => out.push(','),
            "3D" => out.push('='),
            _ => return Err("malformed SCRAM user name escape"),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.contains('\0') {
        return Err("NUL in SCRAM user name");
    }
    Ok(out)
}

/// The exchange after the server-first message: what the final message is checked against.
pub struct ServerFirst {
    pub message: String,
    hash: Hash,
    gs2: String,
    nonce: String,
    client_nonce_len: usize,
    auth_prefix: String,
}

/// The server-first message for `first` with the server's random nonce part.
pub fn server_first(
    hash: Hash,
    first: &ClientFirst,
    cred: &ScramCredential,
    server_nonce: &str,
) -> ServerFirst {
    let nonce = format!("{}{}", first.nonce, server_nonce);
    let message = format!(
        "r={nonce},s={},i={}",
        B64.encode(&cred.salt),
        cred.iterations
    );
    let auth_prefix = format!("{},{message},", first.bare);
    ServerFirst {
        message,
        hash,
        gs2: first.gs2.clone(),
        nonce,
        client_nonce_len: first.nonce.len(),
        auth_prefix,
    }
}

/// Checks `c=...,r=...,p=...`; on success the server-final message (`v=...`).
pub fn client_final(
    state: &ServerFirst,
    cred: &ScramCredential,
    msg: &[u8],
) -> Result<String, &'static str> {
    if msg.len() > MAX_MESSAGE {
        return Err("SCRAM client-final message too long");
    }
    let text = std::str::from_utf8(msg).map_err(|_| "SCRAM message is not UTF-8")?;
    let (without_proof, proof) = text
        .rsplit_once(",p=")
        .ok_or("SCRAM client-final has no proof")?;
    let mut parts = without_proof.split(',');
    let cb = parts
        .next()
        .and_then(|c| c.strip_prefix("c="))
        .ok_or("SCRAM client-final has no channel binding")?;
    let nonce = parts
        .next()
        .and_then(|r| r.strip_prefix("r="))
        .ok_or("SCRAM client-final has no nonce")?;
    if parts.next().is_some() {
        return Err("SCRAM extensions are not supported");
    }
    if B64.decode(cb).ok().as_deref() != Some(state.gs2.as_bytes()) {
        return Err("SCRAM channel binding does not match the GS2 header");
    }
    if !nonce_echoed(state, nonce) {
        return Err("SCRAM nonce does not match");
    }
    let proof = B64.decode(proof).map_err(|_| "SCRAM proof is not base64")?;
    let hash = state.hash;
    if proof.len() != hash.output_len() {
        return Err("SCRAM proof has the wrong length");
    }
    let auth_message = format!("{}{without_proof}", state.auth_prefix);
    let signature = hash.hmac(&cred.stored_key, auth_message.as_bytes());
    let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
    if !bool::from(hash.h(&client_key).ct_eq(&cred.stored_key)) {
        return Err("invalid credentials");
    }
    let server_sig = hash.hmac(&cred.server_key, auth_message.as_bytes());
    Ok(format!("v={}", B64.encode(server_sig)))
}

/// Whether the client-final nonce echoes the server-first one. RFC 5802 asks for the
/// server-first nonce as sent; librdkafka (kcat, confluent-kafka, the Go, .NET and node
/// clients) sends its own nonce in front of it once more, which Kafka's ScramSaslServer
/// accepts (it checks `endsWith`). Exactly these two forms are accepted: the proof covers
/// the message as received, and the server's random part must be there either way.
fn nonce_echoed(state: &ServerFirst, nonce: &str) -> bool {
    if nonce == state.nonce {
        return true;
    }
    let client = &state.nonce[..state.client_nonce_len.min(state.nonce.len())];
    nonce.len() == client.len() + state.nonce.len()
        && nonce.starts_with(client)
        && nonce.ends_with(&state.nonce)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3's example exchange (SCRAM-SHA-256, user "user", password "pencil").
    #[test]
    fn rfc7677_example() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("b64");
        let cred = ScramCredential::derive(Hash::Sha256, b"pencil", &salt, 4096);
        let first = client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO").expect("first");
        assert_eq!(first.user, "user");
        let sf = server_first(
            Hash::Sha256,
            &first,
            &cred,
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        );
        assert_eq!(
            sf.message,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let fin = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert_eq!(
            client_final(&sf, &cred, fin).expect("final"),
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        let mut bad = fin.to_vec();
        let n = bad.len();
        bad[n - 3] = b'A';
        assert!(client_final(&sf, &cred, &bad).is_err());
        let other = ScramCredential::derive(Hash::Sha256, b"pencils", &salt, 4096);
        assert!(client_final(&sf, &other, fin).is_err());
        assert!(cred.matches(Hash::Sha256, b"pencil") && !cred.matches(Hash::Sha256, b"pen"));
    }

    #[test]
    fn hostile_first_messages_are_refused() {
        for bad in [
            &b""[..],
            b"n",
            b"x,,n=u,r=abc",
            b"p=tls-unique,,n=u,r=abc",
            b"n,,n=,r=abc",
            b"n,,n=u",
            b"n,,n=u,r=",
            b"n,,n=u,r=a,b=1",
            b"n,,m=ext,n=u,r=abc",
            b"n,,n=u=2X,r=abc",
            b"n,,n=u=,r=abc",
            b"n,a=other,n=u,r=abc",
            b"n,,n=u\0x,r=abc",
            b"n,,n=u,r=a\x7fb",
            b"n,,n=u,r=\xff",
        ] {
            assert!(
                client_first(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = format!("n,,n=u,r={}", "a".repeat(MAX_NONCE + 1));
        assert!(client_first(long.as_bytes()).is_err());
        let huge = vec![b'a'; MAX_MESSAGE + 1];
        assert!(client_first(&huge).is_err());
        let ok = client_first(b"n,a=u=2Cv,n=u=2Cv,r=abc").expect("escaped names");
        assert_eq!(ok.user, "u,v");
    }
}
