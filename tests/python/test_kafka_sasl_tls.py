"""SASL and TLS on the Kafka port (issues 10 and 11), against the real binary: confluent-kafka
over SASL_SSL (SCRAM-SHA-512) and SASL_PLAINTEXT (PLAIN), kafka-python over SASL_SSL
(SCRAM-SHA-256), kcat over SASL_SSL; each SASL user acts in its own tenant with its roles,
as a JWT does on the HTTP API; raw sockets for the refusals no client sends."""

import shutil
import socket
import struct
import subprocess
import time

import httpx
import jwt
import pytest

from raw_socket import closed_by_server
from test_kafka_port import frame, read_frame, request
from tls_certs import make_certs

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in requirements.txt")
from confluent_kafka.admin import AdminClient  # noqa: E402
kafka = pytest.importorskip("kafka", reason="kafka-python is in requirements.txt")

SECRET = "test-secret-that-is-long-enough-for-hs256-0123456789"
USERS = """
[[user]]
name = "alice"
password = "alice-pw"
tenant = "acme"
role = "read-write"

[[user]]
name = "bob"
password = "bob-pw"
tenant = "globex"
role = "read-write"

[[user]]
name = "reader"
password = "reader-pw"
tenant = "acme"
role = "read-only"
"""
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "reader": "reader-pw"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def secured(broker_factory, tmp_path, certs=None, name="sasl"):
    users = tmp_path / "users.toml"
    users.write_text(USERS)
    env = {"QUEEN_JWT_SECRET": SECRET, "QUEEN_KAFKA_SASL_USERS_FILE": str(users)}
    if certs:
        env["QUEEN_KAFKA_TLS_CERT_FILE"] = str(certs[1])
        env["QUEEN_KAFKA_TLS_KEY_FILE"] = str(certs[2])
    return broker_factory(name, env=env).start()


def confluent_conf(b, user, mechanism, ca=None, password=None) -> dict:
    conf = {
        "bootstrap.servers": b.kafka_bootstrap,
        "security.protocol": "SASL_SSL" if ca else "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password or PASSWORDS[user],
    }
    if ca:
        conf["ssl.ca.location"] = str(ca)
    return conf


def produce(conf: dict, topic: str, values: list[bytes]) -> list:
    """Produces `values`; the delivery errors (None for each delivered record)."""
    errors = []
    p = ck.Producer({**conf, "enable.idempotence": False})
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(30) == 0, "records left undelivered"
    return errors


def consume(conf: dict, topic: str, n: int, group: str) -> list[bytes]:
    c = ck.Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    try:
        for _ in range(60):
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) >= n:
                break
    finally:
        c.close()
    return got


def http_for(b, tenant: str) -> httpx.Client:
    now = int(time.time())
    claims = {"sub": "t", "iat": now, "exp": now + 600, "role": "admin", "tenant": tenant}
    token = jwt.encode(claims, SECRET, algorithm="HS256")
    return httpx.Client(base_url=b.url, timeout=15, headers={"Authorization": f"Bearer {token}"})


def popped(http: httpx.Client, queue: str) -> list[str]:
    r = http.get(f"/api/v1/pop/queue/{queue}", params={"batch": 100, "wait": "false"})
    assert r.status_code in (200, 204), r.text
    return [] if r.status_code == 204 else [m["data"] for m in r.json()["messages"]]


def test_confluent_sasl_ssl_scram512_lands_in_the_users_tenant(broker_factory, tmp_path, certs):
    b = secured(broker_factory, tmp_path, certs)
    conf = confluent_conf(b, "alice", "SCRAM-SHA-512", ca=certs[0])
    values = [f'"v{i}"'.encode() for i in range(5)]  # JSON: popped as the string
    assert produce(conf, "orders", values) == [None] * 5
    assert consume(conf, "orders", 5, "g-orders") == values
    with http_for(b, "acme") as acme, http_for(b, "globex") as globex:
        assert sorted(popped(acme, "orders")) == ["v0", "v1", "v2", "v3", "v4"]
        assert globex.get("/api/v1/resources/queues/orders").status_code == 404


def test_confluent_sasl_plaintext_plain(broker_factory, tmp_path):
    b = secured(broker_factory, tmp_path)
    conf = confluent_conf(b, "bob", "PLAIN")
    assert produce(conf, "plain-t", [b"a", b"b"]) == [None, None]
    assert consume(conf, "plain-t", 2, "g-plain") == [b"a", b"b"]


def test_kafka_python_sasl_ssl_scram256(broker_factory, tmp_path, certs):
    b = secured(broker_factory, tmp_path, certs)
    common = dict(
        bootstrap_servers=b.kafka_bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password="alice-pw",
        ssl_cafile=str(certs[0]),
    )
    p = kafka.KafkaProducer(enable_idempotence=False, **common)
    assert [p.send("kp-t", f"m{i}".encode()).get(timeout=30).offset for i in range(3)] == [0, 1, 2]
    p.close()
    c = kafka.KafkaConsumer(group_id=None, auto_offset_reset="earliest",
                            consumer_timeout_ms=10_000, **common)
    c.assign([kafka.TopicPartition("kp-t", 0)])
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 3:
            break
    c.close()
    assert got == [b"m0", b"m1", b"m2"]


def test_a_wrong_password_is_refused(broker_factory, tmp_path, certs):
    b = secured(broker_factory, tmp_path, certs)
    errors = []
    conf = confluent_conf(b, "alice", "SCRAM-SHA-512", ca=certs[0], password="nope")
    conf["error_cb"] = errors.append
    p = ck.Producer({**conf, "enable.idempotence": False})
    p.produce("never", b"x")
    for _ in range(20):
        p.poll(0.5)
        if errors:
            break
    p.purge()
    p.flush(5)
    assert any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors), errors
    with http_for(b, "acme") as acme:
        assert acme.get("/api/v1/resources/queues/never").status_code == 404


def test_tenants_see_only_their_topics_and_groups_and_readers_cannot_write(
    broker_factory, tmp_path
):
    b = secured(broker_factory, tmp_path)
    alice = confluent_conf(b, "alice", "PLAIN")
    bob = confluent_conf(b, "bob", "PLAIN")
    assert produce(alice, "acme-only", [b"1"]) == [None]
    assert produce(bob, "same-name", [b"g"]) == [None]
    assert produce(alice, "same-name", [b'"a"']) == [None]
    bob_admin = AdminClient(bob)
    topics = bob_admin.list_topics(timeout=10).topics
    assert "acme-only" not in topics and "same-name" in topics
    # Each tenant's `same-name` is its own; its pushes land in its tenant.
    assert consume(bob, "same-name", 1, "shared-group") == [b"g"]
    with http_for(b, "acme") as acme:
        assert popped(acme, "same-name") == ["a"]
    # The group coordinator is per tenant: alice's live member of `live-group` is not
    # bob's group of that name.
    c = ck.Consumer({**alice, "group.id": "live-group", "auto.offset.reset": "earliest"})
    c.subscribe(["acme-only"])
    for _ in range(30):
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            break
    alice_admin = AdminClient(alice)
    mine = alice_admin.describe_consumer_groups(["live-group"])["live-group"].result(timeout=10)
    theirs = bob_admin.describe_consumer_groups(["live-group"])["live-group"].result(timeout=10)
    c.close()
    assert len(mine.members) == 1
    assert len(theirs.members) == 0
    # A read-only user reads but cannot write.
    reader = confluent_conf(b, "reader", "PLAIN")
    errors = produce({**reader, "message.send.max.retries": 0}, "acme-only", [b"no"])
    assert [e.code() if e else None for e in errors] == [
        ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    # Reading by offset needs no group (group offsets are writes, as pops are over HTTP).
    c = ck.Consumer({**reader, "group.id": "unused", "enable.auto.commit": False})
    c.assign([ck.TopicPartition("acme-only", 0, 0)])
    got = None
    for _ in range(30):
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got = m.value()
            break
    c.close()
    assert got == b"1"


def sasl_handshake(s: socket.socket, mechanism: bytes, corr: int = 1, version: int = 1) -> int:
    s.sendall(request(17, version, corr, struct.pack(">h", len(mechanism)) + mechanism))
    resp = read_frame(s)
    (got, error) = struct.unpack(">ih", resp[:6])
    assert got == corr
    return error


def sasl_authenticate(s: socket.socket, token: bytes, corr: int = 2) -> tuple[int, bytes]:
    s.sendall(request(36, 0, corr, struct.pack(">i", len(token)) + token))
    resp = read_frame(s)
    got, error, n = struct.unpack(">ihh", resp[:8])
    assert got == corr
    message = resp[8 : 8 + n] if n > 0 else b""
    return error, message


def test_raw_refusals(broker_factory, tmp_path):
    b = secured(broker_factory, tmp_path)
    addr = ("127.0.0.1", b.kafka_port)
    metadata_v1 = request(3, 1, 9, struct.pack(">i", -1))
    # A request before the login closes the connection.
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(metadata_v1)
        assert closed_by_server(s, 10)
    # A wrong password: SASL_AUTHENTICATION_FAILED with a message, then closed.
    with socket.create_connection(addr, timeout=10) as s:
        assert sasl_handshake(s, b"PLAIN") == 0
        error, message = sasl_authenticate(s, b"\0alice\0wrong")
        assert error == 58 and b"Authentication failed" in message
        assert closed_by_server(s, 10)
    # PLAIN with NULs in the wrong places or an empty name.
    for token in (b"\0\0alice-pw", b"\0alice\0alice-pw\0x", b"alice-pw"):
        with socket.create_connection(addr, timeout=10) as s:
            assert sasl_handshake(s, b"PLAIN") == 0
            assert sasl_authenticate(s, token)[0] == 58
            assert closed_by_server(s, 10)
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM, closed.
    with socket.create_connection(addr, timeout=10) as s:
        assert sasl_handshake(s, b"GSSAPI") == 33
        assert closed_by_server(s, 10)
    # A good login, then a second handshake: closed.
    with socket.create_connection(addr, timeout=10) as s:
        assert sasl_handshake(s, b"PLAIN") == 0
        assert sasl_authenticate(s, b"\0alice\0alice-pw") == (0, b"")
        s.sendall(metadata_v1)
        assert struct.unpack(">i", read_frame(s)[:4])[0] == 9
        s.sendall(request(17, 1, 3, struct.pack(">h", 5) + b"PLAIN"))
        assert closed_by_server(s, 10)
    # A long SaslAuthenticate frame is refused from its length, before it is read.
    with socket.create_connection(addr, timeout=10) as s:
        assert sasl_handshake(s, b"SCRAM-SHA-256") == 0
        s.sendall(struct.pack(">i", 1 << 20) + b"\0" * 64)
        assert closed_by_server(s, 10)
    # Malformed SCRAM: channel binding asked, then a huge nonce.
    for first in (b"p=tls-unique,,n=alice,r=abc", b"n,,n=alice,r=" + b"x" * 4000):
        with socket.create_connection(addr, timeout=10) as s:
            assert sasl_handshake(s, b"SCRAM-SHA-256") == 0
            assert sasl_authenticate(s, first)[0] == 58
            assert closed_by_server(s, 10)


def test_v0_handshake_then_bare_tokens(broker_factory, tmp_path):
    b = secured(broker_factory, tmp_path)
    with socket.create_connection(("127.0.0.1", b.kafka_port), timeout=10) as s:
        assert sasl_handshake(s, b"PLAIN", version=0) == 0
        s.sendall(frame(b"\0alice\0alice-pw"))
        assert read_frame(s) == b""
        s.sendall(request(3, 1, 9, struct.pack(">i", -1)))
        assert struct.unpack(">i", read_frame(s)[:4])[0] == 9


def test_plain_text_to_the_tls_port_is_closed(broker_factory, tmp_path, certs):
    b = secured(broker_factory, tmp_path, certs)
    with socket.create_connection(("127.0.0.1", b.kafka_port), timeout=10) as s:
        s.sendall(request(18, 0, 1))
        assert closed_by_server(s, 15)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_over_sasl_ssl(broker_factory, tmp_path, certs):
    b = secured(broker_factory, tmp_path, certs)
    x = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=PLAIN",
         "-X", "sasl.username=alice", "-X", "sasl.password=alice-pw",
         "-X", f"ssl.ca.location={certs[0]}"]
    subprocess.run(["kcat", "-b", b.kafka_bootstrap, *x, "-P", "-t", "kc"], input=b"one\ntwo\n",
                   check=True, timeout=60, capture_output=True)
    out = subprocess.run(["kcat", "-b", b.kafka_bootstrap, *x, "-C", "-t", "kc", "-o",
                          "beginning", "-c", "2", "-e"], check=True, timeout=60,
                         capture_output=True)
    assert out.stdout.split() == [b"one", b"two"]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kcat_scram_logs_in_and_round_trips(broker_factory, tmp_path, mechanism):
    # Debian's kcat (librdkafka 2.0.x) repeats its own nonce in front of the server's in the
    # client-final message; Kafka accepts that, and so must this broker.
    b = secured(broker_factory, tmp_path, name=f"kcat-{mechanism.lower()}")
    x = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
         "-X", "sasl.username=alice", "-X", "sasl.password=alice-pw"]
    meta = subprocess.run(["kcat", "-b", b.kafka_bootstrap, *x, "-L", "-m", "10"],
                          timeout=60, capture_output=True)
    assert meta.returncode == 0, meta.stderr
    assert b"1 brokers:" in meta.stdout, meta.stdout
    topic = "ks-" + mechanism[-3:]
    subprocess.run(["kcat", "-b", b.kafka_bootstrap, *x, "-P", "-t", topic],
                   input=b"one\ntwo\n", check=True, timeout=60, capture_output=True)
    out = subprocess.run(["kcat", "-b", b.kafka_bootstrap, *x, "-C", "-t", topic, "-o",
                          "beginning", "-c", "2", "-e"], check=True, timeout=60,
                         capture_output=True)
    assert out.stdout.split() == [b"one", b"two"]
    # A wrong password is still refused.
    bad = [a.replace("alice-pw", "nope") for a in x]
    refused = subprocess.run(["kcat", "-b", b.kafka_bootstrap, *bad, "-L", "-m", "5"],
                             timeout=60, capture_output=True)
    assert refused.returncode != 0
