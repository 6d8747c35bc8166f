//! Logs (tracing: human or JSON) and the Prometheus recorder behind the `metrics` facade.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusBuilder;
use tracing_subscriber::EnvFilter;

use crate::engine::bus_prometheus::Render;

/// Installs the global subscriber. `QUEEN_LOG` (else `RUST_LOG`) wins over the config level.
pub fn init_logs(level: &str, json: bool) {
    let filter = std::env::var("QUEEN_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        // openraft narrates every election at info; keep it to warnings unless asked.
        .or_else(|| EnvFilter::try_new(format!("{level},openraft=warn")).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

/// Installs the Prometheus recorder; the returned closure renders the exposition text.
pub fn init_metrics() -> anyhow::Result<Render> {
    let handle = PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
        ])?
        .install_recorder()?;
    Ok(Arc::new(move || handle.render()))
}
