//! `queen-bench`: the QueenMQ load tool. See bench/README.md for the method.

mod cli;
mod clock;
mod consumer;
mod cpu_usage;
mod driver;
mod histogram;
mod http_conn;
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
    let endpoint = http_conn::Endpoint::parse(&cli.url)?;
    let connector = match cli.driver {
        DriverKind::QueenHttp => queen_http::QueenHttp::new(
            endpoint.clone(),
            &queue,
            &run_tag,
            Duration::from_millis(cli.request_timeout_ms),
        )?
        .with_forms(plan.forms),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let driver_name = connector.name();
    let cpu_before = cpu_usage::process_cpu_secs();
    let wall = std::time::Instant::now();
    let mut rss_samples = None;
    let measured = if plan.scenario == Scenario::Soak {
        let opts = cli.soak_options()?;
        let lanes = scenario::soak::BATCHES
            .iter()
            .map(|b| {
                queen_http::QueenHttp::new(
                    endpoint.clone(),
                    &format!("{queue}-b{b}"),
                    &run_tag,
                    Duration::from_millis(cli.request_timeout_ms),
                )
                .map(|c| c.with_forms(plan.forms))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (m, samples) = runtime.block_on(scenario::soak::run(lanes, &plan, &opts))?;
        rss_samples = Some(samples);
        m
    } else {
        runtime.block_on(scenario::run(connector, &plan))?
    };
    let mut report = Report::build(&plan, &measured, driver_name, &cli.url, &queue);
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
    if report.payload_mismatches > 0 {
        eprintln!(
            "queen-bench: {} deliveries carried other bytes than were pushed",
            report.payload_mismatches
        );
        return Ok(ExitCode::from(EXIT_LOST));
    }
    if report.lost.is_some_and(|lost| lost > 0) {
        eprintln!(
            "queen-bench: {} accepted messages were never delivered",
            report.lost.unwrap_or(0)
        );
        return Ok(ExitCode::from(EXIT_LOST));
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
