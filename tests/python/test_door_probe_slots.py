"""Health probes get through a full door: with every connection slot held by silent clients,
/health, /ready and the metrics are still answered at once from the slots kept for probes;
other requests on those slots get 503 with Retry-After, and a silent client cannot keep one
of them for long."""

import time

import httpx

from raw_socket import closed_by_server, connect

ENV = {
    "QUEEN_HTTP_MAX_CONNECTIONS": "3",
    "QUEEN_HTTP_PROBE_RESERVE_CONNECTIONS": "2",
    # Silent connections hold their general slots for the whole test...
    "QUEEN_HTTP_HEADER_TIMEOUT_MS": "30000",
    # ...while the start-up probe's kept-alive connection goes quickly.
    "QUEEN_HTTP_IDLE_TIMEOUT_MS": "1000",
}


def test_probes_are_answered_when_every_slot_is_taken(broker_factory):
    b = broker_factory("probes", env=ENV).start()
    time.sleep(1.5)  # the start-up probe's connection ends by the idle timeout
    silent = [connect(b) for _ in range(3)]
    try:
        time.sleep(0.5)
        for path in ("/health", "/ready", "/metrics/prometheus", "/metrics"):
            t = time.monotonic()
            r = httpx.get(f"{b.url}{path}", timeout=5)
            assert r.status_code == 200, (path, r.status_code, r.text[:200])
            assert time.monotonic() - t < 3, f"{path} waited for a slot"
            assert r.headers.get("connection", "").lower() == "close", "a probe slot is kept alive"

        r = httpx.get(f"{b.url}/api/v1/resources/queues", timeout=5)
        assert r.status_code == 503, r.text
        assert r.headers.get("retry-after") == "1"
        assert "http_max_connections" in r.json()["error"]
        assert 'queen_http_connections_refused_total 1' in httpx.get(
            f"{b.url}/metrics/prometheus", timeout=5).text

        # A silent client in a probe slot is cut after a couple of seconds, not 30.
        squatter = connect(b)
        t = time.monotonic()
        assert closed_by_server(squatter, 10), "a silent connection kept a probe slot"
        assert time.monotonic() - t < 6
        squatter.close()
    finally:
        for s in silent:
            s.close()
    # Once the silent clients go, everything is served again on ordinary slots.
    deadline = time.monotonic() + 10
    while True:
        r = httpx.get(f"{b.url}/api/v1/resources/queues", timeout=5)
        if r.status_code == 200:
            break
        assert time.monotonic() < deadline, r.text
        time.sleep(0.2)
