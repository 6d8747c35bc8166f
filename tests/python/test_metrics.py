"""GET /metrics/prometheus against a real broker: after a push, pop and ack round with one
consumer group, every series docs/metrics.md lists is in the scrape (and nothing it does not
list), depth and lag equal what was pushed but not acked, and request counts match the calls."""

import re
import time
from pathlib import Path

import httpx

from queen_api import ack_batch, item, pop, push

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
QUEUE = "metrics-q"
GROUP = "metrics-g"
PARTITIONS = ("p0", "p1", "p2")
PUSH_CALLS = 6
PER_CALL = 10
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def documented_series() -> set[str]:
    names = set(re.findall(r"^\| `(queen_[a-z_]+)` \|", DOCS.read_text(), re.M))
    assert len(names) >= 30, f"docs/metrics.md lists only {sorted(names)}"
    return names


class Scrape:
    """The families (`# TYPE` lines) and samples of one exposition."""

    def __init__(self, text: str):
        self.text = text
        self.families: dict[str, str] = {}
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.families[name] = kind
            elif line and not line.startswith("#"):
                m = SAMPLE.match(line)
                assert m, f"not an exposition line: {line!r}"
                labels = dict(LABEL.findall(m.group(2) or ""))
                self.samples.append((m.group(1), labels, float(m.group(3))))

    def values(self, name: str, **labels: str) -> list[float]:
        return [
            v for n, ls, v in self.samples
            if n == name and all(ls.get(k) == want for k, want in labels.items())
        ]

    def one(self, name: str, **labels: str) -> float:
        found = self.values(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {found} in\n{self.text}"
        return found[0]

    def labels(self, name: str) -> list[dict[str, str]]:
        return [ls for n, ls, _ in self.samples if n == name]


def scrape(http: httpx.Client) -> Scrape:
    res = http.get("/metrics/prometheus")
    assert res.status_code == 200, res.text
    assert res.headers["content-type"].startswith("text/plain")
    return Scrape(res.text)


def test_every_documented_series_with_depth_lag_and_request_counts(broker_factory):
    # A checkpoint a second, so the checkpoint series appear without a long wait.
    b = broker_factory("metrics", env={"QUEEN_CHECKPOINT_INTERVAL_SECS": "1"}).start()
    with httpx.Client(base_url=b.url, timeout=15.0) as http:
        for call in range(PUSH_CALLS):
            items = [
                item(QUEUE, PARTITIONS[(call * PER_CALL + i) % 3], f"t-{call}-{i}", {"n": i})
                for i in range(PER_CALL)
            ]
            assert all(r["status"] == "queued" for r in push(http, b.url, items))
        pushed = PUSH_CALLS * PER_CALL

        # p0: all 20 completed. p1: 5 popped, 4 completed and 1 sent to the DLQ. p2: untouched.
        p0 = pop(http, b.url, QUEUE, group=GROUP, partition="p0", batch=100, wait=False, mode="all")
        assert len(p0) == pushed // 3
        assert all(r["success"] for r in ack_batch(http, b.url, p0, GROUP))
        p1 = pop(http, b.url, QUEUE, group=GROUP, partition="p1", batch=5, wait=False, mode="all")
        assert len(p1) == 5
        assert all(r["success"] for r in ack_batch(http, b.url, p1[:4], GROUP))
        assert all(r["success"] for r in ack_batch(http, b.url, p1[4:], GROUP, status="dlq"))
        done = len(p0) + len(p1)

        assert http.get("/no/such/route").status_code == 404
        # A timer due at once, in a queue of its own: the timer series appear when it fires.
        timer = {"op": "schedule", "queue": f"{QUEUE}-timers", "timerKey": "t", "delayMs": -1,
                 "payload": "e30=", "txn": "metrics-timer"}
        assert http.post("/api/v1/timers", json={"operations": [timer]}).status_code == 200
        deadline = time.monotonic() + 15
        while http.get(f"/api/v1/timers/{QUEUE}-timers/t").json()["found"]:
            assert time.monotonic() < deadline, "the timer never fired"
            time.sleep(0.1)

        # Two more messages behind the fired one; a conflating pop delivers the newest and
        # retires the two before it: the conflation series appears.
        timers_q = f"{QUEUE}-timers"
        more = [item(timers_q, "Default", f"c-{i}", {}) for i in range(2)]
        assert all(r["status"] == "queued" for r in push(http, b.url, more))
        lv = {"consumerGroup": "metrics-lv", "conflation": "true", "subscriptionMode": "all", "wait": "false"}
        res = http.get(f"/api/v1/pop/queue/{timers_q}", params=lv)
        assert res.status_code == 200 and [m["transactionId"] for m in res.json()["messages"]] == ["c-1"], res.text

        # A message maxWaitTimeSeconds removes a second later: the retention series appears.
        retained = f"{QUEUE}-retention"
        res = http.post("/api/v1/configure", json={"queue": retained, "options": {"maxWaitTimeSeconds": 1}})
        assert res.status_code == 200, res.text
        assert all(r["status"] == "queued" for r in push(http, b.url, [item(retained, "p", "r-1", {})]))

        documented = documented_series()
        deadline = time.monotonic() + 15
        while True:
            s = scrape(http)
            missing = documented - set(s.families)
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert not missing, f"documented but not exported: {sorted(missing)}"
        undocumented = {f for f in s.families if f.startswith("queen_")} - documented
        assert not undocumented, f"exported but not in docs/metrics.md: {sorted(undocumented)}"

        # Depth and lag: pushed but not completed, and the same as the HTTP read says.
        assert s.one("queen_queue_depth", queue=QUEUE) == pushed - done
        lag = s.one("queen_consumer_group_lag_messages", group=GROUP, queue=QUEUE)
        assert lag == pushed - done
        group_doc = http.get(f"/api/v1/consumer-groups/{GROUP}").json()
        assert [q["pending"] for q in group_doc["queues"]] == [pushed - done]
        assert s.one("queen_consumer_group_lag_seconds", group=GROUP, queue=QUEUE) > 0
        # QUEUE, the timer's queue (its fire created it, with its Default partition) and the
        # retention queue (one partition).
        assert s.one("queen_queues") == 3
        assert s.one("queen_partitions") == 5
        assert s.one("queen_retention_removed_messages_total", queue=retained) == 1
        assert s.one("queen_messages_conflated_total", queue=timers_q) == 2

        assert s.one("queen_messages_pushed_total", queue=QUEUE) == pushed
        assert s.one("queen_messages_popped_total", queue=QUEUE) == done
        assert s.one("queen_messages_acked_total", queue=QUEUE, status="completed") == done - 1
        assert s.one("queen_messages_acked_total", queue=QUEUE, status="dlq") == 1
        assert s.one("queen_messages_dead_lettered_total", queue=QUEUE) == 1

        # Requests: per route template, never per raw path.
        # Push answers 201 Created.
        push_ok = s.values(
            "queen_http_requests_total", route="/api/v1/push", method="POST", status="201"
        )
        assert sum(push_ok) >= PUSH_CALLS, s.labels("queen_http_requests_total")
        partition_pops = "/api/v1/pop/queue/{q}/partition/{p}"
        assert sum(s.values("queen_http_requests_total", route=partition_pops, method="GET")) == 2
        assert s.one("queen_http_requests_total", route="unmatched", method="GET", status="404") == 1
        routes = {ls["route"] for ls in s.labels("queen_http_requests_total")}
        assert not any(QUEUE in r or "no/such" in r for r in routes), routes
        assert sum(s.values("queen_http_request_seconds_count", route="/api/v1/push")) >= PUSH_CALLS

        assert s.one("queen_raft_is_leader") == 1
        assert s.one("queen_raft_term") >= 1
        applied = s.one("queen_raft_applied_index")
        assert applied >= 1
        assert s.one("queen_raft_commit_index") >= applied
        assert s.one("queen_raft_applied_lag") >= 0
        assert s.one("queen_log_fsync_seconds_count") >= 1
        assert s.one("queen_log_fsync_bytes_sum") > 0

        segment_bytes = s.one("queen_log_segment_bytes")
        assert segment_bytes > 0
        assert s.one("queen_log_segments") >= 1
        assert s.one("queen_data_dir_bytes") >= segment_bytes + s.one("queen_state_file_bytes")
        assert 0 < s.one("queen_data_dir_available_bytes") <= s.one("queen_data_dir_capacity_bytes")
        assert s.one("queen_process_resident_memory_bytes") > 0
        assert s.one("queen_process_virtual_memory_bytes") >= s.one(
            "queen_process_resident_memory_bytes"
        )
