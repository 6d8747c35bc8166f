"""`GET /api/v1/analytics/system-metrics` and `/worker-metrics` (spec native-api §2.1 rows
58-59) against the real binary: the node samples itself every `metrics_sample_s` (1 s here)
into a bounded ring in memory, and the routes answer the buckets of a window in the reference
broker's shapes (docs/api.md "Node metrics").

Waits poll the route until the sample that must hold what was done has been taken, bounded
in count; no assertion depends on how long anything took.
"""

import socket
import time
from datetime import datetime, timedelta, timezone

import httpx
import pytest

import proc_memory
import queen_api

SAMPLE = {"QUEEN_METRICS_SAMPLE_S": "1"}


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def window() -> dict:
    now = datetime.now(timezone.utc)
    return {"from": iso(now - timedelta(minutes=10)), "to": iso(now + timedelta(minutes=1))}


def until(http: httpx.Client, path: str, done, params=None, polls: int = 100) -> dict:
    """The route's answer once `done(answer)` holds (a sample every second: 100 polls of
    0.1 s cover ten samples)."""
    body = {}
    for _ in range(polls):
        res = http.get(path, params=params or window())
        assert res.status_code == 200, res.text
        body = res.json()
        if done(body):
            return body
        time.sleep(0.1)
    raise AssertionError(f"{path} never got there: {body}")


@pytest.fixture
def sampled(broker_factory):
    return broker_factory("node-metrics", env=SAMPLE).start()


def test_system_metrics_show_the_process_as_one_replica(sampled):
    with httpx.Client(base_url=sampled.url, timeout=10.0) as http:
        # A sample taken after this client's connection opened (its first GET): the count
        # must grow past what that GET saw, whatever the broker sampled before it.
        def samples(b):
            return sum(p["sampleCount"] for r in b["replicas"] for p in r["timeSeries"])

        seen = samples(http.get("/api/v1/analytics/system-metrics").json())
        body = until(http, "/api/v1/analytics/system-metrics",
                     lambda b: samples(b) > seen and samples(b) >= 2)
        assert body["replicaCount"] == 1 and body["bucketMinutes"] == 1, body
        replica = body["replicas"][0]
        assert replica["hostname"] == socket.gethostname(), replica["hostname"]
        assert (replica["port"], replica["workerId"]) == (sampled.port, "worker-0"), replica
        last = replica["timeSeries"][-1]["metrics"]
        rss = last["memory"]["rss_bytes"]
        actual = proc_memory.rss(sampled.proc.pid)
        # The sample is of this very process: within a factor of two of what the kernel says now.
        assert actual / 2 < rss["last"] < actual * 2, (rss, actual)
        assert rss["min"] <= rss["avg"] <= rss["max"], rss
        assert last["broker"]["threads"]["last"] >= 2, last["broker"]
        assert last["broker"]["http_connections"]["last"] >= 1, last["broker"]
        assert last["cpu"]["user_us"]["last"] >= 0 and last["cpu"]["system_us"]["last"] >= 0
        # No database here: its leaves are null, never a made-up 0.
        assert last["database"]["pool_active"] == {"avg": None, "min": None, "max": None, "last": None}


def test_worker_metrics_count_the_pushes_pops_and_acks_served(sampled):
    with httpx.Client(base_url=sampled.url, timeout=10.0) as http:
        for n, txns in enumerate((3, 4)):
            items = [queen_api.item("wm", "p", f"wm-{n}-{i}", {"i": i}) for i in range(txns)]
            assert all(queen_api.accepted(r) for r in queen_api.push(http, sampled.url, items))
        taken = queen_api.pop(http, sampled.url, "wm", batch=5, wait=False)
        assert len(taken) == 5
        assert all(r["success"] for r in queen_api.ack_batch(http, sampled.url, taken, None))

        body = until(http, "/api/v1/analytics/worker-metrics",
                     lambda b: b["summary"]["totalAckMessages"] >= 5)
        series = body["timeSeries"]
        total = lambda k: sum(p[k] for p in series)  # noqa: E731
        assert (total("pushRequests"), total("pushMessages")) == (2, 7), series
        assert (total("popRequests"), total("popMessages")) == (1, 5), series
        assert (total("ackRequests"), total("ackMessages"), total("ackSuccess")) == (1, 5, 5), series
        summary = body["summary"]
        assert (summary["totalPushMessages"], summary["totalPopMessages"]) == (7, 5), summary
        assert summary["pendingMessages"] == 2, summary
        stamps = [p["timestamp"] for p in series]
        assert stamps == sorted(stamps, reverse=True), "newest first"
        worker = body["workers"]
        assert [(w["workerId"], w["messagesProcessed"]) for w in worker] == [(0, 12)], worker
        # What this broker has no notion of is null.
        assert series[0]["dbConnections"] is None and series[0]["avgLagMs"] is None


def test_the_window_and_the_replica_filters_narrow_the_answer(sampled):
    with httpx.Client(base_url=sampled.url, timeout=10.0) as http:
        until(http, "/api/v1/analytics/system-metrics", lambda b: b["pointCount"] >= 1)
        past = {"from": "2020-01-01T00:00:00.000Z", "to": "2020-01-01T01:00:00.000Z"}
        before = http.get("/api/v1/analytics/system-metrics", params=past).json()
        assert (before["pointCount"], before["replicas"]) == (0, []), before
        assert before["timeRange"] == {"from": past["from"], "to": past["to"]}, before
        other = http.get("/api/v1/analytics/system-metrics", params={**window(), "hostname": "not-me"})
        assert other.json()["replicaCount"] == 0, other.text
        mine = http.get("/api/v1/analytics/system-metrics",
                        params={**window(), "hostname": socket.gethostname(), "workerId": "worker-0"})
        assert mine.json()["replicaCount"] == 1, mine.text
        assert http.get("/api/v1/analytics/worker-metrics",
                        params={**window(), "workerId": "1"}).json()["timeSeries"] == []
        assert http.get("/api/v1/analytics/worker-metrics",
                        params={**window(), "workerId": "0"}).json()["timeSeries"] != []
        # Seven days bucket by the hour.
        now = datetime.now(timezone.utc)
        week = {"from": iso(now - timedelta(days=7)), "to": iso(now)}
        assert http.get("/api/v1/analytics/system-metrics", params=week).json()["bucketMinutes"] == 60


@pytest.mark.parametrize("path, params", [
    ("system-metrics", {"from": "yesterday"}),
    ("system-metrics", {"from": "2021-01-01T00:00:00.000Z", "to": "2020-01-01T00:00:00.000Z"}),
    ("worker-metrics", {"to": "12:00"}),
    ("worker-metrics", {"workerId": "worker-0"}),
    ("worker-metrics", {"workerId": "-1"}),
    ("system-metrics", {"hostname": "h" * 300}),
])
def test_bad_parameters_are_refused(broker, http, path, params):
    res = http.get(f"/api/v1/analytics/{path}", params=params)
    assert res.status_code == 400, res.text


def test_history_is_lost_on_restart(broker_factory):
    broker = broker_factory("node-history", env=SAMPLE).start()
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        items = [queen_api.item("h", "p", f"h-{i}", {"i": i}) for i in range(2)]
        assert all(queen_api.accepted(r) for r in queen_api.push(http, broker.url, items))
        until(http, "/api/v1/analytics/worker-metrics",
              lambda b: b["summary"]["totalPushMessages"] == 2)
    broker.kill()
    broker.start()
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        body = until(http, "/api/v1/analytics/worker-metrics", lambda b: b["pointCount"] >= 1)
        assert body["summary"]["totalPushMessages"] == 0, body["summary"]
        # The messages themselves are kept: only the node's series start again.
        assert len(queen_api.pop(http, broker.url, "h", batch=5, wait=False)) == 2
