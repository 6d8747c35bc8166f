"""The second round on TLS and SASL (issue 10): the login deadline holds for every step of
a login, strangers have their own caps (in all and per source IP) and a few frames at most,
failed logins are counted and logged without the password, the HTTP API cannot be left open
by mistake beside SASL, SASL without TLS is warned about, group membership calls and
DescribeLogDirs check the user's role, and a users file that does not parse is not quoted."""

import shutil
import socket
import struct
import subprocess
import time

import httpx
import pytest

from queen_broker import BrokerError
from raw_socket import closed_by_server
from raw_socket import kafka_request as request
from raw_socket import read_kafka_frame as read_frame
from test_kafka_sasl_attack import USERS, arr, authenticate, call, handshake, login, s16
from tls_certs import make_certs

GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
SASL_AUTHENTICATION_FAILED = 58


def sasl_broker(broker_factory, tmp_path, name="hard", users=USERS, jwt=True, certs=None, **env):
    path = tmp_path / f"{name}-users.toml"
    path.write_text(users)
    full = {"QUEEN_KAFKA_SASL_USERS_FILE": str(path), "QUEEN_METRICS_REQUIRE_AUTH": "false"}
    if jwt:
        full["QUEEN_JWT_SECRET"] = "x" * 40
    if certs:
        full["QUEEN_KAFKA_TLS_CERT_FILE"] = str(certs[1])
        full["QUEEN_KAFKA_TLS_KEY_FILE"] = str(certs[2])
    full.update(env)
    return broker_factory(name, env=full)


def connect_from(b, source: str) -> socket.socket:
    """A connection to the Kafka port from `source` (any 127.x address is this host)."""
    return socket.create_connection(
        ("127.0.0.1", b.kafka_port), timeout=10, source_address=(source, 0)
    )


def api_versions_answered(s, corr: int = 1) -> bool:
    s.sendall(request(18, 0, corr))
    return struct.unpack(">i", read_frame(s)[:4])[0] == corr


def flexible_call(s, api: int, version: int, body: bytes, corr: int = 7) -> bytes:
    """A request with a v2 header; the answer after its correlation id."""
    s.sendall(request(api, version, corr, body, tags=True))
    resp = read_frame(s)
    assert struct.unpack(">i", resp[:4])[0] == corr
    return resp[4:]


def failures(b, mechanism: str) -> float:
    text = httpx.get(f"{b.url}/metrics/prometheus", timeout=10, verify=b.verify).text
    line = f'queen_kafka_auth_failures_total{{mechanism="{mechanism}"}} '
    found = [l for l in text.splitlines() if l.startswith(line)]
    assert found, f"no {line!r} in the scrape"
    return float(found[0].split()[-1])


def test_a_frame_trickled_past_the_login_deadline_is_not_served(broker_factory, tmp_path):
    b = sasl_broker(broker_factory, tmp_path).start()
    s = socket.create_connection(("127.0.0.1", b.kafka_port), timeout=10)
    frame = request(18, 0, 1)
    # The length and a byte of the body, then nothing: the body read used to get its own
    # 60 s I/O timeout, past the 10 s login deadline.
    s.sendall(frame[:5])
    assert closed_by_server(s, 30)
    s.close()


def test_more_frames_than_a_login_needs_close_the_connection(broker_factory, tmp_path):
    b = sasl_broker(broker_factory, tmp_path).start()
    s = socket.create_connection(("127.0.0.1", b.kafka_port), timeout=10)
    # Eight ApiVersions in one write: seven are answered (what a login may need and two of
    # margin), then closed.
    s.sendall(b"".join(request(18, 0, corr) for corr in range(1, 9)))
    for corr in range(1, 8):
        assert struct.unpack(">i", read_frame(s)[:4])[0] == corr
    assert closed_by_server(s, 15)
    s.close()
    # A real login of four frames is within the cap.
    with login(b, "alice") as a:
        assert api_versions_answered(a, 9)


def test_strangers_are_capped_in_all_and_per_source_ip(broker_factory, tmp_path):
    b = sasl_broker(
        broker_factory,
        tmp_path,
        QUEEN_KAFKA_MAX_PRELOGIN_CONNECTIONS="3",
        QUEEN_KAFKA_MAX_PRELOGIN_CONNECTIONS_PER_IP="2",
    ).start()
    held = [connect_from(b, "127.0.0.1"), connect_from(b, "127.0.0.1")]
    for s in held:
        assert api_versions_answered(s)
    # A third stranger from the same IP is closed at accept; another IP still gets in.
    third = connect_from(b, "127.0.0.1")
    assert closed_by_server(third, 5)
    other = connect_from(b, "127.0.0.2")
    assert api_versions_answered(other)
    # The gate is full (3): a newcomer from a third IP gets in, and the OLDEST stranger is
    # closed for it, so idle strangers cannot keep new logins out.
    newest = connect_from(b, "127.0.0.3")
    assert api_versions_answered(newest)
    assert closed_by_server(held[0], 5)
    # A stranger that logs in gives its slot back and is no stranger any more: it is
    # never evicted.
    s = held[1]
    assert handshake(s, "PLAIN", corr=2) == 0
    assert authenticate(s, b"\0alice\0alice-pw", corr=3)[0] == 0
    # The gate holds `other` and `newest`: a1 fits, a2 closes the oldest (`other`).
    a1 = connect_from(b, "127.0.0.1")
    assert api_versions_answered(a1)
    a2 = connect_from(b, "127.0.0.1")
    assert api_versions_answered(a2)
    assert closed_by_server(other, 5)
    # 127.0.0.1 holds a1 and a2 now: its share is full, and nobody is evicted for a third.
    assert closed_by_server(connect_from(b, "127.0.0.1"), 5)
    assert api_versions_answered(newest, 12)
    # Logged-in connections are not strangers: the logged-in one still works.
    assert api_versions_answered(s, 11)
    for c in held + [other, newest, a1, a2]:
        c.close()


def metric(b, line: str) -> float:
    text = httpx.get(f"{b.url}/metrics/prometheus", timeout=10, verify=b.verify).text
    found = [l for l in text.splitlines() if l.startswith(line + " ")]
    assert found, f"no {line!r} in the scrape"
    return float(found[0].split()[-1])


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_idle_strangers_filling_the_gate_do_not_keep_a_login_out(broker_factory, tmp_path):
    # The default caps: 64 strangers, 16 per source. 16 idle sockets from each of four
    # addresses fill the gate; a real client must still log in, and the oldest idle
    # strangers are closed for it.
    b = sasl_broker(broker_factory, tmp_path, name="crowd").start()
    idle = [connect_from(b, f"127.0.0.{2 + i // 16}") for i in range(64)]
    # Every one is admitted (each answers), so the gate holds 64 now.
    for n, s in enumerate(idle):
        assert api_versions_answered(s, n + 1)
    assert metric(b, "queen_kafka_prelogin_evictions_total") == 0
    x = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
         "-X", "sasl.username=alice", "-X", "sasl.password=alice-pw"]
    meta = subprocess.run(["kcat", "-b", b.kafka_bootstrap, *x, "-L", "-m", "10"],
                          timeout=60, capture_output=True)
    assert meta.returncode == 0, meta.stderr
    assert metric(b, "queen_kafka_prelogin_evictions_total") >= 1
    assert closed_by_server(idle[0], 5)
    assert api_versions_answered(idle[-1], 99), "the newest strangers stay"
    for s in idle:
        s.close()
    # Evicted connections leave the open-connections gauge like any other.
    for _ in range(100):
        if metric(b, "queen_kafka_connections") == 0:
            break
        time.sleep(0.1)
    assert metric(b, "queen_kafka_connections") == 0


def test_a_success_does_not_forgive_another_users_failures(broker_factory, tmp_path):
    b = sasl_broker(broker_factory, tmp_path, name="forgive").start()
    took = []
    for _ in range(4):
        with socket.create_connection(("127.0.0.1", b.kafka_port), timeout=15) as s:
            assert handshake(s, "PLAIN") == 0
            start = time.monotonic()
            assert authenticate(s, b"\0alice\0guess")[0] == SASL_AUTHENTICATION_FAILED
            took.append(time.monotonic() - start)
        # A right login for another user from the same address between guesses.
        with login(b, "writer") as w:
            assert api_versions_answered(w)
    # The delays double (0.2, 0.4, 0.8, 1.6 s): the successes reset nothing.
    assert took[3] >= 1.5, took


def garbage_adds_a_count_not_log_lines(b, counter: str) -> None:
    """200 connections that each send `ff ff ff ff` (not a TLS record; an impossible frame
    length) and are closed: the counter rises by 200, the log by one rate-limited line."""
    before = metric(b, counter)
    lines_before = len(b.log_text().splitlines())
    for _ in range(200):
        with socket.create_connection(("127.0.0.1", b.kafka_port), timeout=10) as s:
            s.sendall(b"\xff\xff\xff\xff")
            assert closed_by_server(s, 10)
    assert metric(b, counter) - before == 200
    assert len(b.log_text().splitlines()) - lines_before < 5


def test_strangers_bad_frames_and_tls_failures_do_not_flood_the_log(
    broker_factory, tmp_path, certs
):
    tls = sasl_broker(broker_factory, tmp_path, name="noisy", certs=certs).start()
    garbage_adds_a_count_not_log_lines(tls, "queen_kafka_tls_handshake_failures_total")
    plain = sasl_broker(broker_factory, tmp_path, name="noisy-plain").start()
    garbage_adds_a_count_not_log_lines(plain, "queen_kafka_bad_frames_total")


def test_failed_logins_are_counted_and_logged_without_the_password(broker_factory, tmp_path):
    b = sasl_broker(broker_factory, tmp_path).start()
    assert failures(b, "PLAIN") == 0
    assert failures(b, "SCRAM-SHA-256") == 0
    for user, password in (("alice", "wrong-pw-1a2b3c"), ("nobody-here", "wrong-pw-4d5e6f")):
        with socket.create_connection(("127.0.0.1", b.kafka_port), timeout=15) as s:
            assert handshake(s, "PLAIN") == 0
            error, message, _ = authenticate(s, f"\0{user}\0{password}".encode())
            assert error == SASL_AUTHENTICATION_FAILED
            assert message == b"Authentication failed: invalid credentials"
            assert closed_by_server(s, 15)
    assert failures(b, "PLAIN") == 2
    # A failed SCRAM first message counts under its mechanism.
    with socket.create_connection(("127.0.0.1", b.kafka_port), timeout=15) as s:
        assert handshake(s, "SCRAM-SHA-256") == 0
        assert authenticate(s, b"n,,n=ghost,r=abc")[0] == SASL_AUTHENTICATION_FAILED
    assert failures(b, "SCRAM-SHA-256") == 1
    # Back-off delays failures; it does not lock the user out.
    with login(b, "alice") as a:
        assert api_versions_answered(a)
    log = b.log_text()
    assert "kafka SASL login failed" in log and '"alice"' in log
    assert "wrong-pw" not in log


def test_sasl_users_without_jwt_secret_need_the_explicit_opt_in(broker_factory, tmp_path):
    refused = sasl_broker(broker_factory, tmp_path, name="open", jwt=False)
    with pytest.raises(BrokerError):
        refused.start(ready_timeout=20)
    log = refused.log_text()
    assert "jwt_secret" in log and "http_auth_disabled" in log
    meant = sasl_broker(
        broker_factory, tmp_path, name="meant", jwt=False, QUEEN_HTTP_AUTH_DISABLED="true"
    ).start()
    with login(meant, "alice") as a:
        assert api_versions_answered(a)
    # Both at once is a contradiction.
    both = sasl_broker(broker_factory, tmp_path, name="both", QUEEN_HTTP_AUTH_DISABLED="true")
    with pytest.raises(BrokerError):
        both.start(ready_timeout=20)
    assert "http_auth_disabled" in both.log_text()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def test_sasl_without_tls_is_warned_about_at_start(broker_factory, tmp_path, certs):
    plain = sasl_broker(broker_factory, tmp_path, name="plain").start()
    assert "asks SASL logins without TLS" in plain.log_text()
    tls = sasl_broker(broker_factory, tmp_path, name="tls", certs=certs).start()
    assert "kafka port is serving" in tls.log_text()
    assert "asks SASL logins without TLS" not in tls.log_text()


def test_group_membership_calls_need_a_group_role(broker_factory, tmp_path):
    b = sasl_broker(broker_factory, tmp_path).start()
    with login(b, "writer") as w:
        # SyncGroup v0: error, then the assignment.
        sync = s16("g") + struct.pack(">i", 1) + s16("m-1") + arr([])
        assert struct.unpack(">h", call(w, 14, 0, sync)[:2])[0] == GROUP_AUTHORIZATION_FAILED
        # Heartbeat v0: the error alone.
        beat = s16("g") + struct.pack(">i", 1) + s16("m-1")
        assert struct.unpack(">h", call(w, 12, 0, beat)[:2])[0] == GROUP_AUTHORIZATION_FAILED
        # LeaveGroup v0, and v3 evicting a static member by its instance id: refused at the
        # top level (after v3's throttle time), with no member list.
        leave = s16("g") + s16("m-1")
        assert struct.unpack(">h", call(w, 13, 0, leave)[:2])[0] == GROUP_AUTHORIZATION_FAILED
        static = s16("g") + arr([s16("") + s16("consumer-1")])
        body = call(w, 13, 3, static)
        assert struct.unpack(">hi", body[4:10]) == (GROUP_AUTHORIZATION_FAILED, 0)
    # The same calls from a user with the role reach the coordinator (unknown member).
    with login(b, "alice") as a:
        beat = s16("g") + struct.pack(">i", 1) + s16("m-1")
        assert struct.unpack(">h", call(a, 12, 0, beat)[:2])[0] != GROUP_AUTHORIZATION_FAILED


def test_describe_log_dirs_is_an_admins(broker_factory, tmp_path):
    b = sasl_broker(broker_factory, tmp_path).start()
    every = b"\x00\x00"  # v4: a null (all) compact topic array, no tags
    for user in ("reader", "writer"):
        with login(b, user) as s:
            body = flexible_call(s, 35, 4, every)
            # Header tags, throttle, then the top-level error and an empty result list.
            assert struct.unpack(">h", body[5:7])[0] == CLUSTER_AUTHORIZATION_FAILED
            assert body[7] == 1  # compact array of 0 results
            assert str(b.data_dir).encode() not in body
    with login(b, "alice") as a:
        body = flexible_call(a, 35, 4, every)
        assert struct.unpack(">h", body[5:7])[0] == 0
        assert body[7] == 2  # one log dir


def test_a_users_file_that_does_not_parse_is_not_quoted(broker_factory, tmp_path):
    users = '[[user]]\nname = "alice"\npasword = "hunter2-oops"\ntenant = "acme"\n'
    b = sasl_broker(broker_factory, tmp_path, name="typo", users=users)
    with pytest.raises(BrokerError):
        b.start(ready_timeout=20)
    log = b.log_text()
    assert "kafka_sasl_users_file" in log and "line 3" in log
    assert "hunter2" not in log


def test_list_groups_without_the_group_role_lists_nothing(broker_factory, tmp_path):
    b = sasl_broker(broker_factory, tmp_path, name="lg").start()
    with login(b, "alice") as a, login(b, "writer") as w:
        # alice holds a live member of g-live (JoinGroup v0, session 10 s).
        join = s16("g-live") + struct.pack(">i", 10_000) + s16("") + s16("consumer") + arr(
            [s16("range") + struct.pack(">i", 0)]
        )
        assert struct.unpack(">h", call(a, 11, 0, join)[:2])[0] == 0
        assert b"g-live" in call(a, 16, 1, b"")
        # ListGroups v1: throttle, error, groups. The writer gets the error and no group.
        body = call(w, 16, 1, b"")
        assert struct.unpack(">hi", body[4:10]) == (GROUP_AUTHORIZATION_FAILED, 0)
        assert b"g-live" not in body
