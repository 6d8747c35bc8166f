"""A client that reads its answer, but slowly, is cut by the minimum write rate.

Any progress resets the idle write timer, so before the rate existed a client absorbing a few
hundred KB/s of a multi-MB listing (enough that the kernel wakes the writer well within the
idle timeout) held the answer, its buffers and its connection slot for as long as it liked.
Here the idle timeout is the default 60 s; the minimum rate is set high (1 MiB/s over 2 s
of waiting) so a loopback client can be "slow" cheaply; a full-speed client is unaffected.
"""

import socket
import threading
import time

import httpx

ENV = {
    "QUEEN_HTTP_MIN_WRITE_RATE_BYTES": str(1 << 20),
    "QUEEN_HTTP_WRITE_RATE_WINDOW_MS": "2000",
}
BLOB = "z" * 100_000


def fill(b, queue: str) -> None:
    with httpx.Client(base_url=b.url, timeout=30) as http:
        for _ in range(8):
            items = [{"queue": queue, "payload": {"b": BLOB}} for _ in range(25)]
            assert http.post("/api/v1/push", json={"items": items}).status_code == 201


def test_a_slow_reader_is_cut_while_other_clients_are_served(broker_factory):
    b = broker_factory("slowrate", env=ENV).start()
    fill(b, "rate-q")
    listing = "/api/v1/messages?queue=rate-q&limit=200"

    # A full-speed reader gets the whole ~20 MB answer with the same settings.
    whole = httpx.get(b.url + listing, timeout=60)
    assert whole.status_code == 200 and len(whole.content) > 19_000_000

    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", b.port))
    served: list[float] = []
    stop = threading.Event()

    def others() -> None:
        with httpx.Client(base_url=b.url, timeout=10) as http:
            while not stop.is_set():
                t = time.monotonic()
                assert http.get("/health").status_code == 200
                r = http.post("/api/v1/push", json={"items": [{"queue": "other-q", "payload": 1}]})
                assert r.status_code == 201
                served.append(time.monotonic() - t)
                time.sleep(0.2)

    t = threading.Thread(target=others, daemon=True)
    t.start()
    got = 0
    cut_after = None
    started = time.monotonic()
    try:
        s.sendall(f"GET {listing} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.settimeout(5)
        # ~256 KB/s: steady progress, a quarter of the minimum rate.
        while time.monotonic() - started < 25:
            try:
                data = s.recv(64 * 1024)
            except (ConnectionResetError, socket.timeout):
                cut_after = time.monotonic() - started
                break
            if not data:
                cut_after = time.monotonic() - started
                break
            got += len(data)
            time.sleep(0.25)
    finally:
        stop.set()
        t.join(timeout=15)
        s.close()
    print(f"slow reader cut after {cut_after} s having read {got} bytes; "
          f"{len(served)} other requests, slowest {max(served, default=0):.3f} s")
    assert cut_after is not None, f"a reader at ~256 KB/s still held its answer after 25 s ({got} bytes read)"
    assert got < 19_000_000, "the whole answer went out"
    assert served and max(served) < 5, "other clients were not served meanwhile"
