"""The JSON shapes the Queen API answers (spec/native-api.md §2.19: what the SDKs and the
dashboard read) stay as they are while the engine's answers change form: one scenario of
configure, pushes, pops, acks, a DLQ entry, a trace and group administration, then every read,
compared with the checked-in answers (tests/python/read_shapes_expected.json) after ids and
times are replaced by what they are.

QUEEN_WRITE_SHAPES=1 rewrites the expected file from the binary under test.
"""

import json
import os
import re
from pathlib import Path

import httpx

from queen_api import item, push

EXPECTED = Path(__file__).with_name("read_shapes_expected.json")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
# Values that depend on when the scenario ran or how the engine batched it: only their type
# is compared.
VOLATILE = {"uptimeSeconds", "uptime", "lagSeconds", "statsAge", "term", "lastLogIndex",
            "committed", "applied", "leader", "expiresAt", "leaseExpiresAt", "commit", "lag"}


def _norm(value, key=None):
    if isinstance(value, dict):
        return {k: _norm(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if key in VOLATILE and value is not None:
        return f"<{type(value).__name__}>"
    if isinstance(value, str):
        if UUID.match(value):
            return "<uuid>"
        if ISO.match(value):
            return "<time>"
    return value


def _answer(res: httpx.Response):
    try:
        body = res.json()
    except ValueError:
        body = res.text
    return {"status": res.status_code, "body": _norm(body)}


def _scenario(http: httpx.Client, base: str) -> dict:
    out: dict = {}

    def rec(name, res):
        out[name] = _answer(res)
        return res

    rec("configure_a", http.post("/api/v1/configure", json={
        "queue": "qa", "namespace": "ns1", "task": "t1",
        "options": {"leaseTime": 30, "retryLimit": 0, "deadLetterQueue": True}}))
    rec("configure_b", http.post("/api/v1/configure", json={
        "queue": "qb", "options": {"priority": 5, "notAnOption": 1, "ttl": None}}))
    rec("configure_bad", http.post("/api/v1/configure", json={
        "queue": "qc", "options": {"leaseTime": -1}}))
    rec("configure_bad_type", http.post("/api/v1/configure", json={
        "queue": "qc", "options": {"deadLetterQueue": "yes"}}))
    res = rec("push", http.post("/api/v1/push", json={"items": [
        item("qa", "p1", "a1", {"n": 1}), item("qa", "p1", "a2", {"n": 2}),
        item("qa", "p1", "a3", [1, "x"]), item("qa", "p2", "a4", "text"),
        item("qa", "p1", "a1", {"n": 1}), item("qb", "Default", "b1", None),
        item("qb", "Default", "b2", 7)]}))
    assert res.status_code in (200, 201), res.text
    popped = rec("pop_g1", http.get("/api/v1/pop/queue/qa/partition/p1", params={
        "batch": 2, "wait": "false", "consumerGroup": "g1", "subscriptionMode": "all"})).json()
    msgs = popped["messages"]
    rec("ack_g1", http.post("/api/v1/ack/batch", json={"acknowledgments": [
        {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
         "leaseId": m["leaseId"], "status": "completed"} for m in msgs],
        "consumerGroup": "g1"}))
    one = http.get("/api/v1/pop/queue/qa/partition/p1",
                   params={"batch": 1, "wait": "false"}).json()["messages"][0]
    rec("ack_dlq", http.post("/api/v1/ack", json={
        "transactionId": one["transactionId"], "partitionId": one["partitionId"],
        "leaseId": one["leaseId"], "status": "failed", "error": "boom"}))
    rec("ack_unknown", http.post("/api/v1/ack/batch", json={"acknowledgments": [
        {"transactionId": "nope", "partitionId": one["partitionId"], "status": "completed"}]}))
    held = http.get("/api/v1/pop/queue/qb", params={"batch": 1, "wait": "false"}).json()
    held_msg = held["messages"][0]
    rec("extend", http.post(f"/api/v1/lease/{held_msg['leaseId']}/extend", json={"seconds": 60}))
    rec("trace", http.post("/api/v1/traces", json={
        "transactionId": "a2", "partitionId": msgs[0]["partitionId"],
        "consumerGroup": "g1", "traceNames": ["order-1", "flow"], "eventType": "step",
        "data": {"k": [1, 2]}}))
    rec("trace_missing", http.post("/api/v1/traces", json={
        "transactionId": "zz", "partitionId": msgs[0]["partitionId"], "data": {}}))
    pid = msgs[0]["partitionId"]
    reads = {
        "queues": "/api/v1/resources/queues",
        "queue": "/api/v1/resources/queues/qa",
        "queue_paged": "/api/v1/resources/queues/qa?limit=1&offset=1",
        "queue_missing": "/api/v1/resources/queues/nope",
        "depth": "/api/v1/resources/queues/qa/depth",
        "depth_group": "/api/v1/resources/queues/qa/depth?consumerGroup=g1",
        "overview": "/api/v1/resources/overview",
        "namespaces": "/api/v1/resources/namespaces",
        "tasks": "/api/v1/resources/tasks",
        "partitions": "/api/v1/resources/partitions",
        "partitions_qa": "/api/v1/resources/partitions?queue=qa&limit=1",
        "messages": "/api/v1/messages",
        "messages_qa": "/api/v1/messages?queue=qa&limit=2&offset=1",
        "message": f"/api/v1/messages/{pid}/a2",
        "message_missing": f"/api/v1/messages/{pid}/zz",
        "dlq": "/api/v1/dlq",
        "dlq_qa": "/api/v1/dlq?queue=qa&consumerGroup=__QUEUE_MODE__",
        "groups": "/api/v1/consumer-groups",
        "group": "/api/v1/consumer-groups/g1",
        "group_missing": "/api/v1/consumer-groups/nope",
        "lagging": "/api/v1/consumer-groups/lagging?minLagSeconds=0",
        "status": "/api/v1/status",
        "status_queues": "/api/v1/status/queues",
        "status_queue": "/api/v1/status/queues/qa",
        "trace_names": "/api/v1/traces/names",
        "traces_by_name": "/api/v1/traces/by-name/flow",
        "traces_for": f"/api/v1/traces/{pid}/a2",
        "health": "/health",
        "ready": "/ready",
        "metrics": "/metrics",
    }
    for name, path in reads.items():
        rec(name, http.get(path))
    rec("stats_refresh", http.post("/api/v1/stats/refresh"))
    rec("seek_end", http.post("/api/v1/consumer-groups/g1/queues/qa/seek", json={"toEnd": True}))
    rec("seek_time", http.post("/api/v1/consumer-groups/g1/queues/qa/seek",
                               json={"timestamp": "2020-01-01T00:00:00.000Z"}))
    rec("seek_missing", http.post("/api/v1/consumer-groups/zz/queues/qa/seek",
                                  json={"toEnd": True}))
    rec("subscription", http.post("/api/v1/consumer-groups/g1/subscription",
                                  json={"subscriptionTimestamp": "2020-01-01T00:00:00.000Z"}))
    rec("group_delete_one", http.delete("/api/v1/consumer-groups/g1/queues/qa"))
    rec("group_delete_all", http.delete("/api/v1/consumer-groups/__QUEUE_MODE__"))
    rec("delete_queue", http.delete("/api/v1/resources/queues/qb"))
    rec("delete_missing", http.delete("/api/v1/resources/queues/qb"))
    rec("queues_after", http.get("/api/v1/resources/queues"))
    # Groups and the metrics' queues are kept in hash maps: the order of a group's queues, of the
    # lagging rows and of the metrics' queues is not part of the contract.
    for name in ("groups", "group", "lagging"):
        body = out[name]["body"]
        rows = body if name == "lagging" else (
            [body] if name == "group" else body["consumerGroups"])
        if name == "lagging":
            rows.sort(key=lambda r: (r["consumerGroup"], r["queue"]))
        else:
            for g in rows:
                g["queues"].sort(key=lambda r: r["queue"])
    out["metrics"]["body"]["queues"].sort(key=lambda r: r["name"])
    # The lag in seconds grows with the time the scenario takes: only its keys are compared.
    for name in ("overview", "status", "status_queue", "status_queues"):
        body = out[name]["body"]
        lag = (body if name == "overview" else body["overview"])["lag"]
        lag["time"] = sorted(lag["time"])
    return out


def test_every_answer_keeps_its_json_shape(broker):
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        got = _scenario(http, broker.url)
    if os.environ.get("QUEEN_WRITE_SHAPES") == "1":
        EXPECTED.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    expected = json.loads(EXPECTED.read_text())
    assert set(got) == set(expected)
    for name in expected:
        assert got[name] == expected[name], name
