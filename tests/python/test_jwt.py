"""JWT at the door: `nbf` is checked, a configured audience is required and matched, a token
without a role can only read, and whether the metrics pages need a token is a setting that
defaults to "yes" when authentication is on (/health and /ready stay open either way)."""

import socket
import time

import httpx
import jwt

SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789"


def token(**claims) -> str:
    now = int(time.time())
    body = {"sub": "tester", "iat": now, "exp": now + 600}
    body.update(claims)
    return jwt.encode(body, SECRET, algorithm="HS256")


def bearer(t: str) -> dict:
    return {"Authorization": f"Bearer {t}"}


PUSH = {"items": [{"queue": "jwt-q", "payload": {"n": 1}}]}


def test_nbf_and_default_role(broker_factory):
    b = broker_factory("jwt", env={"QUEEN_JWT_SECRET": SECRET}).start()
    with httpx.Client(base_url=b.url, timeout=10) as http:
        admin = bearer(token(role="admin"))
        assert http.post("/api/v1/push", json=PUSH, headers=admin).status_code == 201

        early = bearer(token(role="admin", nbf=int(time.time()) + 3600))
        r = http.get("/api/v1/resources/queues", headers=early)
        assert r.status_code == 401, r.text
        assert "nbf" in r.json()["error"]

        # Without a role a token reads but does not write.
        plain = bearer(token())
        assert http.get("/api/v1/resources/queues", headers=plain).status_code == 200
        r = http.post("/api/v1/push", json=PUSH, headers=plain)
        assert r.status_code == 403, r.text

        # Without a configured audience a token that carries one is still accepted.
        assert http.get("/api/v1/resources/queues", headers=bearer(token(aud="anything"))).status_code == 200


def test_configured_audience(broker_factory):
    env = {"QUEEN_JWT_SECRET": SECRET, "QUEEN_JWT_AUDIENCE": "queen-prod"}
    b = broker_factory("aud", env=env).start()
    with httpx.Client(base_url=b.url, timeout=10) as http:
        ok = bearer(token(role="read-write", aud="queen-prod"))
        assert http.post("/api/v1/push", json=PUSH, headers=ok).status_code == 201
        listed = bearer(token(role="read-write", aud=["other", "queen-prod"]))
        assert http.get("/api/v1/resources/queues", headers=listed).status_code == 200
        for t in (token(role="admin", aud="queen-test"), token(role="admin")):
            r = http.get("/api/v1/resources/queues", headers=bearer(t))
            assert r.status_code == 401, r.text


def test_metrics_need_a_token_when_auth_is_on(broker_factory):
    b = broker_factory("metrics-auth", env={"QUEEN_JWT_SECRET": SECRET}).start()
    with httpx.Client(base_url=b.url, timeout=10) as http:
        for path in ("/metrics", "/metrics/prometheus"):
            assert http.get(path).status_code == 401, path
            assert http.get(path, headers=bearer(token())).status_code == 200, path
        assert http.get("/health").status_code == 200
        assert http.get("/ready").status_code == 200


def test_metrics_open_when_configured(broker_factory):
    env = {"QUEEN_JWT_SECRET": SECRET, "QUEEN_METRICS_REQUIRE_AUTH": "false"}
    b = broker_factory("metrics-open", env=env).start()
    with httpx.Client(base_url=b.url, timeout=10) as http:
        for path in ("/metrics", "/metrics/prometheus"):
            assert http.get(path).status_code == 200, path
        assert http.get("/api/v1/resources/queues").status_code == 401


def test_roles_follow_the_command_table(broker_factory):
    """Each route is checked against the role of the command it sends (protocol command.rs):
    write-only pushes but does not pop, read-only reads but neither pops nor acks, read-write
    does all but administration, admin deletes. A refused request is answered before its body
    is read."""
    b = broker_factory("jwt-roles", env={"QUEEN_JWT_SECRET": SECRET}).start()
    writer, reader = bearer(token(role="write-only")), bearer(token(role="read-only"))
    rw, admin = bearer(token(role="read-write")), bearer(token(roles=["read-only", "admin"]))
    with httpx.Client(base_url=b.url, timeout=10) as http:
        assert http.post("/api/v1/push", json=PUSH, headers=writer).status_code == 201
        assert http.get("/api/v1/pop/queue/jwt-q", headers=writer).status_code == 403
        assert http.get("/api/v1/messages?queue=jwt-q", headers=writer).status_code == 403

        assert http.get("/api/v1/messages?queue=jwt-q", headers=reader).status_code == 200
        assert http.get("/api/v1/consumer-groups", headers=reader).status_code == 200
        assert http.get("/api/v1/pop/queue/jwt-q", headers=reader).status_code == 403
        assert http.post("/api/v1/push", json=PUSH, headers=reader).status_code == 403
        ack = {"transactionId": "x", "partitionId": "y", "status": "completed"}
        assert http.post("/api/v1/ack", json=ack, headers=reader).status_code == 403

        popped = http.get("/api/v1/pop/queue/jwt-q?consumerGroup=g&wait=false", headers=rw)
        assert popped.status_code in (200, 204), popped.text
        seek = http.post("/api/v1/consumer-groups/g/queues/jwt-q/seek", json={"toEnd": True}, headers=rw)
        assert seek.status_code != 403, seek.text
        for path in ("/api/v1/consumer-groups/g", "/api/v1/resources/queues/jwt-q"):
            assert http.delete(path, headers=rw).status_code == 403, path
        assert http.post("/api/v1/stats/refresh", headers=rw).status_code == 403
        assert http.post("/api/v1/stats/refresh", headers=admin).status_code == 200
        assert http.delete("/api/v1/consumer-groups/g", headers=admin).status_code == 200
        assert http.delete("/api/v1/resources/queues/jwt-q", headers=admin).status_code == 200

        # A route of a feature not built answers `unsupported` to any valid token, and 401
        # without one.
        lag = http.get("/api/v1/analytics/queue-lag", headers=reader)
        assert lag.status_code != 403 and lag.json()["code"] == "unsupported", lag.text
        assert http.get("/api/v1/analytics/queue-lag").status_code == 401
        # The node's series are a read: a reader gets them, a caller without a token does not.
        assert http.get("/api/v1/analytics/system-metrics", headers=reader).status_code == 200
        assert http.get("/api/v1/analytics/system-metrics").status_code == 401
        # They count every tenant's requests: a tenant's token is refused them, even with the
        # read role; a tenant-less one is not (worker-metrics alike).
        tenant_reader = bearer(token(role="read-only", tenant="a"))
        for path in ("/api/v1/analytics/system-metrics", "/api/v1/analytics/worker-metrics"):
            assert http.get(path, headers=tenant_reader).status_code == 403, path
            assert http.get(path, headers=reader).status_code == 200, path

        # KV and locks are read-write commands: a reader is refused before the body.
        get = {"operations": [{"op": "get", "ns": "jwt", "key": "k"}]}
        assert http.post("/api/v1/kv", json=get, headers=reader).status_code == 403
        assert http.post("/api/v1/kv", json=get, headers=rw).status_code == 200
        assert http.post("/api/v1/locks", json={"operations": []}, headers=reader).status_code == 403

    # 403 before the body: the client sends headers announcing 50 MB and then nothing more; the
    # answer comes at once and closes the connection instead of waiting for the body.
    with socket.create_connection(("127.0.0.1", b.port), timeout=10) as s:
        s.sendall(
            b"POST /api/v1/transaction HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {token(role='write-only')}\r\n".encode()
            + b"Content-Length: 50000000\r\n\r\n{"
        )
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 403"), head[:200]
        assert b"connection: close" in head.lower(), head[:400]


def test_ephemeral_routes_follow_the_command_table(broker_factory):
    """The eight ephemeral routes take the roles of the commands they stand for (review s12
    E16): push is a push (write-only may, read-only may not), pop and ack are consumption
    (read-write), configure and reset are read-write, DELETE is admin, the listings are reads."""
    b = broker_factory("jwt-eph", env={"QUEEN_JWT_SECRET": SECRET}).start()
    writer, reader = bearer(token(role="write-only")), bearer(token(role="read-only"))
    rw, admin = bearer(token(role="read-write")), bearer(token(role="admin"))
    eph = "/api/v1/ephemeral"
    push = {"queue": "e", "messages": [{"payload": 1}]}
    ack = {"queue": "e", "acks": [{"id": "e:x:p:1.1"}]}
    calls = {
        "push": lambda h: http.post(f"{eph}/push", json=push, headers=h),
        "pop": lambda h: http.get(f"{eph}/pop", params={"queue": "e"}, headers=h),
        "ack": lambda h: http.post(f"{eph}/ack", json=ack, headers=h),
        "configure": lambda h: http.post(f"{eph}/configure", json={"queue": "e", "options": {}}, headers=h),
        "reset": lambda h: http.post(f"{eph}/reset", json={"queue": "e"}, headers=h),
        "delete": lambda h: http.delete(f"{eph}/queue/e", headers=h),
        "queues": lambda h: http.get(f"{eph}/queues", headers=h),
        "depth": lambda h: http.get(f"{eph}/queues/e/depth", headers=h),
    }
    allowed = {
        "write-only": {"push"},
        "read-only": {"queues", "depth"},
        "read-write": {"push", "pop", "ack", "configure", "reset", "queues", "depth"},
        "admin": set(calls),
    }
    with httpx.Client(base_url=b.url, timeout=10) as http:
        for role, h in (("write-only", writer), ("read-only", reader), ("read-write", rw), ("admin", admin)):
            # A declared queue, so depth and delete answer 200 rather than 404.
            assert calls["configure"](admin).status_code == 200
            for name, call in calls.items():
                status = call(h).status_code
                if name in allowed[role]:
                    assert status != 403, (role, name, status)
                else:
                    assert status == 403, (role, name, status)
        assert calls["push"]({}).status_code == 401
