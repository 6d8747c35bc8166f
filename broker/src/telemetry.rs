//! Logs (tracing: human or JSON) and the Prometheus recorder behind the `metrics` facade.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};
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

/// Every other histogram (they are all `*_seconds`): from one fdatasync on a fast disk to the longest long poll.
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
];
/// Histograms named `*_bytes`: 1 KiB to 256 MiB (the largest `commit_max_bytes`), ×4 a step.
const BYTES: &[f64] = &[
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
    268_435_456.0,
];
/// Commands per cycle: powers of two up to 65536 (the largest `commit_max_batch`).
const COMMANDS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
    16384.0, 32768.0, 65536.0,
];
/// The recorder keeps every histogram sample until upkeep folds it into the buckets, so
/// without it memory grows for as long as nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder and its upkeep thread; the returned closure renders the
/// exposition text.
pub fn init_metrics() -> anyhow::Result<Render> {
    let handle = builder()?.install_recorder()?;
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_EVERY);
            upkeep.run_upkeep();
        })?;
    Ok(Arc::new(move || handle.render()))
}

fn builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets(SECONDS)?
        .set_buckets_for_metric(Matcher::Suffix("_bytes".into()), BYTES)?
        .set_buckets_for_metric(
            Matcher::Full("queen_group_commit_commands".into()),
            COMMANDS,
        )?
        .set_buckets_for_metric(
            Matcher::Full("queen_checkpoint_cow_stretch_copies".into()),
            COMMANDS,
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes and counts get buckets of their own scale, not the seconds' (where every size
    /// would land in +Inf).
    #[test]
    fn each_histogram_gets_buckets_of_its_unit() {
        let recorder = builder().unwrap().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            metrics::histogram!("queen_group_commit_bytes").record(3000.0);
            metrics::histogram!("queen_group_commit_commands").record(3.0);
            metrics::histogram!("queen_checkpoint_cow_stretch_copies").record(100.0);
            metrics::histogram!("queen_log_fsync_seconds").record(0.003);
        });
        let text = handle.render();
        for want in [
            r#"queen_group_commit_bytes_bucket{le="4096"} 1"#,
            r#"queen_group_commit_bytes_bucket{le="1024"} 0"#,
            r#"queen_group_commit_commands_bucket{le="4"} 1"#,
            r#"queen_group_commit_commands_bucket{le="2"} 0"#,
            r#"queen_checkpoint_cow_stretch_copies_bucket{le="128"} 1"#,
            r#"queen_checkpoint_cow_stretch_copies_bucket{le="64"} 0"#,
            r#"queen_log_fsync_seconds_bucket{le="0.005"} 1"#,
            r#"queen_log_fsync_seconds_bucket{le="0.002"} 0"#,
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }
}
