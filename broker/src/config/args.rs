//! The command-line half of the configuration.

use std::path::PathBuf;

// Flags shared by `queen serve` and `queen config print`; flatten it into a
// subcommand with `#[command(flatten)]`. (A `//` comment on purpose: clap
// would show a doc comment as the subcommand's description.)
//
// Each flag has an environment twin, but the twin is read by
// `super::load_from` (not by clap), so that tests can inject the environment
// and so that `queen config print` can tell a flag from a variable. An unset
// flag leaves the lower layers alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ConfigArgs {
    /// Configuration file (TOML) [env: QUEEN_CONFIG]. Without it, ./queen.toml
    /// is read when it exists.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Data directory [env: QUEEN_DATA_DIR] [default: ./queen-data]
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// HTTP listen address, ip:port [env: QUEEN_HTTP_ADDR] [default: 0.0.0.0:6632]
    #[arg(long, value_name = "ADDR")]
    pub http_addr: Option<String>,

    /// Kafka listen address, ip:port [env: QUEEN_KAFKA_ADDR] [default: 0.0.0.0:9092]
    #[arg(long, value_name = "ADDR")]
    pub kafka_addr: Option<String>,

    /// Largest accepted request body in bytes, 1024..=267386880 (255 MiB, below the log record limit)
    /// [env: QUEEN_MAX_BODY_BYTES] [default: 67108864]
    #[arg(long, value_name = "BYTES")]
    pub max_body_bytes: Option<u64>,

    /// Start even if acknowledged data is damaged or missing, dropping it and logging what was
    /// dropped [env: QUEEN_ACCEPT_DATA_LOSS] [default: false]
    #[arg(long)]
    pub accept_data_loss: bool,
}
