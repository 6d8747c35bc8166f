//! The Kafka port's SASL users file (`kafka_sasl_users_file`), read once at start. A file
//! that cannot be read, does not parse, or names a bad user stops the start with the reason.

use std::path::Path;

use anyhow::{anyhow, Context};
use queenmq_kafka_port::sasl::users::UsersFile;
use queenmq_kafka_port::sasl::{self, Users};

pub fn load(path: &Path) -> anyhow::Result<Users> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("kafka_sasl_users_file: cannot read {}", path.display()))?;
    let file: UsersFile = toml::from_str(&text).map_err(|e| {
        anyhow!(
            "kafka_sasl_users_file {}: {}",
            path.display(),
            parse_error(&text, &e)
        )
    })?;
    let users = Users::build(file, sasl::fill_random)
        .map_err(|e| anyhow!("kafka_sasl_users_file {}: {e}", path.display()))?;
    if users.is_empty() {
        return Err(anyhow!(
            "kafka_sasl_users_file {} names no [[user]]; leave the key unset for no SASL",
            path.display()
        ));
    }
    Ok(users)
}

/// Where the file does not parse and why, in fixed words: toml's own message quotes the
/// offending line, and serde's quotes the value found (`string "..."` for a password
/// written where a table belongs), either of which may be the password.
fn parse_error(text: &str, e: &toml::de::Error) -> String {
    let what = fixed_message(e.message());
    match e.span() {
        Some(span) => {
            let upto = text.get(..span.start).unwrap_or(text);
            let line = upto.matches('\n').count() + 1;
            let column = upto.len() - upto.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what,
    }
}

/// The kind of mistake and, from serde, what was expected there (this program's own type
/// and key names) — never anything the file holds.
fn fixed_message(message: &str) -> String {
    let kind = if message.starts_with("invalid type") || message.starts_with("invalid value") {
        "a value of the wrong type"
    } else if message.starts_with("unknown field") {
        "an unknown key"
    } else if message.starts_with("missing field") {
        "a required key is missing"
    } else if message.starts_with("duplicate") {
        "a key given twice"
    } else {
        return "not valid TOML".to_string();
    };
    // serde puts "expected <our type or keys>" last; whatever comes before it may quote
    // the file.
    match message.rsplit_once("expected ") {
        Some((_, expected)) if !expected.contains('"') && !expected.contains('\'') => {
            format!("{kind}, expected {expected}")
        }
        _ => kind.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parse_error_names_the_line_but_never_quotes_it() {
        for text in [
            "[[user]]\nname = 'a'\npasword = 'hunter2-secret'\n",
            "[[user]]\nname = 'a'\npassword = 'hunter2-secret\n",
            "[[user]]\nname = 'a'\npassword = 4242424242\n",
            "[[user]]\nname = 'a'\nscram_sha_256 = 'hunter2-secret'\n",
            "[[user]]\nname = 'a'\nscram_sha_512 = \"hunter2-secret\"\n",
            "[[user]]\nname = 'a'\nhunter2-secret = 1\n",
            "[[user]]\nname = 'a'\n[user.scram_sha_256]\niterations = 'hunter2'\n",
            "[[user]]\nname = 'a'\npassword = 'x'\npassword = 'hunter2-secret'\n",
            "[[user]]\nname = 'a'\nhunter2-secret\n",
        ] {
            let Err(e) = toml::from_str::<UsersFile>(text) else {
                panic!("{text} parsed");
            };
            let shown = parse_error(text, &e);
            assert!(shown.starts_with("line "), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(!shown.contains("4242424242"), "{shown}");
        }
    }
}
