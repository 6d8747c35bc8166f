//! The Kafka port's SASL users file (`kafka_sasl_users_file`), read once at start. A file
//! that cannot be read, does not parse, or names a bad user stops the start with the reason.

use std::path::Path;

use anyhow::{anyhow, Context};
use queenmq_kafka_port::sasl::users::UsersFile;
use queenmq_kafka_port::sasl::{self, Users};

pub fn load(path: &Path) -> anyhow::Result<Users> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("kafka_sasl_users_file: cannot read {}", path.display()))?;
    let file: UsersFile = toml::from_str(&text)
        .map_err(|e| anyhow!("kafka_sasl_users_file {}: {e}", path.display()))?;
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
