"""Kafka transactions seen from the HTTP side (docs/kafka-transactions.md, "HTTP never
delivers"): a transactional producer commits one transaction and aborts another on one
topic; an HTTP pop gets exactly the committed records (never the aborted ones, never a
marker) and acks them; the native fetch skips the aborted ones and its `nextOffset` moves
past them; a read_committed Kafka consumer reads the committed ones only. All of it again
after a kill -9 and a restart."""

import httpx
import pytest
from queen_api import ack_batch, pop
from queen_broker import free_port
from test_kafka_transactions import create_topic, read_values, send, txn_producer

pytest.importorskip("confluent_kafka")

TOPIC = "txn-http"


def fetch_all(http: httpx.Client, start: int = 0) -> tuple[list[int], list[int]]:
    """Values and offsets the native fetch serves from `start` to the end, following
    `nextOffset`; the walk must move on every call, records or not."""
    values: list[int] = []
    offsets: list[int] = []
    at = start
    for _ in range(50):
        res = http.post("/api/v1/fetch", json={
            "entries": [{"queue": TOPIC, "partition": "0", "offset": at, "maxBytes": 100}]})
        res.raise_for_status()
        e = res.json()["entries"][0]
        assert "error" not in e, e
        for r in e["records"]:
            offsets.append(r["offset"])
            values.append(r["payload"]["v"])
        if e["nextOffset"] >= e["highWatermark"]:
            return values, offsets
        assert e["nextOffset"] > at, f"the fetch did not move past offset {at}: {e}"
        at = e["nextOffset"]
    raise AssertionError("the native fetch never reached its high watermark")


def check_every_reader(b, http: httpx.Client, group: str) -> None:
    # Offsets: 1,2 (0-1), commit marker (2), 3,4 (3-4), abort marker (5), 5 (6), marker (7).
    values, offsets = fetch_all(http)
    assert values == [1, 2, 5], values
    assert offsets == [0, 1, 6], offsets
    # A window of only the aborted records and their marker gives nothing and moves on.
    res = http.post("/api/v1/fetch", json={
        "entries": [{"queue": TOPIC, "partition": "0", "offset": 3}]}).json()["entries"][0]
    assert [r["offset"] for r in res["records"]] == [6]
    assert res["nextOffset"] == 8, res
    assert read_values(b.kafka_bootstrap, TOPIC, "read_committed") == [1, 2, 5]
    popped = pop(http, b.url, TOPIC, group=group, batch=100, timeout_ms=2000, mode="all")
    assert [m["data"]["v"] for m in popped] == [1, 2, 5], popped
    results = ack_batch(http, b.url, popped, group)
    assert all(r.get("success") for r in results), results
    assert pop(http, b.url, TOPIC, group=group, batch=100, timeout_ms=500) == []


def test_http_readers_see_only_committed_records_across_a_restart(broker_factory):
    b = broker_factory("ktxn-http", kafka_port=free_port()).start()
    create_topic(b.kafka_bootstrap, TOPIC)
    p = txn_producer(b.kafka_bootstrap, "t-http")
    p.begin_transaction()
    send(p, TOPIC, [1, 2])
    p.commit_transaction(30)
    p.begin_transaction()
    send(p, TOPIC, [3, 4])
    p.abort_transaction(30)
    p.begin_transaction()
    send(p, TOPIC, [5])
    p.commit_transaction(30)
    p.flush(5)

    with httpx.Client(base_url=b.url, timeout=15.0) as http:
        check_every_reader(b, http, "before")
    b.kill()
    b.start()
    with httpx.Client(base_url=b.url, timeout=15.0) as http:
        # A group that never read pops the same; the group that acked gets nothing more.
        assert pop(http, b.url, TOPIC, group="before", batch=100, timeout_ms=500) == []
        check_every_reader(b, http, "after")
