"""Bad input gets a JSON error body with a stable code and changes nothing.

Codes: 400 bad_request (malformed JSON, wrong types, missing fields),
413 payload_too_large (body over --max-body-bytes), 404 no_such_route,
401 unauthorized (JWT on, token missing or invalid).
"""

import time

import httpx
import jwt
import pytest

import queen_api

KNOWN = "bad-input-known"  # a queue with exactly one message
NEVER = "bad-input-never"  # a queue no request may create
JWT_SECRET = "bad-input-test-secret-of-at-least-32-bytes"


def assert_error(res: httpx.Response, status: int, code: str) -> dict:
    assert res.status_code == status, f"{res.request.method} {res.request.url}: {res.status_code} {res.text[:300]}"
    assert "application/json" in res.headers.get("content-type", ""), res.headers
    body = res.json()
    assert isinstance(body, dict), body
    assert isinstance(body.get("error"), str) and body["error"], body
    assert body.get("code") == code, body
    return body


def assert_unchanged(http: httpx.Client, base: str) -> None:
    """KNOWN still holds its one message, NEVER still does not exist."""
    assert http.get(f"{base}/api/v1/resources/queues/{NEVER}").status_code == 404
    messages = queen_api.pop(http, base, KNOWN, group=f"check-{time.monotonic_ns()}", mode="all", wait=False)
    assert [m["transactionId"] for m in messages] == ["known-1"]


@pytest.fixture
def seeded(broker, http):
    [result] = queen_api.push(http, broker.url, [queen_api.item(KNOWN, "Default", "known-1", {"n": 1})])
    assert result["status"] == "queued"
    return broker


def raw(body: str) -> dict:
    return {"content": body.encode(), "headers": {"content-type": "application/json"}}


BAD_REQUESTS = {
    "push-malformed-json": ("/api/v1/push", raw('{"items": [{"queue": "' + NEVER + '"')),
    "push-not-json": ("/api/v1/push", raw("queue=bad-input-never")),
    "push-items-not-array": ("/api/v1/push", {"json": {"items": {"queue": NEVER, "payload": 1}}}),
    "push-items-missing": ("/api/v1/push", {"json": {"queue": NEVER, "payload": 1}}),
    "push-queue-number": ("/api/v1/push", {"json": {"items": [{"queue": 7, "payload": {}}]}}),
    "push-item-without-queue": ("/api/v1/push", {"json": {"items": [{"partition": "p", "payload": {}}]}}),
    "push-partition-number": ("/api/v1/push", {"json": {"items": [{"queue": NEVER, "partition": 3, "payload": {}}]}}),
    "push-transaction-id-object": (
        "/api/v1/push", {"json": {"items": [{"queue": NEVER, "transactionId": {"a": 1}, "payload": {}}]}}),
    "push-valid-item-then-bad-item": (
        "/api/v1/push",
        {"json": {"items": [queen_api.item(NEVER, "Default", "ok-1", {}), {"queue": 7, "payload": {}}]}},
    ),
    "push-bad-item-into-known-queue": (
        "/api/v1/push",
        {"json": {"items": [queen_api.item(KNOWN, "Default", "known-2", {}), {"payload": {}}]}},
    ),
    "configure-malformed-json": ("/api/v1/configure", raw('{"queue": ')),
    "configure-queue-number": ("/api/v1/configure", {"json": {"queue": 12, "options": {}}}),
    "configure-missing-queue": ("/api/v1/configure", {"json": {"options": {"leaseTime": 30}}}),
    "configure-lease-time-string": ("/api/v1/configure", {"json": {"queue": NEVER, "options": {"leaseTime": "long"}}}),
    "configure-encryption-number": (
        "/api/v1/configure", {"json": {"queue": NEVER, "options": {"encryptionEnabled": 1}}}),
    "ack-malformed-json": ("/api/v1/ack", raw('{"transactionId": "x",')),
    "ack-batch-not-array": ("/api/v1/ack/batch", {"json": {"acknowledgments": "all", "consumerGroup": None}}),
    "transaction-malformed-json": ("/api/v1/transaction", raw('{"operations": [')),
    "transaction-operations-not-array": ("/api/v1/transaction", {"json": {"operations": {"type": "push"}}}),
    "transaction-push-queue-number": (
        "/api/v1/transaction",
        {"json": {"operations": [{"type": "push", "items": [{"queue": 5, "payload": {}}]}], "requiredLeases": []}},
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_request_is_refused_and_changes_nothing(seeded, http, case):
    path, kwargs = BAD_REQUESTS[case]
    assert_error(http.post(f"{seeded.url}{path}", **kwargs), 400, "bad_request")
    assert_unchanged(http, seeded.url)


@pytest.mark.parametrize("method,path", [
    ("GET", "/api/v1/no-such-thing"),
    ("POST", "/api/v1/pushes"),
    ("GET", "/api/v2/pop/queue/q"),
    ("DELETE", "/nope"),
])
def test_unknown_route_is_404_no_such_route(seeded, http, method, path):
    body = assert_error(http.request(method, f"{seeded.url}{path}"), 404, "no_such_route")
    assert body["error"] == "not found"
    assert body.get("path") == path
    assert_unchanged(http, seeded.url)


def test_never_created_queue_is_404(broker, http):
    res = http.get(f"{broker.url}/api/v1/resources/queues/{NEVER}")
    assert res.status_code == 404
    assert isinstance(res.json().get("error"), str)


def test_body_over_the_limit_is_413_and_changes_nothing(broker_factory):
    broker = broker_factory("small-body", args=["--max-body-bytes", "1024"]).start()
    big = {"items": [queen_api.item(NEVER, "Default", "big-1", {"pad": "x" * 2048})]}
    small = {"items": [queen_api.item(KNOWN, "Default", "known-1", {"n": 1})]}
    with httpx.Client(timeout=10.0) as http:
        assert http.post(f"{broker.url}/api/v1/push", json=small).status_code in (200, 201)
        assert_error(http.post(f"{broker.url}/api/v1/push", json=big), 413, "payload_too_large")

        # The same body streamed without Content-Length must be refused as well.
        encoded = httpx.Request("POST", "http://x", json=big).content

        def chunks():
            for at in range(0, len(encoded), 256):
                yield encoded[at:at + 256]

        res = http.post(f"{broker.url}/api/v1/push", content=chunks(),
                        headers={"content-type": "application/json"})
        assert_error(res, 413, "payload_too_large")
        assert_unchanged(http, broker.url)


def token(sub: str, secret: str = JWT_SECRET, expires_in: int = 3600) -> str:
    now = int(time.time())
    claims = {"sub": sub, "username": sub, "role": "read-write", "iat": now, "exp": now + expires_in}
    return jwt.encode(claims, secret, algorithm="HS256")


@pytest.mark.parametrize("authorization", [
    None,
    "Bearer not-a-jwt",
    "Bearer " + token("mallory", secret="some-other-secret-of-at-least-32-bytes"),
    "Bearer " + token("late", expires_in=-3600),
    "Basic dXNlcjpwYXNz",
])
def test_jwt_missing_or_invalid_is_401_and_changes_nothing(broker_factory, authorization):
    broker = broker_factory("jwt", env={"QUEEN_JWT_SECRET": JWT_SECRET}).start()
    good = {"authorization": "Bearer " + token("alice")}
    bad = {"authorization": authorization} if authorization else {}
    body = {"items": [queen_api.item(NEVER, "Default", "jwt-1", {"n": 1})]}
    with httpx.Client(base_url=broker.url, timeout=10.0) as http:
        assert http.get("/health").status_code == 200, "/health is public"
        assert_error(http.post("/api/v1/push", json=body, headers=bad), 401, "unauthorized")
        assert_error(http.post("/api/v1/configure", json={"queue": NEVER, "options": {}}, headers=bad),
                     401, "unauthorized")
        assert_error(http.get(f"/api/v1/pop/queue/{NEVER}?wait=false", headers=bad), 401, "unauthorized")
        assert http.get(f"/api/v1/resources/queues/{NEVER}", headers=good).status_code == 404
