//! `queen-bench`: the QueenMQ load tool. See bench/README.md for the method.

mod cli;
mod clock;
mod consumer;
mod cpu_usage;
mod driver;
mod histogram;
mod http_conn;
mod kafka;
mod ledger;
#[cfg(test)]
mod mock_broker;
mod pacer;
mod partition_cycle;
mod payload;
mod producer;
mod queen_http;
mod report;
mod rss;
mod scenario;
#[cfg(test)]
mod scenario_tests;
mod stats;
mod table;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::cli::{Cli, DriverKind};
use crate::driver::Connector;
use crate::report::Report;
use crate::scenario::Scenario;

/// Exit status when the run found lost messages or payloads that came back changed.
const EXIT_LOST: u8 = 2;
/// Exit status when requests failed or the broker refused pushed items or acks: the figures
/// then describe a run that did not do what it says.
const EXIT_REFUSED: u8 = 3;

/// Why a finished run failed its checks, with its exit status; `None` when it passed.
fn verdict(report: &Report) -> Option<(u8, String)> {
    if report.payload_mismatches > 0 {
        let n = report.payload_mismatches;
        return Some((
            EXIT_LOST,
            format!("{n} deliveries carried other bytes than were pushed"),
        ));
    }
    if let Some(lost) = report.lost.filter(|&n| n > 0) {
        return Some((
            EXIT_LOST,
            format!("{lost} accepted messages were never delivered"),
        ));
    }
    if report.malformed > 0 {
        let n = report.malformed;
        return Some((
            EXIT_LOST,
            format!("{n} deliveries were not the messages pushed"),
        ));
    }
    if report.errors > 0 {
        return Some((
            EXIT_REFUSED,
            format!(
                "{} errors: {} failed requests, {} pushed items refused, {} acks refused ({})",
                report.errors,
                report.errors - report.push_items_refused - report.ack_items_refused,
                report.push_items_refused,
                report.ack_items_refused,
                report
                    .error_samples
                    .first()
                    .map_or("no error text", String::as_str)
            ),
        ));
    }
    None
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("queen-bench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<ExitCode> {
    let plan = cli.plan()?;
    let run_tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let queue = cli.queue.clone().unwrap_or_else(|| {
        let name = format!("{:?}", plan.scenario).to_lowercase();
        format!("bench-{name}-{run_tag}")
    });
    let mut endpoint = http_conn::Endpoint::parse(&cli.url)?;
    if let Some(value) = &cli.authorization {
        endpoint = endpoint.with_authorization(value)?;
    }
    let timeout = Duration::from_millis(cli.request_timeout_ms);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cpu_before = cpu_usage::process_cpu_secs();
    let wall = std::time::Instant::now();
    let mut rss_samples = None;
    let (measured, driver_name, target) = match (plan.scenario, cli.driver) {
        (Scenario::Soak, _) => {
            let opts = cli.soak_options()?;
            let lanes = scenario::soak::BATCHES
                .iter()
                .map(|b| {
                    queen_http::QueenHttp::new(
                        endpoint.clone(),
                        &format!("{queue}-b{b}"),
                        &run_tag,
                        timeout,
                    )
                    .map(|c| c.with_forms(plan.forms))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let (m, samples) = runtime.block_on(scenario::soak::run(lanes, &plan, &opts))?;
            rss_samples = Some(samples);
            (m, "queen-http", cli.url.clone())
        }
        (_, DriverKind::QueenHttp) => {
            let connector = queen_http::QueenHttp::new(endpoint, &queue, &run_tag, timeout)?
                .with_forms(plan.forms);
            let name = connector.name();
            let m = runtime.block_on(scenario::run(connector, &plan))?;
            (m, name, cli.url.clone())
        }
        (_, DriverKind::Kafka) => {
            let connector =
                kafka::Kafka::new(&cli.kafka_addr, &queue, &run_tag, plan.partitions, timeout)?;
            let name = connector.name();
            let m = runtime.block_on(scenario::run(connector, &plan))?;
            (m, name, format!("kafka://{}", cli.kafka_addr))
        }
    };
    let mut report = Report::build(&plan, &measured, driver_name, &target, &queue);
    report.tool = report::ToolUsage::new(
        wall.elapsed(),
        cpu_before.zip(cpu_usage::process_cpu_secs()),
    );

    if cli.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", table::render(&report));
    }
    if let Some(samples) = &rss_samples {
        // The RSS table goes to stderr so `--json` keeps stdout one JSON document.
        eprintln!("broker RSS per minute (VmRSS):\n{}", rss::render(samples));
    }
    if let Some((code, why)) = verdict(&report) {
        eprintln!("queen-bench: {why}");
        return Ok(ExitCode::from(code));
    }
    let moved = match plan.scenario {
        Scenario::Consume => report.consume.as_ref().map(|t| t.messages),
        _ => report.produce.as_ref().map(|t| t.messages),
    };
    if moved.unwrap_or(0) == 0 {
        let why = report
            .error_samples
            .first()
            .map(String::as_str)
            .unwrap_or("no error text");
        anyhow::bail!("no message went through ({why})");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_items_acks_and_errors_fail_the_run() -> anyhow::Result<()> {
        let measured = scenario::Measured {
            stats: stats::Stats::default(),
            start: std::time::Instant::now(),
            ledger: Some(ledger::LedgerSummary::default()),
            drained: Some(true),
            prefilled: None,
        };
        let plan = scenario_tests::plan(Scenario::Push);
        let mut report = Report::build(&plan, &measured, "queen-http", "http://x", "q");
        assert_eq!(report.lost, Some(0));
        assert_eq!(verdict(&report), None);
        for (refused_pushes, refused_acks, failed) in [(490, 0, 0), (0, 500, 0), (0, 0, 1)] {
            report.push_items_refused = refused_pushes;
            report.ack_items_refused = refused_acks;
            report.errors = refused_pushes + refused_acks + failed;
            assert_eq!(verdict(&report).map(|v| v.0), Some(EXIT_REFUSED));
        }
        report.malformed = 1;
        assert_eq!(verdict(&report).map(|v| v.0), Some(EXIT_LOST));
        report.malformed = 0;
        report.lost = Some(1);
        assert_eq!(verdict(&report).map(|v| v.0), Some(EXIT_LOST));
        Ok(())
    }
}
