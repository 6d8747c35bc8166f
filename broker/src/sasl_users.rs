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

/// Where the file does not parse and why, without the offending line: toml's own message
/// quotes it, and it may be the password line.
fn parse_error(text: &str, e: &toml::de::Error) -> String {
    let what = without_values(e.message());
    match e.span() {
        Some(span) => {
            let upto = text.get(..span.start).unwrap_or(text);
            let line = upto.matches('\n').count() + 1;
            let column = upto.len() - upto.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {what}")
        }
        None => what.to_string(),
    }
}

/// serde's "invalid type: string `...`" quotes the value found (a password of the wrong
/// type): what is between backticks goes, unless it names a key (unknown field messages).
fn without_values(message: &str) -> String {
    if !message.starts_with("invalid") {
        return message.to_string();
    }
    message
        .split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 1 { "…" } else { part })
        .collect::<Vec<_>>()
        .join("`")
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
        ] {
            let Err(e) = toml::from_str::<UsersFile>(text) else {
                panic!("{text} parsed");
            };
            let shown = parse_error(text, &e);
            assert!(shown.starts_with("line 3, column "), "{shown}");
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(!shown.contains("4242424242"), "{shown}");
        }
    }
}
