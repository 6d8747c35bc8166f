"""Hostile requests against the engine of a real broker (issue 8): each must be refused or
absorbed without crashing, stalling, or fooling the broker. Every case failed on the binary
built before the fix (a crashed or stalled process, a duplicate delivery, a half-applied
transaction, a stolen lease, a process answering 503 for ever)."""

import threading
import time

import httpx
import pytest

from queen_api import ack_batch, item, pop, push

# Generous: the machine is shared (2 cores). The old binary held the engine 22-38 s for the
# 300 000-partition push; the fixed one plans it in one cycle of about 1-4 s on a loaded machine.
PROMPT_S = 5.0
WIDE_PUSH_S = 10.0


def _timed(fn):
    t = time.monotonic()
    out = fn()
    return out, time.monotonic() - t


def test_a_push_whose_entry_would_pass_the_record_limit_is_refused_and_writes_nothing(broker):
    # 4.7 M items of {"queue": "q"} (66 MB, under the body limit) made a 334 MB log entry,
    # above the 256 MiB record limit: the log writer failed and the process exited.
    body = b'{"items":[' + b",".join([b'{"queue":"q"}'] * 4_700_000) + b"]}"
    with httpx.Client(base_url=broker.url, timeout=120.0) as http:
        res = http.post("/api/v1/push", content=body, headers={"content-type": "application/json"})
        assert res.status_code == 413, res.text[:300]
        assert "limit" in res.text
        assert http.get("/health").json()["status"] == "healthy"
        # Nothing was written: the queue was not even created.
        assert pop(http, broker.url, "q", wait=False) == []
        queues = http.get("/api/v1/resources/queues").text
        assert '"q"' not in queues
        # And the broker still takes ordinary pushes.
        assert push(http, broker.url, [item("small", "p", "t1", {"n": 1})])[0]["status"] == "queued"


def test_too_many_new_partitions_in_one_push_are_refused_whole(broker_factory):
    # The door's item limit (max_push_items, 10 000) would refuse first: lift it so the
    # engine's own bound on new partitions is what answers.
    broker = broker_factory(env={"QUEEN_MAX_PUSH_ITEMS": "20000"}).start()
    items = [item("wide", f"p{i}", f"t{i}", i) for i in range(10_001)]
    with httpx.Client(base_url=broker.url, timeout=60.0) as http:
        res = http.post("/api/v1/push", json={"items": items})
        assert res.status_code == 413, res.text[:300]
        assert "max_new_partitions_per_request" in res.text
        assert pop(http, broker.url, "wide", wait=False) == []
        ok = push(http, broker.url, items[:10_000], timeout=60.0)
        assert all(r["status"] == "queued" for r in ok)


def test_300k_distinct_partitions_do_not_stall_health_or_other_pushes(broker_factory):
    b = broker_factory(env={"QUEEN_MAX_NEW_PARTITIONS_PER_REQUEST": "300000",
                            "QUEEN_MAX_PUSH_ITEMS": "300000"}).start()
    body = {"items": [item("spread", f"p{i}", f"t{i}", 1) for i in range(300_000)]}
    done = {}

    def big():
        with httpx.Client(base_url=b.url, timeout=120.0) as http:
            done["big"] = http.post("/api/v1/push", json=body).status_code

    t = threading.Thread(target=big)
    t.start()
    worst_health = worst_push = 0.0
    with httpx.Client(base_url=b.url, timeout=60.0) as http:
        time.sleep(0.5)
        n = 0
        while t.is_alive() and n < 5000:
            _, h = _timed(lambda: http.get("/health").raise_for_status())
            r, p = _timed(lambda: push(http, b.url, [item("side", "p", f"s{n}", n)], timeout=60.0))
            assert r[0]["status"] == "queued"
            worst_health, worst_push = max(worst_health, h), max(worst_push, p)
            n += 1
    t.join(timeout=120)
    print(f"300k push: worst /health {worst_health:.2f} s, worst push {worst_push:.2f} s, {n} probes")
    assert done.get("big") in (200, 201)
    assert worst_health < PROMPT_S, f"/health took {worst_health:.1f} s"
    assert worst_push < WIDE_PUSH_S, f"a one-item push took {worst_push:.1f} s"


def test_an_overflowing_lease_never_hands_the_same_messages_to_a_second_pop(broker):
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        push(http, broker.url, [item("lease", "p", f"t{i}", i) for i in range(3)])
        res = http.get(
            "/api/v1/pop/queue/lease",
            params={
                "batch": 10,
                "wait": "false",
                "consumerGroup": "g",
                "subscriptionMode": "all",
                "leaseSeconds": 10**13,
            },
        )
        if res.status_code == 400:
            return  # the door refused the number: the engine never saw it
        assert res.status_code == 200, res.text
        assert len(res.json()["messages"]) == 3
        again = pop(http, broker.url, "lease", group="g", mode="all", wait=False)
        assert again == [], "a live lease was handed out twice"


@pytest.mark.parametrize("option", ["delayedProcessing", "windowBuffer", "leaseTime", "dedupWindowSeconds"])
def test_huge_queue_time_options_do_not_wrap(broker, option):
    q = f"opt-{option}"
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        res = http.post("/api/v1/configure", json={"queue": q, "options": {option: 2**62}})
        if res.status_code == 400:
            return  # refused on configure: fine
        assert res.status_code == 200, res.text
        first = push(http, broker.url, [item(q, "p", "same", 1)])[0]
        second = push(http, broker.url, [item(q, "p", "same", 1)])[0]
        assert second["status"] == "duplicate", (first, second)
        got = pop(http, broker.url, q, group="g", mode="all", wait=False)
        if option in ("delayedProcessing", "windowBuffer"):
            # Held back (for ever, saturated), never delivered at once by a wrapped sum.
            assert got == []
        else:
            assert len(got) == 1
            assert pop(http, broker.url, q, group="g", mode="all", wait=False) == []
        assert http.get("/health").json()["status"] == "healthy"


def test_a_transaction_is_all_or_nothing(broker):
    # [push to B, ack failed m2, ack completed m4 under the same lease]: the nack releases the
    # lease, so the second ack cannot pass; the old broker committed the push and the nack.
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        push(http, broker.url, [item("txa", "p", f"m{i}", i) for i in range(1, 6)])
        msgs = pop(http, broker.url, "txa", batch=5, wait=False)
        assert [m["transactionId"] for m in msgs] == ["m1", "m2", "m3", "m4", "m5"]
        lease, pid = msgs[0]["leaseId"], msgs[0]["partitionId"]
        ops = [
            {"type": "push", "items": [item("txb", "p", "b1", {"x": 1})]},
            {"type": "ack", "transactionId": "m2", "partitionId": pid, "status": "failed", "leaseId": lease},
            {"type": "ack", "transactionId": "m4", "partitionId": pid, "status": "completed", "leaseId": lease},
        ]
        res = http.post("/api/v1/transaction", json={"operations": ops})
        body = res.json()
        assert body.get("success") is False, body
        assert "operation 2" in str(body), body
        # Nothing of it happened: B is empty and the lease still covers m1..m5.
        assert pop(http, broker.url, "txb", wait=False) == []
        assert pop(http, broker.url, "txa", wait=False) == []
        results = ack_batch(http, broker.url, msgs, None)
        assert all(r["success"] for r in results), results


def test_a_leaseless_nack_cannot_take_a_partition_from_its_lease_holder(broker):
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        push(http, broker.url, [item("nack", "p", f"n{i}", i) for i in range(3)])
        held = pop(http, broker.url, "nack", group="g", mode="all", batch=3, wait=False)
        assert len(held) == 3
        stray = {k: v for k, v in held[0].items() if k != "leaseId"}
        res = ack_batch(http, broker.url, [stray], "g", status="failed")
        assert not res[0]["success"], res
        # The holder keeps its lease: nobody else gets the messages, and its acks pass.
        assert pop(http, broker.url, "nack", group="g", mode="all", wait=False) == []
        assert all(r["success"] for r in ack_batch(http, broker.url, held, "g"))


def test_an_oversized_trace_is_refused(broker):
    with httpx.Client(base_url=broker.url, timeout=30.0) as http:
        r = push(http, broker.url, [item("tr", "p", "t1", 1)])[0]
        trace = {
            "transactionId": "t1",
            "partitionId": str(r["partitionId"]),
            "consumerGroup": "g",
            "traceNames": ["a"],
            "eventType": "info",
            "data": {"blob": "x" * (128 * 1024)},
        }
        res = http.post("/api/v1/traces", json=trace)
        assert res.status_code == 413, res.text[:300]


def test_an_engine_panic_rebuilds_the_group_in_process_and_keeps_every_answered_push(broker_factory):
    """The engine panics in its 40th cycle (test-only hook). The process does not exit: the
    group is rebuilt from checkpoint and log while the door stays up; requests of the failed
    cycle get a retriable 503, later ones are served, and every answered push is there."""
    b = broker_factory(env={"QUEEN_TEST_PANIC_AFTER_CYCLES": "40"}).start()
    answered, refused = [], 0
    with httpx.Client(base_url=b.url, timeout=10.0) as http:
        for i in range(200):
            r = http.post("/api/v1/push", json={"items": [item("pan", "p", f"k{i}", i)]})
            if r.status_code == 503:
                refused += 1
                continue
            assert r.status_code == 201, r.text
            answered.append(r.json()[0]["transactionId"])
        assert b.proc.poll() is None, "the process must stay up"
        assert refused <= 5, f"{refused} pushes refused: only the failed cycle's should be"
        assert len(answered) >= 195
        got = pop(http, b.url, "pan", batch=1000, wait=False)
        assert {m["transactionId"] for m in got} >= set(answered)
        health = http.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "healthy", health.text
        text = http.get("/metrics/prometheus").text
        assert 'queen_group_restarts_total{tenant="default"} 1' in text, "the rebuild is counted"
    assert "rebuilt and serving again" in b.log_text()

    # What the rebuilt group committed survives a restart of the process too.
    b.stop()
    b.env.pop("QUEEN_TEST_PANIC_AFTER_CYCLES")
    b.start()
    with httpx.Client(base_url=b.url, timeout=30.0) as http:
        r = http.get("/api/v1/messages", params={"queue": "pan", "limit": 1000})
        assert r.status_code == 200, r.text
        listed = {m.get("transactionId") for m in r.json()["messages"]}
        assert listed >= set(answered), f"{len(set(answered) - listed)} answered pushes gone"


def test_a_body_limit_above_the_record_limit_is_refused_at_start(broker_factory):
    b = broker_factory(env={"QUEEN_MAX_BODY_BYTES": str(512 * 1024 * 1024)})
    with pytest.raises(Exception):
        b.start(ready_timeout=10)
    assert b.proc.returncode == 2
    assert "max_body_bytes" in b.log_text()
