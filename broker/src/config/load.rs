//! The layering: defaults < file < environment < flags, each layer a figment
//! provider whose name records where its values came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use super::args::ConfigArgs;
use super::error::ConfigError;
use super::keys::{self, KeySpec, Kind, CONFIG_ENV, ENV_PREFIX, RUST_LOG_ENV};
use super::model::{Config, ValueError};

/// Shortest `jwt_secret` that does not draw a warning (HS256 wants at least
/// as many bytes as its output).
const MIN_SECRET_BYTES: usize = 32;

/// A configuration that passed validation, with the origin of every value.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// `(key, origin)` for every key in listing order; origin is `default`,
    /// `file <path>`, `env QUEEN_X`, `env RUST_LOG` or `flag --x`.
    pub sources: Vec<(&'static str, String)>,
    /// Problems that do not stop the start (unknown `QUEEN_*` variables, a
    /// short secret). [`Loaded::log_warnings`] sends them to `tracing`.
    pub warnings: Vec<String>,
    /// The config file that was read, if any.
    pub file: Option<PathBuf>,
}

impl Loaded {
    /// Where the effective value of `key` came from.
    pub fn source_of(&self, key: &str) -> Option<&str> {
        self.sources
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, s)| s.as_str())
    }

    /// Emits every warning as a `tracing::warn!`. Call it once the subscriber
    /// is installed: the subscriber itself is configured from this `Config`,
    /// so warnings found while loading cannot be logged before.
    pub fn log_warnings(&self) {
        for w in &self.warnings {
            tracing::warn!(target: "queen::config", "{w}");
        }
    }
}

/// One layer: a dictionary of known keys under a provider name that says
/// where it came from (`default`, `file <path>`, `env`, `env RUST_LOG`, `flag`).
struct Layer {
    name: String,
    dict: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut map = Map::new();
        map.insert(Profile::Default, self.dict.clone());
        Ok(map)
    }
}

const DEFAULT_LAYER: &str = "default";
const ENV_LAYER: &str = "env";
const FLAG_LAYER: &str = "flag";

/// The origin of `spec`'s value when it came from the layer named `layer`.
fn origin(layer: &str, spec: &KeySpec) -> String {
    match layer {
        ENV_LAYER => format!("env {}", spec.env),
        FLAG_LAYER => format!("flag {}", spec.flag.unwrap_or("?")),
        other => other.to_owned(),
    }
}

pub(crate) fn load_with(
    args: &ConfigArgs,
    env: impl IntoIterator<Item = (String, String)>,
    implicit_file: &Path,
) -> Result<Loaded, ConfigError> {
    let env: BTreeMap<String, String> = env.into_iter().collect();
    let mut warnings = Vec::new();

    let mut figment = Figment::new().merge(defaults_layer()?);

    let file = config_file(args, &env, implicit_file);
    if let Some(path) = &file {
        figment = figment.merge(file_layer(path)?);
    }
    if let Some(layer) = rust_log_layer(&env) {
        figment = figment.merge(layer);
    }
    figment = figment.merge(env_layer(&env, &mut warnings)?);
    figment = figment.merge(flag_layer(args));

    let config: Config = figment.extract().map_err(|e| from_figment(&e))?;

    let sources: Vec<(&'static str, String)> = keys::KEYS
        .iter()
        .map(|spec| {
            let layer = figment
                .find_metadata(spec.name)
                .map(|m| m.name.to_string())
                .unwrap_or_else(|| DEFAULT_LAYER.to_owned());
            (spec.name, origin(&layer, spec))
        })
        .collect();
    let origin_of = |key: &str| {
        sources
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| DEFAULT_LAYER.to_owned())
    };

    config.validate().map_err(|e| match e {
        ValueError::OutOfRange {
            key,
            value,
            min,
            max,
        } => ConfigError::OutOfRange {
            key: key.to_owned(),
            origin: origin_of(key),
            value,
            min,
            max,
        },
        ValueError::Bad { key, message } => ConfigError::Invalid {
            key: key.to_owned(),
            origin: origin_of(key),
            message,
        },
    })?;

    if let Some(secret) = &config.jwt_secret {
        if secret.expose().len() < MIN_SECRET_BYTES {
            warnings.push(format!(
                "jwt_secret (from {}) is shorter than {MIN_SECRET_BYTES} bytes; use a longer random secret",
                origin_of("jwt_secret")
            ));
        }
    }

    Ok(Loaded {
        config,
        sources,
        warnings,
        file,
    })
}

/// `--config`, else `QUEEN_CONFIG`, else the implicit file if it exists.
fn config_file(
    args: &ConfigArgs,
    env: &BTreeMap<String, String>,
    implicit: &Path,
) -> Option<PathBuf> {
    if let Some(path) = &args.config {
        return Some(path.clone());
    }
    if let Some(path) = env.get(CONFIG_ENV).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    implicit.is_file().then(|| implicit.to_path_buf())
}

fn defaults_layer() -> Result<Layer, ConfigError> {
    let dict = Value::serialize(Config::default())
        .ok()
        .and_then(Value::into_dict)
        .ok_or_else(|| ConfigError::Invalid {
            key: "<defaults>".into(),
            origin: DEFAULT_LAYER.into(),
            message: "built-in defaults do not serialize".into(),
        })?;
    Ok(Layer {
        name: DEFAULT_LAYER.into(),
        dict,
    })
}

fn file_layer(path: &Path) -> Result<Layer, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_path_buf(),
        source,
    })?;
    let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let name = format!("file {}", path.display());
    if let Some(key) = table.keys().find(|k| keys::spec(k).is_none()) {
        return Err(ConfigError::UnknownKey {
            key: key.clone(),
            origin: name,
            hint: keys::closest_key(key),
        });
    }
    let dict = Value::serialize(&table)
        .ok()
        .and_then(Value::into_dict)
        .ok_or_else(|| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: "not a table of keys".into(),
        })?;
    Ok(Layer { name, dict })
}

/// `RUST_LOG` sets `log` when `QUEEN_LOG` does not; it ranks as environment.
fn rust_log_layer(env: &BTreeMap<String, String>) -> Option<Layer> {
    if env.contains_key("QUEEN_LOG") {
        return None;
    }
    let value = env.get(RUST_LOG_ENV)?;
    let mut dict = Dict::new();
    dict.insert("log".into(), Value::from(value.clone()));
    Some(Layer {
        name: format!("env {RUST_LOG_ENV}"),
        dict,
    })
}

fn env_layer(
    env: &BTreeMap<String, String>,
    warnings: &mut Vec<String>,
) -> Result<Layer, ConfigError> {
    let mut dict = Dict::new();
    for (name, raw) in env.iter().filter(|(n, _)| n.starts_with(ENV_PREFIX)) {
        if name == CONFIG_ENV {
            continue;
        }
        match keys::spec_by_env(name) {
            Some(spec) => {
                let value = parse_text(spec, raw, || origin(ENV_LAYER, spec))?;
                dict.insert(spec.name.into(), value);
            }
            None if keys::is_kubernetes_service_link(name, raw) => {}
            None => warnings.push(match keys::closest_env(name) {
                Some(hint) => {
                    format!("unknown environment variable {name} ignored (did you mean {hint}?)")
                }
                None => format!("unknown environment variable {name} ignored"),
            }),
        }
    }
    Ok(Layer {
        name: ENV_LAYER.into(),
        dict,
    })
}

fn flag_layer(args: &ConfigArgs) -> Layer {
    let mut dict = Dict::new();
    if let Some(dir) = &args.data_dir {
        dict.insert(
            "data_dir".into(),
            Value::from(dir.to_string_lossy().into_owned()),
        );
    }
    if let Some(addr) = &args.http_addr {
        dict.insert("http_addr".into(), Value::from(addr.clone()));
    }
    if let Some(addr) = &args.kafka_addr {
        dict.insert("kafka_addr".into(), Value::from(addr.clone()));
    }
    if let Some(n) = args.max_body_bytes {
        dict.insert("max_body_bytes".into(), Value::from(n));
    }
    if args.accept_data_loss {
        dict.insert("accept_data_loss".into(), Value::from(true));
    }
    Layer {
        name: FLAG_LAYER.into(),
        dict,
    }
}

/// Turns the text of a variable into the key's type, so that `"8"` is a
/// number for a size but stays text for a secret.
fn parse_text(
    spec: &KeySpec,
    raw: &str,
    origin: impl Fn() -> String,
) -> Result<Value, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        key: spec.name.into(),
        origin: origin(),
        message,
    };
    match spec.kind {
        Kind::Text | Kind::Secret => Ok(Value::from(raw.to_owned())),
        Kind::Uint { .. } => raw
            .trim()
            .parse::<u64>()
            .map(Value::from)
            .map_err(|_| invalid(format!("expected an unsigned integer, got {raw:?}"))),
        Kind::Bool => match raw.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Value::from(true)),
            "false" | "0" | "no" | "off" => Ok(Value::from(false)),
            _ => Err(invalid(format!("expected true or false, got {raw:?}"))),
        },
    }
}

/// Maps a figment extraction error (wrong type, bad address) to one that
/// names the key and the layer that supplied the value.
fn from_figment(e: &figment::Error) -> ConfigError {
    let key = e.path.join(".");
    let layer = e
        .metadata
        .as_ref()
        .map(|m| m.name.to_string())
        .unwrap_or_else(|| "configuration".into());
    let origin = match keys::spec(&key) {
        Some(spec) => origin(&layer, spec),
        None => layer,
    };
    if let figment::error::Kind::UnknownField(field, _) = &e.kind {
        return ConfigError::UnknownKey {
            key: field.clone(),
            origin,
            hint: keys::closest_key(field),
        };
    }
    let key = if key.is_empty() {
        "<config>".to_owned()
    } else {
        key
    };
    let message = match &e.kind {
        figment::error::Kind::InvalidType(actual, expected) => {
            format!("expected {expected}, found {actual}")
        }
        other => other.to_string(),
    };
    ConfigError::Invalid {
        key,
        origin,
        message,
    }
}
