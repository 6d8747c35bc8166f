//! Configuration of the `queen` process.
//!
//! Four layers, each overriding the one before: built-in defaults <
//! `queen.toml` (`--config` / `QUEEN_CONFIG`, else `./queen.toml` when it
//! exists) < `QUEEN_*` environment variables < command-line flags. The result
//! is one typed [`Config`], checked by [`Config::validate`]. An unknown key in
//! the file, a value of the wrong type or one out of range refuses the start
//! with an error naming the key and where the value came from; an unknown
//! `QUEEN_*` variable only warns, because Kubernetes injects service-link
//! variables (`QUEEN_SERVICE_HOST`, `QUEEN_PORT_6632_TCP`, ...) for a Service
//! named `queen` (those are skipped silently). docs/configuration.md is the
//! operator's view of the same table ([`keys::KEYS`]).

mod args;
mod cluster;
mod error;
mod keys;
mod load;
mod model;
mod render;
#[cfg(test)]
mod tests;

use std::path::Path;

pub use args::ConfigArgs;
#[allow(unused_imports)]
pub use cluster::{Cluster, Timing};
pub use error::ConfigError;
pub use load::Loaded;
// The whole public surface, even where the binary does not name a type.
#[allow(unused_imports)]
pub use model::{Config, Secret, ValueError};
pub use render::render;

/// The file read when neither `--config` nor `QUEEN_CONFIG` names one.
pub const IMPLICIT_FILE: &str = "queen.toml";

/// Loads the configuration from `args` and the process environment.
///
/// Non-UTF-8 variables are read lossily rather than panicking as
/// `std::env::vars` would.
pub fn load(args: &ConfigArgs) -> Result<Loaded, ConfigError> {
    let env = std::env::vars_os().map(|(k, v)| {
        (
            k.to_string_lossy().into_owned(),
            v.to_string_lossy().into_owned(),
        )
    });
    load_from(args, env)
}

/// Loads the configuration from `args` and the given environment (the
/// injectable twin of [`load`], for tests).
pub fn load_from(
    args: &ConfigArgs,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Loaded, ConfigError> {
    load::load_with(args, env, Path::new(IMPLICIT_FILE))
}
