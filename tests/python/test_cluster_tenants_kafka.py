"""The Kafka door per tenant on a three-node cluster with `cluster_tenant_groups` (issue 13
Done-when 5; review s27 tenants M2): two tenants' SASL users (docs/kafka-compat.md "SASL
users": a user's `tenant` is the tenant it acts as) each produce and consume their own topic
with librdkafka; every node's Metadata, asked by tenant A's user, lists A's topic and never
B's, with A's group's leader leading each of its partitions (and B's likewise); A's consumer
of B's topic name sees none of B's records, and B's topic holds B's records only. Every wait
is bounded; nothing is timed."""

import struct
import time

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition

import cluster_fixtures as cf
from raw_socket import kafka_request, read_kafka_frame
from test_cluster_tenants import ON, QUEUE_A, QUEUE_B, TENANT_A, TENANT_B, push_until_created
from test_cluster_tenants import tenant_leader

USERS = f"""
[[user]]
name = "alice"
password = "alice-pw"
tenant = "{TENANT_A}"
role = "admin"

[[user]]
name = "bob"
password = "bob-pw"
tenant = "{TENANT_B}"
role = "admin"
"""
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw"}
USER_OF = {TENANT_A: "alice", TENANT_B: "bob"}
N = 20  # records per tenant
BOUND_S = 90.0


def client_conf(boot, user):
    return {
        "bootstrap.servers": boot,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
        "topic.metadata.refresh.interval.ms": 2_000,
    }


def s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def login(node, user):
    """A SASL PLAIN connection to `node`'s Kafka port alone, logged in as `user`."""
    import socket

    s = socket.create_connection(("127.0.0.1", node.kafka_port), timeout=15)
    s.sendall(kafka_request(17, 1, 1, s16("PLAIN")))
    assert struct.unpack(">ih", read_kafka_frame(s)[:6]) == (1, 0)
    token = f"\0{user}\0{PASSWORDS[user]}".encode()
    s.sendall(kafka_request(36, 0, 2, struct.pack(">i", len(token)) + token))
    resp = read_kafka_frame(s)
    assert struct.unpack(">ih", resp[:6]) == (2, 0), resp
    return s


class Reader:
    def __init__(self, body):
        self.b, self.at = body, 0

    def take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.b, self.at)
        self.at += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take(">h")
        if n < 0:
            return None
        v = self.b[self.at:self.at + n].decode()
        self.at += n
        return v

    def ints(self):
        return [self.take(">i") for _ in range(self.take(">i"))]


def metadata(node, user):
    """Metadata v1 for every topic, asked of `node` alone as `user`: {topic: {partition:
    leader}} (topics answered with an error are left out) and the controller."""
    s = login(node, user)
    try:
        s.sendall(kafka_request(3, 1, 9, struct.pack(">i", -1)))
        r = Reader(read_kafka_frame(s))
    finally:
        s.close()
    assert r.take(">i") == 9
    for _ in range(r.take(">i")):
        r.take(">i"), r.string(), r.take(">i"), r.string()
    controller = r.take(">i")
    topics = {}
    for _ in range(r.take(">i")):
        error, name, _internal = r.take(">h"), r.string(), r.take(">b")
        parts = {}
        for _ in range(r.take(">i")):
            _perr, pid, leader = r.take(">h"), r.take(">i"), r.take(">i")
            r.ints(), r.ints()
            parts[pid] = leader
        if error == 0:
            topics[name] = parts
    return topics, controller


def wait_metadata(node, user, topic, leader):
    """`node`'s Metadata for `user` once `topic` is listed with `leader` leading every
    partition: the whole answer."""
    deadline = time.monotonic() + cf.FORM_S
    while True:
        topics, controller = metadata(node, user)
        parts = topics.get(topic)
        if parts and set(parts.values()) == {leader} and controller == leader:
            return topics
        assert time.monotonic() < deadline, (user, topic, leader, topics, controller)
        time.sleep(0.2)


def produce(boot, user, topic, values):
    p = Producer({**client_conf(boot, user), "acks": "all",
                  "message.timeout.ms": int(BOUND_S * 1000), "retry.backoff.ms": 200})
    acked, failed = [], []

    def done(err, msg):
        (failed if err is not None else acked).append((err, msg.value().decode()))

    for v in values:
        p.produce(topic, value=v.encode(), partition=0, on_delivery=done)
        p.poll(0)
    assert p.flush(BOUND_S) == 0, "records left unacknowledged"
    assert not failed, failed
    return [v for _, v in acked]


def consume(boot, user, topic, group, expect=None, quiet_s=None):
    """Reads `topic` partition 0 from the start as `user` in consumer group `group`: until
    every one of `expect` came, or for `quiet_s` seconds; the values read."""
    c = Consumer({**client_conf(boot, user), "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + (quiet_s if quiet_s is not None else BOUND_S)
        while time.monotonic() < deadline:
            if expect is not None and set(expect) <= set(got):
                break
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append(msg.value().decode())
    finally:
        c.close()
    if expect is not None:
        assert set(expect) <= set(got), (user, topic, sorted(set(expect) - set(got)))
    return got


def test_each_tenants_kafka_clients_see_only_their_own_topics_led_by_their_group(
        broker_factory, tmp_path):
    users = tmp_path / "users.toml"
    users.write_text(USERS)
    env = {**ON, "QUEEN_KAFKA_SASL_USERS_FILE": str(users)}
    with httpx.Client() as http:
        nodes, _ = cf.started_cluster(broker_factory, http, peer_kafka=True, extra_env=env)
        boot = ",".join(n.kafka_bootstrap for n in nodes.values())
        # Declared over HTTP (a tenant used only over Kafka is declared when its topic's
        # auto-creation reaches the `default` leader: docs/cluster.md "Tenants").
        push_until_created(http, nodes[1].url, TENANT_A, QUEUE_A, ["a-http"])
        push_until_created(http, nodes[1].url, TENANT_B, QUEUE_B, ["b-http"])
        lead = {TENANT_A: tenant_leader(http, nodes, TENANT_A),
                TENANT_B: tenant_leader(http, nodes, TENANT_B)}
        assert (lead[TENANT_A], lead[TENANT_B]) == (1, 2), lead

        # Every node names each tenant's own group's leader as its partitions' leader and
        # its controller, and lists none of the other tenant's topics.
        for i, n in nodes.items():
            seen_a = wait_metadata(n, "alice", QUEUE_A, lead[TENANT_A])
            assert QUEUE_B not in seen_a, (i, seen_a)
            seen_b = wait_metadata(n, "bob", QUEUE_B, lead[TENANT_B])
            assert QUEUE_A not in seen_b, (i, seen_b)

        # Each tenant's librdkafka producer and consumer, bootstrapped at every node.
        values = {t: [f"{t}-{k}" for k in range(N)] for t in (TENANT_A, TENANT_B)}
        queue = {TENANT_A: QUEUE_A, TENANT_B: QUEUE_B}
        for t in (TENANT_A, TENANT_B):
            acked = produce(boot, USER_OF[t], queue[t], values[t])
            assert sorted(acked) == sorted(values[t])
            got = consume(boot, USER_OF[t], queue[t], f"g-{t}", expect=values[t])
            assert not [v for v in got if not v.startswith(t)], got

        # Tenant A reading B's topic name sees nothing of B's (a topic of that name, if any,
        # would be A's own), and B's topic still holds only B's records.
        got = consume(boot, "alice", QUEUE_B, "g-peek", quiet_s=5.0)
        assert not [v for v in got if v.startswith(TENANT_B)], got
        got = consume(boot, "bob", QUEUE_B, "g-check", expect=values[TENANT_B])
        assert not [v for v in got if v.startswith(TENANT_A)], got
        # Nor did the peek create B's topic for A anywhere B can see, or list it to A as B's.
        for i, n in nodes.items():
            topics, _ = metadata(n, "bob")
            assert QUEUE_A not in topics, (i, topics)
