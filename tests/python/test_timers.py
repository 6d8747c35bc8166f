"""Timers (spec/native-api.md §2.15) beyond the official suite: refusals of bad input and
limits, state kept across a restart, exactly one fire across a SIGKILL, and timer riders of
a transaction (§2.8) without KV."""

import base64
import json
import time
import uuid

import httpx
import pytest
import zstandard

import queen_api

FIRE_WAIT_S = 30.0


def b64(value) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


def op(queue: str, key: str, payload, delay_ms: int, **extra) -> dict:
    body = {
        "op": "schedule",
        "queue": queue,
        "timerKey": key,
        "payload": b64(payload),
        "delayMs": delay_ms,
        "txn": str(uuid.uuid4()),
    }
    body.update(extra)
    return body


def schedule(http: httpx.Client, base: str, *ops: dict) -> list[dict]:
    res = http.post(f"{base}/api/v1/timers", json={"operations": list(ops)})
    res.raise_for_status()
    return res.json()["results"]


def refused(http: httpx.Client, base: str, ops: list, status: int) -> dict:
    res = http.post(f"{base}/api/v1/timers", json={"operations": ops})
    assert res.status_code == status, res.text
    return res.json()


def peek(http: httpx.Client, base: str, queue: str, key: str) -> dict:
    res = http.get(f"{base}/api/v1/timers/{queue}/{key}")
    res.raise_for_status()
    return res.json()


def wait_fired(http: httpx.Client, base: str, queue: str, key: str) -> None:
    deadline = time.monotonic() + FIRE_WAIT_S
    while time.monotonic() < deadline:
        if not peek(http, base, queue, key)["found"]:
            return
        time.sleep(0.1)
    pytest.fail(f"timer {queue}/{key} never fired")


def delivered(http: httpx.Client, base: str, queue: str, group: str) -> list[dict]:
    """Every message of the queue, read by a fresh group from the start, and acked."""
    return queen_api.drain(http, base, queue, group, deadline_s=30.0)


def test_bad_input_is_refused_with_the_timer_codes(http, broker):
    base = broker.url
    q = "bad-timers"
    dup = refused(http, base, [op(q, "k", 1, 10), op(q, "k", 2, 10)], 400)
    assert (dup["error"], dup["code"]) == ("timers_bad_request", "timers_bad_request")
    owned = refused(http, base, [op(q, "k", 1, 10, messageId="x")], 400)
    assert owned["reason"] == "timers_server_owned_field"
    underscore = refused(http, base, [op(q, "k", 1, 10, _internal=1)], 400)
    assert underscore["reason"] == "timers_server_owned_field"
    unknown = refused(http, base, [{**op(q, "k", 1, 10), "op": "explode"}], 400)
    assert unknown["reason"] == "timers_unknown_op"
    not_b64 = refused(http, base, [{**op(q, "k", 1, 10), "payload": "!!not base64!!"}], 400)
    assert not_b64["reason"] == "timers_bad_payload"
    refused(http, base, [{**op(q, "k", 1, 10), "delayMs": "soon"}], 400)
    refused(http, base, [{**op(q, "k", 1, 10), "timerKey": ""}], 400)
    refused(http, base, [op(q, "k" * 2000, 1, 10)], 400)
    horizon = refused(http, base, [op(q, "k", 1, 366 * 24 * 3600 * 1000)], 403)
    assert horizon["reason"] == "timers_horizon"
    # A small zstd frame that decodes past the payload bound is refused, not inflated.
    bomb = zstandard.ZstdCompressor().compress(b" " * (2 << 20))
    big = {**op(q, "k", 1, 10), "payload": base64.b64encode(bomb).decode(), "payloadZstd": True}
    assert refused(http, base, [big], 413)["error"] == "timers_too_large"
    # Nothing of any refused call was kept.
    assert http.get(f"{base}/api/v1/timers/{q}").json()["rows"] == []


def test_a_zstd_payload_is_delivered_decoded_and_a_key_may_hold_slashes(http, broker):
    base = broker.url
    q = "zstd-timers"
    frame = zstandard.ZstdCompressor().compress(json.dumps({"z": [1, 2]}).encode())
    zop = {**op(q, "a/b:c", None, -1), "payload": base64.b64encode(frame).decode(),
           "payloadZstd": True}
    (r,) = schedule(http, base, zop)
    assert r["status"] == "scheduled"
    wait_fired(http, base, q, "a/b:c")
    messages = delivered(http, base, q, "zstd-check")
    assert [m["data"] for m in messages] == [{"z": [1, 2]}]
    assert messages[0]["transactionId"] == zop["txn"]


def test_pending_timers_survive_a_restart(broker):
    q = "kept-timers"
    with httpx.Client(timeout=10.0) as http:
        (r,) = schedule(http, broker.url, op(q, "later", {"v": 1}, 600_000))
        before = peek(http, broker.url, q, "later")
    assert broker.stop() == 0
    broker.start()
    with httpx.Client(timeout=10.0) as http:
        after = peek(http, broker.url, q, "later")
        assert after == before
        assert after["messageId"] == r["messageId"] and after["txn"] == r["txn"]
        cancelled = http.delete(f"{broker.url}/api/v1/timers/{q}/later").json()
        assert (cancelled["ok"], cancelled["status"]) == (True, "cancelled")


@pytest.mark.parametrize("fired_before_kill", [False, True])
def test_a_timer_fires_exactly_once_across_a_sigkill(broker, fired_before_kill):
    q = f"killed-timers-{int(fired_before_kill)}"
    delay = -1 if fired_before_kill else 2000
    with httpx.Client(timeout=10.0) as http:
        (r,) = schedule(http, broker.url, op(q, "once", {"once": True}, delay))
        if fired_before_kill:
            wait_fired(http, broker.url, q, "once")
    broker.kill()
    broker.start()
    with httpx.Client(timeout=10.0) as http:
        wait_fired(http, broker.url, q, "once")
        messages = delivered(http, broker.url, q, "exactly-once")
        assert [m["transactionId"] for m in messages] == [r["txn"]]
        assert messages[0]["data"] == {"once": True}
    # And once more after a second crash: the fire is not replayed as a second message.
    broker.kill()
    broker.start()
    with httpx.Client(timeout=10.0) as http:
        assert not peek(http, broker.url, q, "once")["found"]
        again = delivered(http, broker.url, q, "after-second-crash")
        assert [m["transactionId"] for m in again] == [r["txn"]]


def test_timer_riders_commit_with_their_bundle(http, broker):
    base = broker.url
    q = "rider-timers"
    schedule(http, base, op(q, "old", {"v": 0}, 600_000))
    body = {
        "operations": [{"type": "push", "items": [
            {"queue": q, "payload": {"pushed": True}, "transactionId": "p1"}]}],
        "requiredLeases": [],
        "timers": [op(q, "new", {"fired": True}, -1),
                   {"op": "cancel", "queue": q, "timerKey": "old"}],
    }
    res = http.post(f"{base}/api/v1/transaction", json=body)
    res.raise_for_status()
    out = res.json()
    assert out["success"] is True
    assert [(r["index"], r["type"]) for r in out["results"]] == [
        (0, "push"), (1, "timer"), (2, "timer")]
    assert [r["status"] for r in out["results"][1:]] == ["scheduled", "cancelled"]
    assert not peek(http, base, q, "old")["found"]
    wait_fired(http, base, q, "new")
    data = sorted(json.dumps(m["data"]) for m in delivered(http, base, q, "rider-check"))
    assert data == [json.dumps({"fired": True}), json.dumps({"pushed": True})]


def test_a_rolled_back_bundle_schedules_nothing(http, broker):
    base = broker.url
    q = "rolled-back-timers"
    body = {
        "operations": [{"type": "ack", "transactionId": "nobody", "partitionId": "12345",
                        "status": "completed"}],
        "requiredLeases": [],
        "timers": [op(q, "never", {"v": 1}, 60_000)],
    }
    res = http.post(f"{base}/api/v1/transaction", json=body)
    assert res.status_code != 200 or res.json().get("success") is False
    assert not peek(http, base, q, "never")["found"]


def test_a_delay_far_in_the_past_is_due_now_and_a_listing_sends_no_payload(http, broker):
    base = broker.url
    q = "past-timers"
    schedule(http, base, op(q, "pending", {"v": 1}, 600_000))
    page = http.get(f"{base}/api/v1/timers/{q}").json()
    assert [r["timerKey"] for r in page["rows"]] == ["pending"]
    assert "payload" not in page["rows"][0]
    assert "payload" in peek(http, base, q, "pending")
    (r,) = schedule(http, base, op(q, "ancient", {"v": 2}, -400 * 24 * 3600 * 1000))
    assert r["status"] == "scheduled"
    wait_fired(http, base, q, "ancient")


def test_every_tenant_field_is_server_owned(http, broker):
    base = broker.url
    for field in ("tenant", "tenantName", "tenant_region", "TenantX"):
        owned = refused(http, base, [op("tenant-timers", "k", 1, 10, **{field: "other"})], 400)
        assert owned["reason"] == "timers_server_owned_field", field


def test_a_rider_past_the_horizon_is_forbidden_not_rolled_back(http, broker):
    base = broker.url
    body = {
        "operations": [],
        "requiredLeases": [],
        "timers": [op("horizon-riders", "k", 1, 366 * 24 * 3600 * 1000)],
    }
    res = http.post(f"{base}/api/v1/transaction", json=body)
    assert res.status_code == 403, res.text
