"""KV and locks beyond the official suite: every refusal of bad input has its named reason,
the limits hold, and rows, versions and permits survive a clean stop and a crash."""

import httpx
import pytest

KV = "/api/v1/kv"
LOCKS = "/api/v1/locks"
# protocol/src/limits.rs
MAX_KV_KEY_BYTES = 1024
MAX_KV_VALUE_BYTES = 256 * 1024
MAX_KV_OPS = 256
MAX_KV_GET_MANY_KEYS = 1000
MAX_KV_PREFIX_LIMIT = 1000


def put(key, value=1, ns="t", **extra):
    op = {"op": "put", "ns": ns, "key": key, "value": value, "ttlSeconds": 60}
    op.update(extra)
    return op


def call(http, ops, path=KV):
    return http.post(path, json={"operations": ops})


def results(http, ops, path=KV):
    r = call(http, ops, path)
    assert r.status_code == 200, r.text
    return r.json()["results"]


@pytest.mark.parametrize(
    "op, status, reason",
    [
        (put("k", ns="NOT A NAMESPACE"), 400, "kv_bad_namespace"),
        (put("k", ns="x" * 65), 400, "kv_bad_namespace"),
        (put(""), 400, "kv_bad_key"),
        (put("a\u0000b"), 400, "kv_bad_key"),
        ({"op": "frobnicate", "ns": "t", "key": "k"}, 400, "kv_unknown_op"),
        (put("k", tenant="other"), 400, "kv_tenant_not_an_input"),
        ({"op": "getPrefix", "ns": "t", "prefix": ""}, 400, "kv_prefix_required"),
        ({"op": "put", "ns": "t", "key": "k", "value": 1}, 400, "kv_expiry_not_specified"),
        (put("k", ttlSeconds=0), 400, "kv_bad_ttl"),
        (put("k", ttlSeconds=10**12), 400, "kv_bad_ttl"),
        (put("k", forever=True), 400, "kv_bad_ttl"),
        (put("k", expect=-1), 400, "kv_bad_expect"),
        ({"op": "check", "ns": "t", "key": "k"}, 400, "kv_bad_expect"),
        ({"op": "incr", "ns": "t", "key": "k", "delta": 1.5, "ttlSeconds": 5}, 400, "kv_bad_request"),
        ({"op": "getMany", "ns": "t", "keys": []}, 400, "kv_bad_request"),
        (put("k" * (MAX_KV_KEY_BYTES + 1)), 413, "kv_key_too_large"),
        (put("k", value="v" * MAX_KV_VALUE_BYTES), 413, "kv_value_too_large"),
    ],
)
def test_bad_ops_are_refused_with_their_named_reason(http, op, status, reason):
    r = call(http, [op])
    assert r.status_code == status, r.text
    body = r.json()
    assert body["reason"] == reason, body
    assert body["error"] == body["code"]
    assert body["code"] == ("kv_bad_request" if status == 400 else reason)
    # Nothing of a refused call was written.
    assert results(http, [{"op": "get", "ns": "t", "key": "k"}])[0]["found"] is False


def test_call_sized_limits(http):
    too_many = [{"op": "get", "ns": "t", "key": str(i)} for i in range(MAX_KV_OPS + 1)]
    assert call(http, too_many).json()["reason"] == "kv_too_many_ops"
    keys = [str(i) for i in range(MAX_KV_GET_MANY_KEYS + 1)]
    r = call(http, [{"op": "getMany", "ns": "t", "keys": keys}])
    assert r.json()["reason"] == "kv_too_many_keys"
    r = call(http, [put("same"), {"op": "delete", "ns": "t", "key": "same"}])
    assert r.json()["reason"] == "kv_duplicate_key_in_call"
    # The same key in two namespaces is two keys.
    assert all(x["applied"] for x in results(http, [put("same"), put("same", ns="u")]))


def test_a_prefix_limit_is_clamped_and_a_bare_array_is_a_call(http):
    r = http.post(KV, json=[put(f"p:{i}") for i in range(3)])
    assert r.status_code == 200, r.text
    page = results(http, [{"op": "getPrefix", "ns": "t", "prefix": "p:", "limit": 10**9}])[0]
    assert [row["key"] for row in page["rows"]] == ["p:0", "p:1", "p:2"]
    assert page["truncated"] is False
    keys_only = results(http, [{"op": "getPrefix", "ns": "t", "prefix": "p:", "keysOnly": True}])
    assert all("value" not in row for row in keys_only[0]["rows"])


def test_a_lost_required_op_applies_nothing(http):
    results(http, [put("gate", value="first")])
    r = call(http, [put("side"), {"op": "check", "ns": "t", "key": "gate", "expect": 999, "required": True}])
    body = r.json()
    assert r.status_code == 200 and body["ok"] is False and "results" not in body, body
    assert (body["reason"], body["failedIndex"], body["kvReason"]) == ("kv_precondition", 1, "version")
    assert body["value"] == "first"
    assert results(http, [{"op": "get", "ns": "t", "key": "side"}])[0]["found"] is False


def test_get_prefix_is_refused_inside_a_transaction(http):
    r = http.post(
        "/api/v1/transaction",
        json={"operations": [], "requiredLeases": [], "kv": [{"op": "getPrefix", "ns": "t", "prefix": "p"}]},
    )
    assert r.status_code == 400
    assert "kv_get_prefix_not_allowed_in_transaction" in r.json()["error"]


@pytest.mark.parametrize(
    "op",
    [
        {"op": "acquire", "name": "a#b", "ttlSeconds": 5},
        {"op": "acquire", "name": "", "ttlSeconds": 5},
        {"op": "acquire", "name": "n" * 257, "ttlSeconds": 5},
        {"op": "acquire", "name": "n", "ttlSeconds": 5, "limit": 0},
        {"op": "acquire", "name": "n", "ttlSeconds": 5, "limit": 1025},
        {"op": "acquire", "name": "n", "ttlSeconds": 5, "owner": "o" * 257},
        {"op": "acquire", "name": "n"},
        {"op": "renew", "name": "n", "ttlSeconds": 5},
        {"op": "steal", "name": "n"},
    ],
)
def test_bad_lock_ops_are_400(http, op):
    r = call(http, [op], LOCKS)
    assert r.status_code == 400, r.text
    assert r.json()["error"]


def get(http, key, ns="t"):
    return results(http, [{"op": "get", "ns": ns, "key": key}])[0]


@pytest.mark.parametrize("crash", [False, True])
def test_rows_versions_and_permits_survive_a_restart(broker_factory, crash):
    b = broker_factory("kv-restart").start()
    with httpx.Client(base_url=b.url, timeout=10) as http:
        kept = results(http, [put("kept", value={"a": [1, None]}, ttlSeconds=3600)])[0]
        results(http, [{"op": "put", "ns": "t", "key": "forever", "value": None, "forever": True}])
        results(http, [put("short", ttlSeconds=1)])
        grant = results(http, [{"op": "acquire", "name": "job", "ttlSeconds": 600, "owner": "me"}], LOCKS)[0]
    if crash:
        b.kill()
    else:
        assert b.stop() == 0
    b.start()
    with httpx.Client(base_url=b.url, timeout=10) as http:
        row = get(http, "kept")
        assert (row["found"], row["value"], row["version"]) == (True, {"a": [1, None]}, kept["version"])
        assert row["expiresAt"] == kept["expiresAt"]
        forever = get(http, "forever")
        assert forever["found"] is True and forever["value"] is None and forever["expiresAt"] is None
        again = results(http, [{"op": "acquire", "name": "job", "ttlSeconds": 600, "owner": "me"}], LOCKS)[0]
        assert again["already"] is True and again["token"] == grant["token"]
        other = results(http, [{"op": "acquire", "name": "job", "ttlSeconds": 600, "owner": "you"}], LOCKS)[0]
        assert other["acquired"] is False and other["holders"][0]["owner"] == "me"
        newer = results(http, [put("new")])[0]
        assert newer["version"] > grant["token"], "versions keep rising across a restart"


@pytest.mark.parametrize(
    "op",
    [
        put("l#0", ns="queen-locks"),
        {"op": "delete", "ns": "queen-locks", "key": "l#0"},
        {"op": "incr", "ns": "queen-locks", "key": "l#0", "delta": 1, "ttlSeconds": 5},
    ],
)
def test_the_locks_namespace_is_written_only_through_locks(http, op):
    got = results(
        http,
        [{"op": "acquire", "name": "l", "owner": "me", "ttlSeconds": 60}],
        LOCKS,
    )[0]
    r = call(http, [op])
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "kv_bad_namespace"
    t = http.post("/api/v1/transaction", json={"operations": [], "kv": [op]})
    assert t.status_code == 400, t.text
    # The permit is still held, and KV may read it.
    row = results(http, [{"op": "get", "ns": "queen-locks", "key": "l#0"}])[0]
    assert row["found"] and row["version"] == got["token"], (row, got)


@pytest.mark.parametrize("ns", ["queen-kafka-partitions", "queen-kafka-topic-configs"])
@pytest.mark.parametrize(
    "op",
    [
        put("topic", ns="NS"),
        {"op": "delete", "ns": "NS", "key": "topic"},
        {"op": "incr", "ns": "NS", "key": "topic", "delta": 1, "ttlSeconds": 5},
    ],
)
def test_the_kafka_topic_rows_are_written_only_by_the_kafka_port(http, op, ns):
    op = {**op, "ns": ns}
    r = call(http, [op])
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "kv_bad_namespace"
    t = http.post("/api/v1/transaction", json={"operations": [], "kv": [op]})
    assert t.status_code == 400, t.text
    # Nothing was written: KV may read the namespace, and finds no row.
    row = results(http, [{"op": "get", "ns": ns, "key": "topic"}])[0]
    assert not row["found"], row


def test_oversized_lists_are_refused_while_counted(http):
    # Far more ops and keys than allowed, each tiny: refused by count, with the named reason.
    many_ops = "[" + ",".join(['{"op":"get","ns":"t","key":"k"}'] * 100_000) + "]"
    r = http.post(KV, content=many_ops, headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["reason"]) == (400, "kv_too_many_ops")
    keys = ",".join(['"k"'] * 200_000)
    body = '{"operations":[{"op":"getMany","ns":"t","keys":[' + keys + "]}]}"
    r = http.post(KV, content=body, headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["reason"]) == (400, "kv_too_many_keys")
    r = http.post(LOCKS, content=many_ops, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text


def test_a_kv_rider_refusal_keeps_its_status_and_reason(http):
    big = put("k", value="v" * MAX_KV_VALUE_BYTES)
    r = http.post("/api/v1/transaction", json={"operations": [], "kv": [big]})
    assert r.status_code == 413, r.text
    assert "kv_value_too_large" in r.text
    prefix = {"op": "getPrefix", "ns": "t", "prefix": "a"}
    r = http.post("/api/v1/transaction", json={"operations": [], "kv": [prefix]})
    assert r.status_code == 400, r.text
    assert "kv_get_prefix_not_allowed_in_transaction" in r.text


def test_get_many_answers_a_repeated_key_once(http):
    results(http, [put("dup")])
    r = results(http, [{"op": "getMany", "ns": "t", "keys": ["dup"] * 1000}])[0]
    assert [row["key"] for row in r["rows"]] == ["dup"]
    assert r["truncated"] is False
