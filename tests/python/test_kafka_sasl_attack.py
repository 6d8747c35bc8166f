"""A hostile review of TLS and SASL on the Kafka port, each break a test: stalled handshakes
and logins, out-of-turn and forged SASL messages, a users file with absurd SCRAM iteration
counts, and tenant isolation and roles across every Kafka API a SASL user can call. Raw
requests are read back by their error codes; names are looked for in the answer's bytes
(a tenant must not find another tenant's topic or group anywhere in one)."""

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct

import pytest

from queen_broker import BrokerError
from raw_socket import closed_by_server
from raw_socket import kafka_request as request
from raw_socket import read_kafka_frame as read_frame
from tls_certs import make_certs

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in requirements.txt")

USERS = """
[[user]]
name = "alice"
password = "alice-pw"
tenant = "acme"
role = "admin"

[[user]]
name = "bob"
password = "bob-pw"
tenant = "globex"
role = "admin"

[[user]]
name = "reader"
password = "reader-pw"
tenant = "acme"
role = "read-only"

[[user]]
name = "writer"
password = "writer-pw"
tenant = "acme"
role = "write-only"
"""
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "reader": "reader-pw", "writer": "writer-pw"}

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_TOPIC_OR_PARTITION = 3
GROUP_ID_NOT_FOUND = 69


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def secured(broker_factory, tmp_path, certs=None, users=USERS, name="attack"):
    path = tmp_path / f"{name}-users.toml"
    path.write_text(users)
    env = {"QUEEN_JWT_SECRET": "x" * 40, "QUEEN_KAFKA_SASL_USERS_FILE": str(path)}
    if certs:
        env["QUEEN_KAFKA_TLS_CERT_FILE"] = str(certs[1])
        env["QUEEN_KAFKA_TLS_KEY_FILE"] = str(certs[2])
    return broker_factory(name, env=env)


def s16(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack(">h", len(raw)) + raw


def arr(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


def handshake(s, mechanism: str, corr: int = 1) -> int:
    s.sendall(request(17, 1, corr, s16(mechanism)))
    got, error = struct.unpack(">ih", read_frame(s)[:6])
    assert got == corr
    return error


def authenticate(s, token: bytes, corr: int = 2) -> tuple[int, bytes, bytes]:
    """SaslAuthenticate v0: (error, message, auth bytes)."""
    s.sendall(request(36, 0, corr, struct.pack(">i", len(token)) + token))
    resp = read_frame(s)
    got, error, n = struct.unpack(">ihh", resp[:8])
    assert got == corr
    message = resp[8 : 8 + max(n, 0)]
    rest = resp[8 + max(n, 0) :]
    (m,) = struct.unpack(">i", rest[:4])
    return error, message, rest[4 : 4 + max(m, 0)]


def login(b, user: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", b.kafka_port), timeout=15)
    assert handshake(s, "PLAIN") == 0
    assert authenticate(s, f"\0{user}\0{PASSWORDS[user]}".encode())[0] == 0
    return s


def call(s, api: int, version: int, body: bytes, corr: int = 7) -> bytes:
    """The answer's body after its correlation id."""
    s.sendall(request(api, version, corr, body))
    resp = read_frame(s)
    assert struct.unpack(">i", resp[:4])[0] == corr
    return resp[4:]


def scram(s, user: str, password: str, forge=None) -> int:
    """A SCRAM-SHA-256 login computed here; `forge` rewrites the nonce of the final message
    (whose proof is still computed correctly over it). The final message's error."""
    assert handshake(s, "SCRAM-SHA-256") == 0
    bare = f"n={user},r={base64.b64encode(os.urandom(18)).decode()}"
    error, _, server_first = authenticate(s, b"n,," + bare.encode())
    assert error == 0
    fields = dict(p.split("=", 1) for p in server_first.decode().split(","))
    nonce = forge(fields["r"], bare[bare.index(",r=") + 3 :]) if forge else fields["r"]
    without_proof = f"c=biws,r={nonce}"
    auth = f"{bare},{server_first.decode()},{without_proof}".encode()
    salted = hashlib.pbkdf2_hmac(
        "sha256", password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
    return authenticate(s, final, corr=3)[0]


def test_stalled_tls_handshakes_and_logins_are_closed(broker_factory, tmp_path, certs):
    b = secured(broker_factory, tmp_path, certs).start()
    addr = ("127.0.0.1", b.kafka_port)
    silent = socket.create_connection(addr, timeout=10)
    # Half a ClientHello: the record header announces more than ever comes.
    half = socket.create_connection(addr, timeout=10)
    half.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    # A finished TLS handshake, an answered ApiVersions, then no login.
    ctx = ssl.create_default_context(cafile=str(certs[0]))
    idle = ctx.wrap_socket(socket.create_connection(addr, timeout=10), server_hostname="127.0.0.1")
    idle.sendall(request(18, 0, 1))
    assert struct.unpack(">i", read_frame(idle)[:4])[0] == 1
    # Each is closed by the handshake deadline (10 s), long before the idle timeout (600 s).
    for s in (silent, half, idle):
        assert closed_by_server(s, 40)
        s.close()
    # The slots were given back: a real client still logs in and produces.
    conf = {
        "bootstrap.servers": b.kafka_bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
        "ssl.ca.location": str(certs[0]),
        "enable.idempotence": False,
    }
    p = ck.Producer(conf)
    errors = []
    p.produce("after-stall", b"x", on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0 and errors == [None]


def test_forged_and_out_of_turn_sasl_messages(broker_factory, tmp_path):
    b = secured(broker_factory, tmp_path).start()
    addr = ("127.0.0.1", b.kafka_port)

    def fresh():
        return socket.create_connection(addr, timeout=15)

    # The SCRAM client here is right: it logs in.
    with fresh() as s:
        assert scram(s, "alice", "alice-pw") == 0
        assert call(s, 3, 1, struct.pack(">i", -1))  # Metadata is served after it
    # A nonce without the server's part, or one that does not start with the client's,
    # is refused even with a proof computed over it.
    for forge in (lambda r, c: c + "forged", lambda r, c: "X" + r, lambda r, c: r[len(c) :]):
        with fresh() as s:
            assert scram(s, "alice", "alice-pw", forge) == SASL_AUTHENTICATION_FAILED
            assert closed_by_server(s, 10)
    # SaslAuthenticate before any SaslHandshake.
    with fresh() as s:
        assert authenticate(s, b"\0alice\0alice-pw")[0] == ILLEGAL_SASL_STATE
        assert closed_by_server(s, 10)
    # Authenticating twice: a second SaslAuthenticate after the login closes.
    with fresh() as s:
        assert handshake(s, "PLAIN") == 0
        assert authenticate(s, b"\0alice\0alice-pw")[0] == 0
        s.sendall(request(36, 0, 5, struct.pack(">i", 15) + b"\0alice\0alice-pw"))
        assert closed_by_server(s, 10)
    # PLAIN acting as another user (authzid), NULs, empty names: refused, closed.
    for token in (b"bob\0alice\0alice-pw", b"\0alice\0alice-pw\0", b"\0\0alice-pw",
                  b"\0alice\0", b"\0\0", b"\0al\0ice\0alice-pw"):
        with fresh() as s:
            assert handshake(s, "PLAIN") == 0
            assert authenticate(s, token)[0] == SASL_AUTHENTICATION_FAILED, token
            assert closed_by_server(s, 10)
    # An authzid naming the user itself is the user.
    with fresh() as s:
        assert handshake(s, "PLAIN") == 0
        assert authenticate(s, b"alice\0alice\0alice-pw")[0] == 0
    # A 100 MB SaslAuthenticate is refused from its announced length: none of it is sent.
    with fresh() as s:
        assert handshake(s, "SCRAM-SHA-256") == 0
        s.sendall(struct.pack(">i", 100 << 20) + request(36, 0, 2)[4:])
        assert closed_by_server(s, 10)
    # The broker is unharmed.
    with fresh() as s:
        assert scram(s, "bob", "bob-pw") == 0


@pytest.mark.parametrize("iterations", [0, 1, 2**31, 2**32 - 1])
def test_stored_scram_iterations_out_of_range_refuse_the_start(
    broker_factory, tmp_path, iterations
):
    key = base64.b64encode(b"k" * 32).decode()
    users = (
        f'[[user]]\nname = "x"\n[user.scram_sha_256]\nsalt = "c2FsdA=="\n'
        f'iterations = {iterations}\nstored_key = "{key}"\nserver_key = "{key}"\n'
    )
    b = secured(broker_factory, tmp_path, users=users, name=f"iter-{iterations}")
    with pytest.raises(BrokerError):
        b.start(ready_timeout=20)
    assert "iterations" in b.log_text()


def produce_as_alice(b, topic: str, n: int) -> None:
    conf = {
        "bootstrap.servers": b.kafka_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
    }
    p = ck.Producer({**conf, "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, f"r{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = ck.Consumer({**conf, "group.id": "g-secret", "enable.auto.commit": False})
    c.commit(offsets=[ck.TopicPartition(topic, 0, 2)], asynchronous=False)
    c.close()


def create_topics_body(name: str, partitions: int, validate_only: bool) -> bytes:
    topic = s16(name) + struct.pack(">ihii", partitions, 1, 0, 0)  # no assignments, configs
    return arr([topic]) + struct.pack(">i?", 10_000, validate_only)


def alter_configs_body(kind: int, name: str, validate_only: bool) -> bytes:
    entry = s16("retention.ms") + s16("60000")
    return arr([struct.pack(">b", kind) + s16(name) + arr([entry])]) + struct.pack(
        ">?", validate_only
    )


def first_error_after_array(body: bytes, head: int) -> int:
    """The error code right after the first array element's name (CreateTopics v2,
    DeleteTopics v1, CreatePartitions v0, DeleteGroups v0 answers): `head` bytes of throttle
    time, the array's count, the name, then the code."""
    (n,) = struct.unpack(">h", body[head + 4 : head + 6])
    return struct.unpack(">h", body[head + 6 + n : head + 8 + n])[0]


def test_tenants_are_isolated_across_every_kafka_api(broker_factory, tmp_path):
    b = secured(broker_factory, tmp_path).start()
    with login(b, "alice") as a:
        # CreateTopics: acme's `secret` with 3 partitions.
        assert first_error_after_array(call(a, 19, 2, create_topics_body("secret", 3, False)), 4) == 0
    produce_as_alice(b, "secret", 3)
    with login(b, "alice") as a, login(b, "bob") as g:
        # Metadata (all topics), DescribeLogDirs, ListGroups: alice finds hers, bob nothing.
        for api, version, body in (
            (3, 1, struct.pack(">i", -1)),
            (35, 1, struct.pack(">i", -1)),
            (16, 1, b""),
        ):
            mine, theirs = call(a, api, version, body), call(g, api, version, body)
            wanted = b"g-secret" if api == 16 else b"secret"
            assert wanted in mine, api
            assert b"secret" not in theirs, api
        # Describe/Alter configs, CreatePartitions, DeleteTopics of acme's topic, by bob:
        # no such topic in globex.
        describe = arr([struct.pack(">b", 2) + s16("secret") + struct.pack(">i", -1)]) + b"\0"
        body = call(g, 32, 1, describe)
        assert struct.unpack(">h", body[8:10])[0] == UNKNOWN_TOPIC_OR_PARTITION
        body = call(g, 33, 0, alter_configs_body(2, "secret", False))
        assert struct.unpack(">h", body[8:10])[0] == UNKNOWN_TOPIC_OR_PARTITION
        grow = arr([s16("secret") + struct.pack(">ii", 5, -1)]) + struct.pack(">i?", 10_000, False)
        assert first_error_after_array(call(g, 37, 0, grow), 4) == UNKNOWN_TOPIC_OR_PARTITION
        delete = arr([s16("secret")]) + struct.pack(">i", 10_000)
        assert first_error_after_array(call(g, 20, 1, delete), 4) == UNKNOWN_TOPIC_OR_PARTITION
        # DeleteRecords v0 (the answer ends with the one partition's error).
        records = arr([s16("secret") + arr([struct.pack(">iq", 0, 2)])]) + struct.pack(">i", 10_000)
        assert struct.unpack(">h", call(g, 21, 0, records)[-2:])[0] == UNKNOWN_TOPIC_OR_PARTITION
        # ListOffsets v1 and Fetch v4 of acme's topic by bob: unknown.
        lo = struct.pack(">i", -1) + arr([s16("secret") + arr([struct.pack(">iq", 0, -1)])])
        body = call(g, 2, 1, lo)
        assert struct.unpack(">h", body[4 + 2 + 6 + 4 + 4 : 4 + 2 + 6 + 4 + 4 + 2])[0] == (
            UNKNOWN_TOPIC_OR_PARTITION
        )
        fetch = struct.pack(">iiiib", -1, 0, 1, 1 << 20, 0) + arr(
            [s16("secret") + arr([struct.pack(">iqi", 0, 0, 1 << 20)])]
        )
        body = call(g, 1, 4, fetch)
        assert b"r0" not in body
        assert struct.unpack(">h", body[4 + 4 + 8 + 4 + 4 : 4 + 4 + 8 + 4 + 4 + 2])[0] == (
            UNKNOWN_TOPIC_OR_PARTITION
        )
        # Groups: OffsetFetch v1 of acme's group by bob: no offset; DeleteGroups: not found;
        # DescribeGroups: dead, no members.
        of = s16("g-secret") + arr([s16("secret") + arr([struct.pack(">i", 0)])])
        body = call(g, 9, 1, of)
        mine = call(a, 9, 1, of)
        theirs_offset = struct.unpack(">q", body[4 + 2 + 6 + 4 + 4 : 4 + 2 + 6 + 4 + 4 + 8])[0]
        alices_offset = struct.unpack(">q", mine[4 + 2 + 6 + 4 + 4 : 4 + 2 + 6 + 4 + 4 + 8])[0]
        assert (alices_offset, theirs_offset) == (2, -1)
        body = call(g, 42, 0, arr([s16("g-secret")]))
        assert first_error_after_array(body, 4) == GROUP_ID_NOT_FOUND
        # CreateTopics of the same name in globex: its own, with its own partition count.
        assert first_error_after_array(call(g, 19, 2, create_topics_body("secret", 1, False)), 4) == 0
        # InitProducerId: each tenant's producer ids are its own state; bob's grant does
        # not disturb alice's producer (her next idempotent produce is still in order).
        body = call(g, 22, 0, struct.pack(">hi", -1, 60_000))
        assert struct.unpack(">h", body[4:6])[0] == 0
    # Alice's topic, offsets and group survived everything bob did.
    produce_as_alice(b, "secret", 1)
    with login(b, "alice") as a:
        body = call(a, 2, 1, lo)
        assert struct.unpack(">q", body[-8:])[0] == 4  # high watermark: 3 + 1 records
        earliest = struct.pack(">i", -1) + arr([s16("secret") + arr([struct.pack(">iq", 0, -2)])])
        assert struct.unpack(">q", call(a, 2, 1, earliest)[-8:])[0] == 0  # nothing deleted
        body = call(a, 3, 1, arr([s16("secret")]))
        assert body.count(struct.pack(">h", 0) + struct.pack(">i", 2)) >= 1  # partition 2 exists
        body = call(a, 9, 1, of)
        assert struct.unpack(">q", body[4 + 2 + 6 + 4 + 4 : 4 + 2 + 6 + 4 + 4 + 8])[0] == 2


def test_read_only_and_write_only_users_are_refused_what_their_roles_do_not_reach(
    broker_factory, tmp_path
):
    b = secured(broker_factory, tmp_path).start()
    with login(b, "alice") as a:
        assert first_error_after_array(call(a, 19, 2, create_topics_body("t", 2, False)), 4) == 0
    produce_as_alice(b, "t", 1)
    with login(b, "reader") as r:
        # CreateTopics, validate-only too.
        for validate in (False, True):
            body = call(r, 19, 2, create_topics_body("new-t", 1, validate))
            assert first_error_after_array(body, 4) == TOPIC_AUTHORIZATION_FAILED
        # DeleteTopics and CreatePartitions of an existing topic.
        body = call(r, 20, 1, arr([s16("t")]) + struct.pack(">i", 10_000))
        assert first_error_after_array(body, 4) == TOPIC_AUTHORIZATION_FAILED
        for validate in (False, True):
            grow = arr([s16("t") + struct.pack(">ii", 4, -1)]) + struct.pack(">i?", 10_000, validate)
            assert first_error_after_array(call(r, 37, 0, grow), 4) == TOPIC_AUTHORIZATION_FAILED
        # AlterConfigs of a topic (29) and of the broker (31), validate-only too.
        for validate in (False, True):
            body = call(r, 33, 0, alter_configs_body(2, "t", validate))
            assert struct.unpack(">h", body[8:10])[0] == TOPIC_AUTHORIZATION_FAILED
            body = call(r, 33, 0, alter_configs_body(4, "0", validate))
            assert struct.unpack(">h", body[8:10])[0] == CLUSTER_AUTHORIZATION_FAILED
        # DeleteRecords is an admin's.
        records = arr([s16("t") + arr([struct.pack(">iq", 0, 1)])]) + struct.pack(">i", 10_000)
        assert struct.unpack(">h", call(r, 21, 0, records)[-2:])[0] == TOPIC_AUTHORIZATION_FAILED
        # InitProducerId: final, not retriable.
        body = call(r, 22, 0, struct.pack(">hi", -1, 60_000))
        assert struct.unpack(">h", body[4:6])[0] == CLUSTER_AUTHORIZATION_FAILED
        # JoinGroup v0: error first.
        join = s16("g-r") + struct.pack(">i", 10_000) + s16("") + s16("consumer") + arr(
            [s16("range") + struct.pack(">i", 0)]
        )
        assert struct.unpack(">h", call(r, 11, 0, join)[:2])[0] == GROUP_AUTHORIZATION_FAILED
        # OffsetCommit v2 and DeleteGroups v0.
        commit = s16("g-secret") + struct.pack(">i", -1) + s16("") + struct.pack(">q", -1) + arr(
            [s16("t") + arr([struct.pack(">iq", 0, 1) + struct.pack(">h", -1)])]
        )
        body = call(r, 8, 2, commit)
        assert struct.unpack(">h", body[-2:])[0] == GROUP_AUTHORIZATION_FAILED
        body = call(r, 42, 0, arr([s16("g-secret")]))
        assert first_error_after_array(body, 4) == GROUP_AUTHORIZATION_FAILED
        # Still readable: Metadata lists the topic with its 2 partitions.
        body = call(r, 3, 1, arr([s16("t")]))
        assert b"\x00\x01t" in body
    # Nothing the reader tried took effect: alice's group still has its offset.
    with login(b, "alice") as a:
        of = s16("g-secret") + arr([s16("t") + arr([struct.pack(">i", 0)])])
        body = call(a, 9, 1, of)
        assert struct.unpack(">q", body[4 + 2 + 1 + 4 + 4 : 4 + 2 + 1 + 4 + 4 + 8])[0] == 2
    # A write-only user produces (Metadata tells it the partitions) but cannot fetch.
    conf = {
        "bootstrap.servers": b.kafka_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": "writer",
        "sasl.password": "writer-pw",
    }
    p = ck.Producer({**conf, "enable.idempotence": False})
    errors = []
    p.produce("t", b"w", partition=1, on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0 and errors == [None]
    with login(b, "writer") as w:
        fetch = struct.pack(">iiiib", -1, 0, 1, 1 << 20, 0) + arr(
            [s16("t") + arr([struct.pack(">iqi", 0, 0, 1 << 20)])]
        )
        body = call(w, 1, 4, fetch)
        assert struct.unpack(">h", body[4 + 4 + 3 + 4 + 4 : 4 + 4 + 3 + 4 + 4 + 2])[0] == (
            TOPIC_AUTHORIZATION_FAILED
        )
