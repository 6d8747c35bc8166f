"""The HTTP door bounds every client: slow heads, slow bodies and silent connections are cut
after their timeouts, connections beyond the limit wait (and are served once held ones time
out), and every number, name and list a client sends is range-checked with a 400/413 that
names the field and the limit."""

import socket
import threading
import time

import httpx

from raw_socket import closed_by_server, connect

FAST = {
    "QUEEN_HTTP_HEADER_TIMEOUT_MS": "1000",
    "QUEEN_HTTP_BODY_TIMEOUT_MS": "1000",
    "QUEEN_HTTP_IDLE_TIMEOUT_MS": "2000",
}


def test_slow_loris_head_is_cut_after_the_header_timeout(broker_factory):
    b = broker_factory("loris", env=FAST).start()
    s = connect(b)
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100
    started = time.monotonic()
    cut = False
    try:
        for i in range(len(head)):
            s.sendall(head[i : i + 1])
            time.sleep(0.25)
            if time.monotonic() - started > 8:
                break
    except (ConnectionResetError, BrokenPipeError):
        cut = True
    cut = cut or closed_by_server(s, 2)
    elapsed = time.monotonic() - started
    s.close()
    assert cut, "a head trickled one byte at a time was never cut"
    assert elapsed < 8, f"cut only after {elapsed:.1f}s with a 1s header timeout"
    # The door still serves normal clients.
    assert httpx.get(f"{b.url}/health", timeout=10).status_code == 200


def test_held_connections_beyond_the_limit_do_not_block_a_client_forever(broker_factory):
    # No probe reserve: this is about the ordinary slots (test_door_probe_slots.py has the reserve).
    env = dict(FAST, QUEEN_HTTP_MAX_CONNECTIONS="3", QUEEN_HTTP_PROBE_RESERVE_CONNECTIONS="0")
    b = broker_factory("limit", env=env).start()
    time.sleep(2.5)  # the start-up probe's kept-alive connection ends by the idle timeout
    silent = [connect(b) for _ in range(3)]
    try:
        started = time.monotonic()
        r = httpx.get(f"{b.url}/health", timeout=20)
        waited = time.monotonic() - started
        assert r.status_code == 200
        # With three slots taken by silent sockets the client had to wait for a slot: it was
        # held back by the limit, then served once the header timeout freed one.
        assert waited >= 0.5, f"served after {waited:.2f}s: the connection limit did not hold"
        for s in silent:
            assert closed_by_server(s, 10), "a silent connection was never closed"
    finally:
        for s in silent:
            s.close()


def test_slow_body_is_cut_with_408(broker_factory):
    b = broker_factory("slowbody", env=FAST).start()
    body = b'{"items":[{"queue":"slow-body","payload":{"x":"' + b"y" * 200 + b'"}}]}'
    s = connect(b)
    s.sendall(
        b"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    got = bytearray()
    stop = threading.Event()

    def reader():
        s.settimeout(10)
        try:
            while not stop.is_set():
                data = s.recv(4096)
                if not data:
                    return
                got.extend(data)
        except OSError:
            return

    t = threading.Thread(target=reader)
    t.start()
    started = time.monotonic()
    try:
        for i in range(len(body)):
            if got or time.monotonic() - started > 8:
                break
            s.sendall(body[i : i + 1])
            time.sleep(0.1)
    except OSError:
        pass
    t.join(timeout=12)
    stop.set()
    s.close()
    text = bytes(got).decode(errors="replace")
    assert text.startswith("HTTP/1.1 408"), f"answer to a trickled body: {text[:200]!r}"
    assert "http_body_timeout_ms" in text, text


def test_long_poll_outlives_the_short_timeouts(broker_factory):
    b = broker_factory("longpoll", env=FAST).start()
    with httpx.Client(timeout=20) as http:
        started = time.monotonic()
        r = http.get(f"{b.url}/api/v1/pop/queue/lp-empty?wait=true&timeout=3000")
        assert r.status_code == 204, r.text
        assert time.monotonic() - started >= 2.5
        # The same kept-alive connection serves the next request after a short pause.
        time.sleep(0.5)
        assert http.get(f"{b.url}/health").status_code == 200


def refused(r: httpx.Response, status: int, *words: str) -> None:
    assert r.status_code == status, f"{r.status_code} {r.text[:300]}"
    body = r.json()
    text = body["error"]
    for w in words:
        assert w in text, f"{w!r} not in {text!r}"


def test_client_numbers_are_range_checked(broker_factory):
    b = broker_factory("ranges").start()
    with httpx.Client(base_url=b.url, timeout=10) as http:
        q = "/api/v1/pop/queue/ranges-q"
        r = http.get(q, params={"leaseSeconds": "10000000000000", "wait": "false"})
        refused(r, 400, "leaseSeconds", "604800")
        assert r.json()["code"] == "bad_request"
        refused(http.get(q, params={"batch": "10001", "wait": "false"}), 400, "batch", "10000")
        refused(http.get(q, params={"timeout": "300001"}), 400, "timeout", "300000")
        refused(http.get(q, params={"partitions": "10001"}), 400, "partitions")
        ok = http.get(q, params={"batch": "10000", "leaseSeconds": "604800", "wait": "false"})
        assert ok.status_code == 204, ok.text

        for key, bad in [
            ("leaseTime", 10_000_000_000_000),
            ("delayedProcessing", 10**15),
            ("windowBuffer", 10**12),
            ("dedupWindowSeconds", 10**12),
            ("retryLimit", 10**9),
            ("retentionSeconds", -1),
            ("maxSize", 10**18),
            ("ttl", 10**15),
        ]:
            r = http.post("/api/v1/configure", json={"queue": "ranges-q", "options": {key: bad}})
            refused(r, 400, key)
        r = http.post("/api/v1/configure", json={"queue": "ranges-q", "options": {"leaseTime": 600}})
        assert r.status_code == 200, r.text
        assert r.json()["options"]["leaseTime"] == 600


def test_requests_are_bounded_before_the_engine(broker_factory):
    env = {"QUEEN_MAX_PUSH_ITEMS": "100", "QUEEN_MAX_TXN_OPS": "5", "QUEEN_MAX_ACK_ITEMS": "50"}
    b = broker_factory("bounds", env=env).start()
    with httpx.Client(base_url=b.url, timeout=10) as http:
        items = [{"queue": "bounds-q", "payload": i} for i in range(101)]
        refused(http.post("/api/v1/push", json={"items": items}), 413, "101", "100", "max_push_items")
        assert http.post("/api/v1/push", json={"items": items[:100]}).status_code == 201

        ops = [{"type": "push", "items": [{"queue": "bounds-q", "payload": 1}]}] * 6
        refused(http.post("/api/v1/transaction", json={"operations": ops}), 413, "max_txn_ops")
        two = [{"type": "push", "items": items[:60]}, {"type": "push", "items": items[:60]}]
        refused(http.post("/api/v1/transaction", json={"operations": two}), 413, "max_push_items")

        acks = [{"transactionId": f"t{i}", "partitionId": "1", "status": "completed"} for i in range(51)]
        refused(http.post("/api/v1/ack/batch", json={"acknowledgments": acks}), 413, "max_ack_items")

        long = "q" * 513
        refused(http.post("/api/v1/push", json={"items": [{"queue": long, "payload": 1}]}), 400, "queue", "512")
        refused(
            http.post("/api/v1/push", json={"items": [{"queue": "bounds-q", "partition": long, "payload": 1}]}),
            400,
            "partition",
        )
        refused(http.get(f"/api/v1/pop/queue/bounds-q?consumerGroup={long}&wait=false"), 400, "consumerGroup")
        refused(http.post("/api/v1/configure", json={"queue": "bounds-q", "namespace": long}), 400, "namespace")
        refused(http.get(f"/api/v1/pop?task={long}&wait=false"), 400, "task")

        pushed = http.post("/api/v1/push", json={"items": [{"queue": "trace-q", "payload": 1}]}).json()[0]
        trace = {
            "transactionId": pushed["transactionId"],
            "partitionId": pushed["partitionId"],
            "traceNames": ["n"],
            "data": {"blob": "x" * (70 * 1024)},
        }
        refused(http.post("/api/v1/traces", json=trace), 413, "max_trace_bytes")
        trace["data"] = {"blob": "small"}
        trace["traceNames"] = [long]
        refused(http.post("/api/v1/traces", json=trace), 400, "traceNames")


def test_admin_listings_are_paged(broker_factory):
    b = broker_factory("pages").start()
    with httpx.Client(base_url=b.url, timeout=10) as http:
        items = [{"queue": "pages-q", "partition": f"p{i:02}", "payload": i} for i in range(30)]
        assert http.post("/api/v1/push", json={"items": items}).status_code == 201

        whole = http.get("/api/v1/resources/queues/pages-q").json()
        assert len(whole["partitions"]) == 30
        page = http.get("/api/v1/resources/queues/pages-q", params={"limit": 10, "offset": 25}).json()
        assert [p["name"] for p in page["partitions"]] == [p["name"] for p in whole["partitions"][25:]]
        assert page["partitionsPage"] == {"limit": 10, "offset": 25, "total": 30}

        depth = http.get("/api/v1/resources/queues/pages-q/depth", params={"limit": 4}).json()
        assert len(depth["partitions"]) == 4 and depth["pending"] == 30

        first = http.get("/api/v1/resources/partitions", params={"queue": "pages-q", "limit": 10}).json()
        second = http.get(
            "/api/v1/resources/partitions", params={"queue": "pages-q", "limit": 10, "offset": 10}
        ).json()
        assert second["total"] == 30 and len(second["partitions"]) == 10
        assert not {p["id"] for p in first["partitions"]} & {p["id"] for p in second["partitions"]}

        m1 = http.get("/api/v1/messages", params={"queue": "pages-q", "limit": 7}).json()
        m2 = http.get("/api/v1/messages", params={"queue": "pages-q", "limit": 7, "offset": 7}).json()
        assert m1["total"] == 7 and m2["total"] == 7
        ids1 = {m["transactionId"] for m in m1["messages"]}
        ids2 = {m["transactionId"] for m in m2["messages"]}
        assert len(ids1) == 7 and len(ids2) == 7 and not ids1 & ids2
        huge = http.get("/api/v1/messages", params={"queue": "pages-q", "limit": 10**9}).json()
        assert len(huge["messages"]) == 30


def test_millions_of_tiny_items_are_refused_whole_and_fast(broker_factory):
    """The issue's push: ~4.4 M items `{"queue":"q"}` under the 64 MiB body limit. It is refused
    with 413 after one pass over the body, nothing is stored, and the broker stays up."""
    b = broker_factory("tiny-items").start()
    n = 4_400_000
    body = b'{"items":[' + b",".join([b'{"queue":"q"}'] * n) + b"]}"
    assert len(body) < 64 * 2**20
    with httpx.Client(base_url=b.url, timeout=60) as http:
        r = http.post("/api/v1/push", content=body, headers={"content-type": "application/json"})
        refused(r, 413, str(n), "max_push_items")
        assert http.get("/health").status_code == 200
        assert http.get("/api/v1/resources/queues/q").status_code == 404
    assert b.proc.poll() is None, "the broker exited"


def read_answer(s: socket.socket) -> bytes:
    """One HTTP answer with a Content-Length body from `s`."""
    s.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        assert chunk, f"closed mid-answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += s.recv(4096)
    return head


def test_idle_keep_alive_has_its_own_timeout(broker_factory):
    env = dict(FAST, QUEEN_HTTP_IDLE_TIMEOUT_MS="3000")
    b = broker_factory("idle", env=env).start()
    s = connect(b)
    try:
        req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        s.sendall(req)
        assert read_answer(s).startswith(b"HTTP/1.1 200")
        # Idle longer than the 1 s header timeout but shorter than the 3 s idle timeout: the
        # kept-alive connection still carries the next request.
        time.sleep(1.8)
        s.sendall(req)
        assert read_answer(s).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert closed_by_server(s, 10), "an idle kept-alive connection was never closed"
        assert time.monotonic() - started >= 2, "closed before the idle timeout"
    finally:
        s.close()


def test_a_client_that_stops_reading_is_cut_after_the_idle_timeout(broker_factory):
    b = broker_factory("slowread", env=FAST).start()
    blob = "z" * 100_000
    with httpx.Client(base_url=b.url, timeout=20) as http:
        for _ in range(4):
            items = [{"queue": "slowread-q", "payload": {"b": blob}} for _ in range(25)]
            assert http.post("/api/v1/push", json={"items": items}).status_code == 201
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", b.port))
    try:
        s.sendall(b"GET /api/v1/messages?queue=slowread-q&limit=100 HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(5)  # never read while the ~10 MB answer is written; idle timeout is 2 s
        s.settimeout(10)
        got = 0
        try:
            while True:
                data = s.recv(1 << 16)
                if not data:
                    break
                got += len(data)
        except (ConnectionResetError, socket.timeout):
            pass
        assert got < 9_000_000, f"the whole answer ({got} bytes) waited for a client that did not read"
    finally:
        s.close()
