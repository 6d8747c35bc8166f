//! Why a configuration was refused. Every variant that is about a value names
//! its key and where the value came from.

use std::path::PathBuf;

/// A refused configuration; the process must not start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file given with `--config` / `QUEEN_CONFIG` (or an existing
    /// `./queen.toml`) could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("config file {} is not valid TOML: {message}", path.display())]
    Syntax { path: PathBuf, message: String },
    /// A key this version does not know (misspelled, removed or nested).
    #[error("unknown key `{key}` in {origin}{}", hint.as_deref().map(|h| format!(" (did you mean `{h}`?)")).unwrap_or_default())]
    UnknownKey {
        key: String,
        origin: String,
        hint: Option<&'static str>,
    },
    /// A value of the wrong type or shape (`max_body_bytes = "big"`).
    #[error("invalid value for `{key}` from {origin}: {message}")]
    Invalid {
        key: String,
        origin: String,
        message: String,
    },
    /// A value outside its allowed range.
    #[error("`{key}` = {value} from {origin} is out of range {min}..={max}")]
    OutOfRange {
        key: String,
        origin: String,
        value: u64,
        min: u64,
        max: u64,
    },
}
