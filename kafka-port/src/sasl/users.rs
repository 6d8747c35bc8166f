//! The SASL users of the Kafka port, from the broker's users file (docs/kafka-compat.md
//! "Security"): each has a tenant and roles, as a JWT's `tenant` and `role(s)` claims give
//! an HTTP caller, and SCRAM credentials — derived at start from a password, or stored.

use std::collections::HashMap;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use queenmq_protocol::Role;
use serde::Deserialize;

use super::scram::{Hash, ScramCredential, MAX_ITERATIONS, MIN_ITERATIONS};

/// Salt bytes of a credential derived from a configured password.
const SALT_BYTES: usize = 16;
/// Longest user name (SCRAM and PLAIN messages are capped well above it).
const MAX_NAME: usize = 255;

/// The users file as written (TOML: `[[user]]` tables).
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsersFile {
    #[serde(default)]
    pub user: Vec<UserSpec>,
}

/// No `Debug`: it holds the password, which must never reach a log line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    pub name: String,
    /// The password; SCRAM credentials for both hashes are derived from it at start.
    pub password: Option<String>,
    /// Stored credentials instead of a password (what `kafka-configs` makes).
    pub scram_sha_256: Option<StoredSpec>,
    pub scram_sha_512: Option<StoredSpec>,
    /// The tenant the user acts in; absent means `default`.
    pub tenant: Option<String>,
    pub role: Option<String>,
    pub roles: Option<Vec<String>>,
}

/// A stored SCRAM credential, its byte strings in base64.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredSpec {
    pub salt: String,
    pub iterations: u32,
    pub stored_key: String,
    pub server_key: String,
}

#[derive(Debug)]
pub struct User {
    pub name: String,
    pub tenant: String,
    pub roles: Vec<Role>,
    pub sha256: Option<ScramCredential>,
    pub sha512: Option<ScramCredential>,
}

impl User {
    pub fn credential(&self, hash: Hash) -> Option<&ScramCredential> {
        match hash {
            Hash::Sha256 => self.sha256.as_ref(),
            Hash::Sha512 => self.sha512.as_ref(),
        }
    }
}

#[derive(Debug, Default)]
pub struct Users {
    by_name: HashMap<String, Arc<User>>,
    /// What a PLAIN login of an unknown name is checked against: the hash and iteration
    /// count most users' PLAIN check costs, so that how long a refusal takes does not tell
    /// which names exist. Its keys match no password.
    unknown: Option<(Hash, ScramCredential)>,
}

impl Users {
    pub fn get(&self, name: &str) -> Option<&Arc<User>> {
        self.by_name.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The credential a PLAIN login of an unknown name pays for (see `unknown`).
    pub fn unknown(&self) -> Option<&(Hash, ScramCredential)> {
        self.unknown.as_ref()
    }

    /// Every tenant a user acts in (each gets its own group coordinator).
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.by_name.values().map(|u| u.tenant.as_str())
    }

    /// Checks every user; the first problem names the user and refuses the whole file.
    /// `fill` gives the random salts of password-derived credentials.
    pub fn build(
        file: UsersFile,
        mut fill: impl FnMut(&mut [u8]) -> Result<(), String>,
    ) -> Result<Users, String> {
        let mut by_name = HashMap::new();
        for spec in file.user {
            let name = spec.name.clone();
            let user = user(spec, &mut fill).map_err(|e| format!("user {name:?}: {e}"))?;
            if by_name.insert(name.clone(), Arc::new(user)).is_some() {
                return Err(format!("user {name:?} is listed twice"));
            }
        }
        let unknown = unknown_credential(&by_name, &mut fill)?;
        Ok(Users { by_name, unknown })
    }
}

/// The credential a PLAIN login checks for `user`: SCRAM-SHA-256's when it has one.
pub fn plain_credential(user: &User) -> Option<(Hash, &ScramCredential)> {
    match (&user.sha256, &user.sha512) {
        (Some(c), _) => Some((Hash::Sha256, c)),
        (None, Some(c)) => Some((Hash::Sha512, c)),
        (None, None) => None,
    }
}

/// A credential with the most common PLAIN cost among `users`, a random salt and keys no
/// password derives (all zero).
fn unknown_credential(
    users: &HashMap<String, Arc<User>>,
    fill: &mut impl FnMut(&mut [u8]) -> Result<(), String>,
) -> Result<Option<(Hash, ScramCredential)>, String> {
    let mut costs: HashMap<(Hash, u32), usize> = HashMap::new();
    for (hash, c) in users.values().filter_map(|u| plain_credential(u)) {
        *costs.entry((hash, c.iterations)).or_default() += 1;
    }
    let Some(((hash, iterations), _)) = costs
        .into_iter()
        .max_by_key(|((h, i), n)| (*n, *h == Hash::Sha256, *i))
    else {
        return Ok(None);
    };
    let mut salt = [0u8; SALT_BYTES];
    fill(&mut salt)?;
    Ok(Some((
        hash,
        ScramCredential {
            salt: salt.to_vec(),
            iterations,
            stored_key: vec![0; hash.output_len()],
            server_key: vec![0; hash.output_len()],
        },
    )))
}

fn user(
    spec: UserSpec,
    fill: &mut impl FnMut(&mut [u8]) -> Result<(), String>,
) -> Result<User, String> {
    if spec.name.is_empty() || spec.name.len() > MAX_NAME {
        return Err(format!("the name must be 1 to {MAX_NAME} bytes"));
    }
    if spec.name.chars().any(|c| c.is_control()) {
        return Err("the name has a control character".into());
    }
    let tenant = spec
        .tenant
        .unwrap_or_else(|| queenmq_protocol::DEFAULT_TENANT.to_string());
    queenmq_protocol::check_tenant_name(&tenant).map_err(|e| format!("tenant: {e}"))?;
    let mut names: Vec<String> = spec.roles.unwrap_or_default();
    names.extend(spec.role);
    let mut roles = Vec::with_capacity(names.len());
    for r in &names {
        // A misspelt role would silently become read-only (Role::parse): refuse it instead.
        if !["admin", "read-write", "write-only", "read-only"].contains(&r.as_str()) {
            return Err(format!(
                "unknown role {r:?} (admin, read-write, write-only or read-only)"
            ));
        }
        roles.push(Role::parse(r));
    }
    if roles.is_empty() {
        roles.push(Role::ReadOnly);
    }
    let stored = |s: Option<StoredSpec>, hash: Hash| s.map(|s| stored(s, hash)).transpose();
    let mut sha256 = stored(spec.scram_sha_256, Hash::Sha256)?;
    let mut sha512 = stored(spec.scram_sha_512, Hash::Sha512)?;
    match spec.password {
        Some(_) if sha256.is_some() || sha512.is_some() => {
            return Err("give a password or stored SCRAM credentials, not both".into())
        }
        Some(p) if p.is_empty() => return Err("the password is empty".into()),
        Some(p) => {
            for (hash, slot) in [(Hash::Sha256, &mut sha256), (Hash::Sha512, &mut sha512)] {
                let mut salt = [0u8; SALT_BYTES];
                fill(&mut salt)?;
                *slot = Some(ScramCredential::derive(
                    hash,
                    p.as_bytes(),
                    &salt,
                    MIN_ITERATIONS,
                ));
            }
        }
        None if sha256.is_none() && sha512.is_none() => {
            return Err("has neither a password nor stored SCRAM credentials".into())
        }
        None => {}
    }
    Ok(User {
        name: spec.name,
        tenant,
        roles,
        sha256,
        sha512,
    })
}

fn stored(s: StoredSpec, hash: Hash) -> Result<ScramCredential, String> {
    let what = hash.mechanism();
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&s.iterations) {
        return Err(format!(
            "{what} iterations {} outside {MIN_ITERATIONS}..={MAX_ITERATIONS}",
            s.iterations
        ));
    }
    let b64 = |field: &str, v: &str| {
        B64.decode(v)
            .map_err(|e| format!("{what} {field} is not base64: {e}"))
    };
    let salt = b64("salt", &s.salt)?;
    let stored_key = b64("stored_key", &s.stored_key)?;
    let server_key = b64("server_key", &s.server_key)?;
    if salt.is_empty() || salt.len() > 128 {
        return Err(format!("{what} salt must be 1 to 128 bytes"));
    }
    if stored_key.len() != hash.output_len() || server_key.len() != hash.output_len() {
        return Err(format!(
            "{what} keys must be {} bytes each",
            hash.output_len()
        ));
    }
    Ok(ScramCredential {
        salt,
        iterations: s.iterations,
        stored_key,
        server_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Users, String> {
        let file: UsersFile = toml::from_str(text).map_err(|e| e.to_string())?;
        Users::build(file, |b| {
            b.fill(7);
            Ok(())
        })
    }

    #[test]
    fn users_file_checks() {
        let u = parse(
            "[[user]]\nname='a'\npassword='pw'\ntenant='t1'\nrole='read-write'\n\
             [[user]]\nname='b'\npassword='pw'\n",
        )
        .expect("valid");
        let a = u.get("a").expect("a");
        assert_eq!(
            (a.tenant.as_str(), a.roles.clone()),
            ("t1", vec![Role::ReadWrite])
        );
        assert!(a
            .sha256
            .as_ref()
            .is_some_and(|c| c.matches(Hash::Sha256, b"pw")));
        assert!(a
            .sha512
            .as_ref()
            .is_some_and(|c| c.matches(Hash::Sha512, b"pw")));
        assert_eq!(
            u.get("b").map(|b| b.roles.clone()),
            Some(vec![Role::ReadOnly])
        );
        for bad in [
            "[[user]]\nname=''\npassword='pw'",
            "[[user]]\nname='a'",
            "[[user]]\nname='a'\npassword=''",
            "[[user]]\nname='a'\npassword='p'\nrole='root'",
            "[[user]]\nname='a'\npassword='p'\ntenant='../x'",
            "[[user]]\nname='a'\npassword='p'\nextra=1",
            "[[user]]\nname='a'\npassword='p'\n[[user]]\nname='a'\npassword='q'",
            "[[user]]\nname='a'\n[user.scram_sha_256]\nsalt='AA=='\niterations=1\nstored_key='AA=='\nserver_key='AA=='",
            // Iteration counts a hostile or mistaken file names: none reaches pbkdf2.
            "[[user]]\nname='a'\n[user.scram_sha_256]\nsalt='AA=='\niterations=0\nstored_key='AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='\nserver_key='AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='",
            "[[user]]\nname='a'\n[user.scram_sha_256]\nsalt='AA=='\niterations=2147483648\nstored_key='AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='\nserver_key='AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='",
            "[[user]]\nname='a'\n[user.scram_sha_256]\nsalt='AA=='\niterations=4294967296\nstored_key='AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='\nserver_key='AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='",
            "[[user]]\nname='a'\n[user.scram_sha_256]\nsalt='AA=='\niterations=-1\nstored_key='AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='\nserver_key='AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='",
            "[[user]]\nname='a'\n[user.scram_sha_256]\nsalt='AA=='\niterations=4096\nstored_key='AA=='\nserver_key='AA=='",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
