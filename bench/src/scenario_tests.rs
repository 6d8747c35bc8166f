//! Every scenario end to end against the in-memory `MockBroker`: the pipeline from payload
//! to report, and that `lost` catches a broker that drops messages.

use std::time::Duration;

use crate::driver::Connector;
use crate::http_conn::Endpoint;
use crate::kafka::mock_kafka::{KafkaFaults, MockKafka};
use crate::mock_broker::{Faults, MockBroker};
use crate::queen_http::QueenHttp;
use crate::report::Report;
use crate::scenario::{self, Plan, Scenario};

pub fn plan(scenario: Scenario) -> Plan {
    Plan {
        scenario,
        producers: 2,
        consumers: 1,
        msg_bytes: 128,
        batch: 20,
        partitions: 4,
        spread: 1,
        pop_partitions: 4,
        groups: 0,
        duration: Duration::from_millis(300),
        rate: None,
        messages: Some(2_000),
        prefill: 500,
        txn_size: 10,
        verify: true,
        drain_idle: Duration::from_millis(600),
        pop_wait_ms: 100,
        lease_secs: None,
        forms: crate::queen_http::Forms::default(),
    }
}

async fn run(plan: &Plan, faults: Faults) -> anyhow::Result<Report> {
    let url = MockBroker::start(faults).await?;
    let connector = QueenHttp::new(
        Endpoint::parse(&url)?,
        "bench-test",
        "t",
        Duration::from_secs(5),
    )?
    .with_forms(plan.forms);
    let name = connector.name();
    let measured = scenario::run(connector, plan).await?;
    Ok(Report::build(plan, &measured, name, &url, "bench-test"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e2e_with_two_groups_loses_nothing() -> anyhow::Result<()> {
    let plan = Plan {
        groups: 2,
        ..plan(Scenario::E2e)
    };
    let report = run(&plan, Faults::default()).await?;
    let produced = report.produce.as_ref().map_or(0, |t| t.messages);
    assert!(produced > 0, "{report:?}");
    assert_eq!(report.accepted, Some(produced));
    assert_eq!(report.lost, Some(0), "{report:?}");
    assert_eq!(report.lost_per_group, Some(vec![0, 0]));
    assert_eq!(report.duplicates, Some(0));
    assert_eq!(report.drained, Some(true));
    assert_eq!(report.errors, 0, "{:?}", report.error_samples);
    assert!(report.latency_us.contains_key("e2e"));
    assert!(report.latency_us.contains_key("push"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_and_txn_verify_count_every_message() -> anyhow::Result<()> {
    for scenario in [Scenario::Push, Scenario::Txn] {
        let report = run(&plan(scenario), Faults::default()).await?;
        assert_eq!(report.accepted, Some(2_000), "{scenario:?}");
        assert_eq!(report.lost, Some(0), "{scenario:?}");
        let op = if scenario == Scenario::Txn {
            "txn"
        } else {
            "push"
        };
        let requests = report.requests.get(op).map_or(0, |r| r.count);
        assert_eq!(requests, if scenario == Scenario::Txn { 200 } else { 100 });
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_without_verify_reports_no_loss_figure() -> anyhow::Result<()> {
    let plan = Plan {
        verify: false,
        ..plan(Scenario::Push)
    };
    let report = run(&plan, Faults::default()).await?;
    assert_eq!(report.lost, None);
    assert!(report.consume.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_reads_the_prefill() -> anyhow::Result<()> {
    // The measured phase ends as soon as the queue is empty.
    let plan = Plan {
        duration: Duration::from_secs(20),
        ..plan(Scenario::Consume)
    };
    let report = run(&plan, Faults::default()).await?;
    assert_eq!(report.prefilled, Some(500));
    assert_eq!(report.consume.as_ref().map(|t| t.messages), Some(500));
    assert!(report.produce.is_none());
    assert_eq!(report.lost, Some(0));
    assert!(!report.latency_us.contains_key("e2e"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropping_broker_shows_lost_messages() -> anyhow::Result<()> {
    let faults = Faults {
        drop_every: Some(7),
        ..Faults::default()
    };
    let report = run(&plan(Scenario::E2e), faults).await?;
    let accepted = report.accepted.unwrap_or(0);
    assert_eq!(report.lost, Some(accepted / 7), "{report:?}");
    assert_eq!(report.drained, Some(false));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_keeps_to_the_rate() -> anyhow::Result<()> {
    let plan = Plan {
        rate: Some(4_000.0),
        messages: None,
        duration: Duration::from_millis(500),
        verify: false,
        ..plan(Scenario::Push)
    };
    let report = run(&plan, Faults::default()).await?;
    let sent = report.produce.as_ref().map_or(0, |t| t.messages);
    // 4 000 msg/s for 0.5 s in batches of 20 = 100 batches, the last one due just before 0.5 s.
    assert_eq!(sent, 2_000, "{report:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_items_and_acks_are_reported() -> anyhow::Result<()> {
    let faults = Faults {
        refuse_every: Some(2),
        ..Faults::default()
    };
    let report = run(&plan(Scenario::Push), faults).await?;
    assert_eq!(report.push_items_refused, 1_000, "{report:?}");
    assert_eq!(report.accepted, Some(1_000));
    assert!(report.errors >= 1_000);

    let faults = Faults {
        refuse_acks: true,
        ..Faults::default()
    };
    let report = run(&plan(Scenario::Push), faults).await?;
    assert_eq!(report.lost, Some(0));
    assert!(report.ack_items_refused >= 2_000, "{report:?}");
    assert!(report.errors >= 2_000);
    Ok(())
}

/// The mock answers every pop in JSON: a run asked for QPF1 must not count those answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_framed_pop_answered_in_json_is_an_error() -> anyhow::Result<()> {
    let plan = Plan {
        forms: crate::queen_http::Forms {
            pop: crate::queen_http::PopForm::Qpf1,
            ..crate::queen_http::Forms::default()
        },
        ..plan(Scenario::Push)
    };
    let report = run(&plan, Faults::default()).await?;
    assert_eq!(report.lost, Some(2_000), "{report:?}");
    assert!(report.errors > 0);
    assert!(
        report.error_samples.iter().any(|e| e.contains("QPF1")),
        "{:?}",
        report.error_samples
    );
    Ok(())
}

/// Asserts one of the report's error texts contains `needle`.
fn assert_error_text(report: &Report, needle: &str) {
    assert!(
        report.error_samples.iter().any(|e| e.contains(needle)),
        "{needle:?} not in {:?}",
        report.error_samples
    );
}

async fn run_kafka(plan: &Plan, drop_every: Option<usize>) -> anyhow::Result<Report> {
    let faults = KafkaFaults {
        drop_every,
        ..KafkaFaults::default()
    };
    let (addr, _) = MockKafka::start(faults).await?;
    run_kafka_at(&addr, "t", plan).await
}

/// One run of `plan` with run tag `run_tag` against the mock Kafka at `addr`.
async fn run_kafka_at(addr: &str, run_tag: &str, plan: &Plan) -> anyhow::Result<Report> {
    let connector = crate::kafka::Kafka::new(
        addr,
        "bench-test",
        run_tag,
        plan.partitions,
        Duration::from_secs(5),
    )?;
    let name = connector.name();
    let measured = scenario::run(connector, plan).await?;
    Ok(Report::build(plan, &measured, name, addr, "bench-test"))
}

/// The Kafka driver through the same scenarios: two groups each read every message, from
/// partitions split between two consumers (one owns 0 and 2, the other 1 and 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_e2e_push_and_consume_lose_nothing() -> anyhow::Result<()> {
    let two_groups = Plan {
        groups: 2,
        consumers: 2,
        ..plan(Scenario::E2e)
    };
    let report = run_kafka(&two_groups, None).await?;
    let produced = report.produce.as_ref().map_or(0, |t| t.messages);
    assert!(produced > 0, "{report:?}");
    assert_eq!(report.accepted, Some(produced));
    assert_eq!(report.lost, Some(0), "{report:?}");
    assert_eq!(report.duplicates, Some(0));
    assert_eq!(report.malformed, 0);
    assert_eq!(report.errors, 0, "{:?}", report.error_samples);
    assert!(report.latency_us.contains_key("e2e"));

    let report = run_kafka(&plan(Scenario::Push), None).await?;
    assert_eq!((report.accepted, report.lost), (Some(2_000), Some(0)));
    let consume = Plan {
        duration: Duration::from_secs(20),
        ..plan(Scenario::Consume)
    };
    let report = run_kafka(&consume, None).await?;
    assert_eq!(report.consume.as_ref().map(|t| t.messages), Some(500));
    assert_eq!(report.lost, Some(0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_records_a_broker_drops_show_as_lost() -> anyhow::Result<()> {
    let report = run_kafka(&plan(Scenario::Push), Some(7)).await?;
    assert_eq!(report.accepted, Some(2_000));
    assert_eq!(report.lost, Some(2_000 / 7), "{report:?}");
    assert_eq!(report.drained, Some(false));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_transactions_are_refused_not_faked() -> anyhow::Result<()> {
    let report = run_kafka(&plan(Scenario::Txn), None).await?;
    assert_eq!(report.accepted, Some(0));
    assert_error_text(&report, "unsupported with --driver kafka");
    Ok(())
}

/// K1: a reused topic holds another run's records, with valid payloads and keys of the same
/// ids. Groups without commits read them from offset 0; they must be refused (malformed),
/// never counted as this run's deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_records_of_another_run_are_refused() -> anyhow::Result<()> {
    let (addr, _) = MockKafka::start(KafkaFaults::default()).await?;
    let first = Plan {
        verify: false,
        ..plan(Scenario::Push)
    };
    let report = run_kafka_at(&addr, "r1", &first).await?;
    assert_eq!(report.produce.as_ref().map(|t| t.messages), Some(2_000));
    let second = Plan {
        groups: 2,
        ..plan(Scenario::E2e)
    };
    let report = run_kafka_at(&addr, "r2", &second).await?;
    assert!(report.malformed >= 2 * 2_000, "{report:?}");
    assert_eq!(report.unexpected, Some(0), "{report:?}");
    Ok(())
}

/// K6: partition 0 answers every fetch with OFFSET_OUT_OF_RANGE; the consumer's other
/// partitions are still read, so only partition 0's messages are lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_one_failing_partition_does_not_starve_the_others() -> anyhow::Result<()> {
    let faults = KafkaFaults {
        fail_partition: Some((0, 1)),
        ..KafkaFaults::default()
    };
    let (addr, _) = MockKafka::start(faults).await?;
    let report = run_kafka_at(&addr, "t", &plan(Scenario::Push)).await?;
    assert_eq!(report.accepted, Some(2_000), "{report:?}");
    assert_eq!(report.lost, Some(2_000 / 4), "{report:?}");
    assert_error_text(&report, "OFFSET_OUT_OF_RANGE");
    Ok(())
}

/// K2: one Fetch answers the whole prefill (125 records per partition) and `--batch 10` hands
/// it out in 50 pops; only the Fetch requests count as pops. A second consumer owning no
/// partition (5 consumers, 4 partitions) counts none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_pops_count_fetches_not_buffer_drains() -> anyhow::Result<()> {
    let (addr, mock) = MockKafka::start(KafkaFaults::default()).await?;
    let consume = Plan {
        batch: 10,
        consumers: 5,
        duration: Duration::from_secs(20),
        ..plan(Scenario::Consume)
    };
    let report = run_kafka_at(&addr, "t", &consume).await?;
    assert_eq!(report.consume.as_ref().map(|t| t.messages), Some(500));
    let pops = report.requests.get("pop").map_or(0, |r| r.count);
    assert!(pops > 0, "{report:?}");
    assert!(
        pops <= mock.fetches() as u64,
        "{pops} pops counted, {} fetches sent",
        mock.fetches()
    );
    Ok(())
}

/// K7: a partition's produce error reaches the error texts by name, not "no error text".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_refused_produces_carry_the_error_name() -> anyhow::Result<()> {
    let faults = KafkaFaults {
        refuse_partition: Some((1, 10)),
        ..KafkaFaults::default()
    };
    let (addr, _) = MockKafka::start(faults).await?;
    let report = run_kafka_at(&addr, "t", &plan(Scenario::Push)).await?;
    assert_eq!(report.accepted, Some(2_000 - 2_000 / 4), "{report:?}");
    assert_eq!(report.push_items_refused, 2_000 / 4);
    assert_error_text(&report, "produce bench-test/1: MESSAGE_TOO_LARGE");
    Ok(())
}

/// K4: a broker that answers every fetch from offset 0 is reported, not silently filtered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_records_below_the_fetch_offset_are_reported() -> anyhow::Result<()> {
    let faults = KafkaFaults {
        ignore_fetch_offset: true,
        ..KafkaFaults::default()
    };
    let (addr, _) = MockKafka::start(faults).await?;
    let report = run_kafka_at(&addr, "t", &plan(Scenario::Push)).await?;
    assert_error_text(&report, "records of batches below that offset");
    Ok(())
}
