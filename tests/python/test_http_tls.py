"""TLS on the HTTP listener (issue 10): with `tls_cert_file`/`tls_key_file` the Queen API
speaks HTTPS only; the official queen-mq client pushes and pops over it; a bad certificate
file stops the start with its name; a client that never finishes its handshake is cut."""

import asyncio
import socket
import ssl

import httpx
import pytest

from queen_broker import BrokerError
from tls_certs import make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_broker(broker_factory, certs, **env):
    ca, cert, key = certs
    env = {"QUEEN_TLS_CERT_FILE": str(cert), "QUEEN_TLS_KEY_FILE": str(key), **env}
    return broker_factory("https", env=env, ca=ca).start()


def test_https_serves_and_plain_http_does_not(broker_factory, certs):
    b = tls_broker(broker_factory, certs)
    assert b.url.startswith("https://")
    with httpx.Client(base_url=b.url, verify=b.verify(), timeout=10) as http:
        r = http.post("/api/v1/push", json={"items": [{"queue": "tq", "payload": {"n": 1}}]})
        assert r.status_code == 201, r.text
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{b.port}/health", timeout=5)
    # A client that does not trust the certificate refuses it.
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{b.url}/health", verify=ssl.create_default_context(), timeout=5)


def test_the_official_client_pushes_and_pops_over_https(broker_factory, certs, monkeypatch):
    queen = pytest.importorskip("queen", reason="queen-mq is in scripts/lib/requirements.txt")
    b = tls_broker(broker_factory, certs)
    # The client's httpx takes the CA from SSL_CERT_FILE (it has no option of its own).
    monkeypatch.setenv("SSL_CERT_FILE", str(certs[0]))

    async def run() -> list:
        async with queen.Queen(b.url) as q:
            await q.queue("tls-q").create()
            await q.queue("tls-q").push([{"data": {"i": i}} for i in range(3)])
            got = []
            for _ in range(10):
                got += await q.queue("tls-q").batch(10).wait(False).pop()
                if len(got) >= 3:
                    break
            for m in got:
                await q.ack(m, True)
            return got

    got = asyncio.run(run())
    assert sorted(m["data"]["i"] for m in got) == [0, 1, 2]


def test_a_stalled_handshake_is_cut(broker_factory, certs):
    b = tls_broker(broker_factory, certs, QUEEN_HTTP_HEADER_TIMEOUT_MS="500")
    with socket.create_connection(("127.0.0.1", b.port), timeout=15) as s:
        # Nothing is sent: the broker must close within its handshake deadline, not wait.
        assert s.recv(1) == b""
    with httpx.Client(base_url=b.url, verify=b.verify(), timeout=10) as http:
        assert http.get("/health").status_code == 200


@pytest.mark.parametrize("which", ["missing", "not-pem", "no-key"])
def test_a_bad_certificate_file_stops_the_start(broker_factory, certs, tmp_path, which):
    ca, cert, key = certs
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    env = {
        "missing": {"QUEEN_TLS_CERT_FILE": str(tmp_path / "nope.pem"), "QUEEN_TLS_KEY_FILE": str(key)},
        "not-pem": {"QUEEN_TLS_CERT_FILE": str(junk), "QUEEN_TLS_KEY_FILE": str(key)},
        "no-key": {"QUEEN_TLS_CERT_FILE": str(cert)},
    }[which]
    b = broker_factory(f"bad-{which}", env=env, ca=ca)
    with pytest.raises(BrokerError):
        b.start(ready_timeout=20)
    log = b.log_text()
    assert "tls_cert_file" in log or "tls_key_file" in log, log
    if which != "no-key":
        assert ("nope.pem" if which == "missing" else "junk.pem") in log, log
