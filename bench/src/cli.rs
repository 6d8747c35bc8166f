//! Command-line options and their checks.

use std::time::Duration;

use anyhow::bail;
use clap::Parser;

use crate::queen_http::{Forms, PopForm, PushForm};
use crate::scenario::{Plan, Scenario};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverKind {
    /// The Queen HTTP/1.1 API with JSON bodies.
    QueenHttp,
    /// The Kafka wire protocol (--kafka-addr): produce, fetch, commit offsets.
    Kafka,
}

/// Load tool for QueenMQ: drives a live broker through its real door and reports throughput,
/// latency percentiles and lost messages.
#[derive(Debug, Parser)]
#[command(name = "queen-bench", version)]
pub struct Cli {
    /// What to measure.
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// Broker base URL.
    #[arg(long, env = "BENCH_URL", default_value = "http://127.0.0.1:6632")]
    pub url: String,
    #[arg(long, value_enum, default_value = "queen-http")]
    pub driver: DriverKind,
    /// The broker's Kafka port, for --driver kafka.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub kafka_addr: String,
    /// Body of pushes and transactions: JSON, QPB1, or QPB1 frames (transactions: QTB1).
    #[arg(long, value_enum, default_value = "json")]
    pub push_form: PushForm,
    /// Answer pops ask for: JSON, or QPF1 framed (`frames=true`).
    #[arg(long, value_enum, default_value = "json")]
    pub pop_form: PopForm,
    /// Producer workers, one connection each.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Consumer workers per consumer group (queue mode: in total), one connection each.
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Payload size in bytes (serialised JSON).
    #[arg(long, default_value_t = 256)]
    pub msg_bytes: usize,
    /// Messages per push request and most messages per pop.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Partitions of the queue the producers spread messages over.
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// A producer's consecutive messages go to partitions at least this far apart, each of its
    /// partitions still once a round (1: round robin). 256 or more scatters a batch over as
    /// many of the broker's partition chunks as it has messages.
    #[arg(long, default_value_t = 1)]
    pub partition_spread: u32,
    /// Most partitions one pop may claim [default: --batch, at most --partitions].
    #[arg(long)]
    pub pop_partitions: Option<usize>,
    /// Consumer groups, each must see every message; 0 = queue mode.
    #[arg(long, default_value_t = 0)]
    pub groups: usize,
    /// Length of the measured phase.
    #[arg(long, default_value_t = 10.0)]
    pub duration_secs: f64,
    /// Open loop: target msg/s across all producers. Absent = closed loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Stop producing after this many messages in total (the duration still applies).
    #[arg(long)]
    pub messages: Option<u64>,
    /// consume: messages pushed before the measured phase.
    #[arg(long, default_value_t = 100_000)]
    pub prefill: u64,
    /// txn: pushes per transaction.
    #[arg(long, default_value_t = 10)]
    pub txn_size: usize,
    /// push/txn: consume everything afterwards (unmeasured) to count lost messages.
    #[arg(long)]
    pub verify: bool,
    /// Stop draining after this many seconds without progress.
    #[arg(long, default_value_t = 10.0)]
    pub drain_secs: f64,
    /// Long-poll time of a pop, milliseconds.
    #[arg(long, default_value_t = 1_000)]
    pub pop_wait_ms: u64,
    /// Lease length for pops (leaseSeconds); absent = the queue's default.
    #[arg(long)]
    pub lease_secs: Option<u64>,
    /// Timeout of a push, ack or transaction request, milliseconds.
    #[arg(long, default_value_t = 30_000)]
    pub request_timeout_ms: u64,
    /// Queue name [default: a unique `bench-<scenario>-<id>`].
    #[arg(long)]
    pub queue: Option<String>,
    /// Print the JSON report only.
    #[arg(long)]
    pub json: bool,
    /// soak: length of the run in minutes (it replaces --duration-secs).
    #[arg(long, default_value_t = 10.0)]
    pub soak_minutes: f64,
    /// soak: the broker's process id, whose VmRSS (/proc/<pid>/status) is sampled.
    #[arg(long)]
    pub rss_pid: Option<u32>,
    /// soak: seconds between RSS samples.
    #[arg(long, default_value_t = 5.0)]
    pub rss_every_secs: f64,
    /// queen-http: the `Authorization` header of every request (e.g. `Bearer <jwt>`), so a
    /// run can drive one tenant of a broker that checks tokens.
    #[arg(long, env = "BENCH_AUTHORIZATION", hide_env_values = true)]
    pub authorization: Option<String>,
}

fn positive_secs(name: &str, secs: f64) -> anyhow::Result<Duration> {
    if !secs.is_finite() || secs <= 0.0 {
        bail!("--{name} must be a positive number of seconds, got {secs}");
    }
    Ok(Duration::from_secs_f64(secs))
}

impl Cli {
    pub fn soak_options(&self) -> anyhow::Result<crate::scenario::soak::SoakOptions> {
        Ok(crate::scenario::soak::SoakOptions {
            rss_pid: self.rss_pid,
            rss_every: positive_secs("rss-every-secs", self.rss_every_secs)?,
        })
    }

    pub fn plan(&self) -> anyhow::Result<Plan> {
        if self.producers == 0 {
            bail!("--producers must be at least 1");
        }
        if self.consumers == 0
            && matches!(
                self.scenario,
                Scenario::Consume | Scenario::E2e | Scenario::Soak
            )
        {
            bail!("--consumers must be at least 1 for {:?}", self.scenario);
        }
        if self.batch == 0 || self.txn_size == 0 {
            bail!("--batch and --txn-size must be at least 1");
        }
        if self.partitions == 0 {
            bail!("--partitions must be at least 1");
        }
        if let Some(rate) = self.rate {
            if !rate.is_finite() || rate <= 0.0 {
                bail!("--rate must be a positive number of msg/s, got {rate}");
            }
        }
        if self.scenario == Scenario::Txn && self.push_form == PushForm::Qpb1 {
            bail!("--push-form qpb1 has no transaction form: QTB1 carries frames (qpb1-frames)");
        }
        if self.driver == DriverKind::Kafka {
            if matches!(self.scenario, Scenario::Txn | Scenario::Soak) {
                bail!(
                    "{:?} is unsupported with --driver kafka (push, consume and e2e are)",
                    self.scenario
                );
            }
            if self.push_form != PushForm::Json || self.pop_form != PopForm::Json {
                bail!("--push-form and --pop-form are Queen HTTP bodies: not with --driver kafka");
            }
            // Kafka has no lease, and a consumer reads the partitions it owns: these would
            // be accepted and do nothing.
            if self.lease_secs.is_some() || self.pop_partitions.is_some() {
                bail!(
                    "--lease-secs and --pop-partitions are Queen leases: not with --driver kafka"
                );
            }
        }
        if self.scenario == Scenario::Consume && self.prefill == 0 {
            bail!("--prefill must be at least 1 for consume");
        }
        let pop_partitions = self
            .pop_partitions
            .unwrap_or_else(|| self.batch.min(self.partitions as usize))
            .max(1);
        Ok(Plan {
            scenario: self.scenario,
            producers: self.producers,
            consumers: self.consumers.max(1),
            msg_bytes: self.msg_bytes,
            batch: self.batch,
            partitions: self.partitions,
            spread: self.partition_spread.max(1),
            pop_partitions,
            groups: self.groups,
            duration: if self.scenario == Scenario::Soak {
                positive_secs("soak-minutes", self.soak_minutes * 60.0)?
            } else {
                positive_secs("duration-secs", self.duration_secs)?
            },
            rate: self.rate,
            messages: self.messages,
            prefill: self.prefill,
            txn_size: self.txn_size,
            verify: self.verify,
            drain_idle: positive_secs("drain-secs", self.drain_secs)?,
            pop_wait_ms: self.pop_wait_ms,
            lease_secs: self.lease_secs,
            forms: Forms {
                push: self.push_form,
                pop: self.pop_form,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> anyhow::Result<Cli> {
        Ok(Cli::try_parse_from(
            std::iter::once("queen-bench").chain(args.iter().copied()),
        )?)
    }

    #[test]
    fn defaults_give_a_closed_loop_plan() -> anyhow::Result<()> {
        let plan = parse(&["e2e"])?.plan()?;
        assert_eq!(plan.scenario, Scenario::E2e);
        assert_eq!(plan.msg_bytes, 256);
        assert_eq!(plan.batch, 100);
        assert_eq!(plan.pop_partitions, 1);
        assert_eq!(plan.rate, None);
        assert_eq!(plan.forms, Forms::default());
        let plan = parse(&["e2e", "--push-form", "qpb1-frames", "--pop-form", "qpf1"])?.plan()?;
        assert_eq!(plan.forms.push, PushForm::Qpb1Frames);
        assert_eq!(plan.forms.pop, PopForm::Qpf1);
        Ok(())
    }

    #[test]
    fn pop_partitions_follow_batch_and_partitions() -> anyhow::Result<()> {
        let plan = parse(&["push", "--partitions", "1000", "--batch", "50"])?.plan()?;
        assert_eq!(plan.pop_partitions, 50);
        Ok(())
    }

    #[test]
    fn bad_values_are_refused_with_the_option_name() -> anyhow::Result<()> {
        let err = parse(&["push", "--rate", "0"])?.plan().err();
        assert!(format!("{err:?}").contains("--rate"));
        let err = parse(&["push", "--duration-secs=-1"])?.plan().err();
        assert!(format!("{err:?}").contains("--duration-secs"));
        let err = parse(&["consume", "--consumers", "0"])?.plan().err();
        assert!(format!("{err:?}").contains("--consumers"));
        assert!(parse(&["nope"]).is_err());
        let err = parse(&["txn", "--push-form", "qpb1"])?.plan().err();
        assert!(format!("{err:?}").contains("--push-form"));
        let err = parse(&["txn", "--driver", "kafka"])?.plan().err();
        assert!(format!("{err:?}").contains("--driver kafka"));
        let err = parse(&["push", "--driver", "kafka", "--push-form", "qpb1"])?
            .plan()
            .err();
        assert!(format!("{err:?}").contains("--push-form"));
        for flag in ["--lease-secs", "--pop-partitions"] {
            let err = parse(&["e2e", "--driver", "kafka", flag, "5"])?
                .plan()
                .err();
            assert!(format!("{err:?}").contains(flag), "{flag}");
        }
        assert!(parse(&["e2e", "--driver", "kafka"])?.plan().is_ok());
        let err = parse(&["soak", "--soak-minutes", "0"])?.plan().err();
        assert!(format!("{err:?}").contains("--soak-minutes"));
        let err = parse(&["soak", "--rss-every-secs=-1"])?
            .soak_options()
            .err();
        assert!(format!("{err:?}").contains("--rss-every-secs"));
        Ok(())
    }

    #[test]
    fn soak_defaults_to_ten_minutes() -> anyhow::Result<()> {
        let plan = parse(&["soak"])?.plan()?;
        assert_eq!(plan.duration, Duration::from_secs(600));
        Ok(())
    }
}
