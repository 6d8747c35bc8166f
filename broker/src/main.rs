//! `queen`: the QueenMQ broker.

use clap::{Parser, Subcommand};
use queenmq_broker::config::{self, ConfigArgs};

#[derive(Parser)]
#[command(
    name = "queen",
    version,
    about = "QueenMQ: a partitioned message broker"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the broker (the default).
    Serve(#[command(flatten)] ConfigArgs),
    /// Work with the configuration.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Print the effective configuration and where each value came from.
    Print(#[command(flatten)] ConfigArgs),
}

/// mimalloc: the broker allocates and frees small buffers per message on two threads; glibc's
/// malloc spent a fifth of the broker's CPU there in the e2e profile (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let (args, print) = match cli.cmd {
        None => (ConfigArgs::default(), false),
        Some(Cmd::Serve(a)) => (a, false),
        Some(Cmd::Config {
            cmd: ConfigCmd::Print(a),
        }) => (a, true),
    };
    let loaded = match config::load(&args) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("queen: invalid configuration: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if print {
        for w in &loaded.warnings {
            eprintln!("queen: warning: {w}");
        }
        print!("{}", config::render(&loaded));
        return std::process::ExitCode::SUCCESS;
    }
    let cfg = loaded.config.clone();
    // Before the runtime and the engine allocate: pages faulted in from here on follow it.
    let huge_pages = queenmq_broker::memory::huge_pages::apply(cfg.transparent_huge_pages);
    queenmq_broker::telemetry::init_logs(&cfg.log, cfg.log_json);
    loaded.log_warnings();
    match huge_pages {
        Ok(h) => tracing::info!(outcome = ?h, "transparent huge pages"),
        Err(e) => tracing::warn!(
            "cannot turn transparent huge pages off ({e}): the heap may keep 2 MiB pages \
             resident for a few live blocks"
        ),
    }
    let prometheus = match queenmq_broker::telemetry::init_metrics() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("queen: cannot install the metrics recorder: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("queen: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(queenmq_broker::server::serve(cfg, prometheus)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("queen: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
