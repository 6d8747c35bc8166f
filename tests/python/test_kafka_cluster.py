"""Kafka clients on a three-node cluster find the leader (issue 13; docs/kafka-compat.md
"Cluster").

Every member knows the others' Kafka ports (`peer_kafka`). kafka-python and confluent-kafka
(librdkafka) are bootstrapped at a FOLLOWER only: its Metadata lists the three members as
brokers with the leader as controller and partition leader, so a topic created through it
lands on the leader, records produced with acks=all are acknowledged, and consumer groups
(whose coordinator FindCoordinator names: the leader) read them all back in order per
partition. Then the leader is killed with SIGKILL: the same producers, still bootstrapped at
the follower, produce again once a new leader is elected, and every acknowledged record is
read back. Every wait is bounded; nothing is timed.
"""

import struct
import time

import httpx
from confluent_kafka import Consumer as CConsumer
from confluent_kafka import Producer as CProducer
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaConnectionError

from cluster_fixtures import FORM_S, started_cluster, wait_settled
from raw_socket import kafka_connect, kafka_request, read_kafka_frame

TOPIC = "kc"
PARTITIONS = 3
N = 30  # records per client and round
BOUND_S = 90.0  # the bound on every client wait (a failover included)


def field(row, *names):
    """The first of `names` the admin client's answer row holds (its keys vary by version)."""
    for n in names:
        if n in row:
            return row[n]
    raise KeyError(f"none of {names} in {row}")


def kp_producer(bootstrap):
    return KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        retries=1_000,
        retry_backoff_ms=200,
        request_timeout_ms=10_000,
        max_block_ms=int(BOUND_S * 1000),
        metadata_max_age_ms=2_000,
    )


def cf_producer(bootstrap):
    return CProducer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "message.timeout.ms": int(BOUND_S * 1000),
        "retry.backoff.ms": 200,
        "topic.metadata.refresh.interval.ms": 2_000,
    })


def produce_kp(p, tag, start):
    """N records through kafka-python, partition k % 3; the acknowledged values."""
    futures = [(f"{tag}-{k}", p.send(TOPIC, value=f"{tag}-{k}".encode(), partition=k % PARTITIONS))
               for k in range(start, start + N)]
    p.flush(timeout=BOUND_S)
    acked = []
    for value, f in futures:
        f.get(timeout=BOUND_S)  # raises unless acknowledged
        acked.append(value)
    return acked


def produce_cf(p, tag, start):
    """N records through librdkafka, partition k % 3; the acknowledged values."""
    acked, failed = [], []

    def done(err, msg):
        (failed if err is not None else acked).append((err, msg.value().decode()))

    for k in range(start, start + N):
        p.produce(TOPIC, value=f"{tag}-{k}".encode(), partition=k % PARTITIONS, on_delivery=done)
        p.poll(0)
    left = p.flush(BOUND_S)
    assert left == 0, f"{left} records not delivered in {BOUND_S} s"
    assert not failed, failed[:5]
    return [v for _, v in acked]


def in_order_per_partition(rows):
    """rows: (partition, offset, value); each client's values rise in offset order (a
    producer's retry of a record it sent once may repeat it right after, never later)."""
    for part in range(PARTITIONS):
        seen = {}
        for _, _, value in sorted(r for r in rows if r[0] == part):
            tag, k = value.rsplit("-", 1)
            assert int(k) >= seen.get(tag, -1), f"partition {part}: {value} after {seen[tag]}"
            assert int(k) % PARTITIONS == part, value
            seen[tag] = int(k)


def consume_kp(bootstrap, group, want):
    """Reads with a kafka-python consumer group until every value of `want` came."""
    deadline = time.monotonic() + BOUND_S
    while True:
        # Its start probes one broker of the Metadata it got and raises if that one is the
        # killed node (still a member, so still listed): it is made again (bounded).
        try:
            c = KafkaConsumer(
                TOPIC,
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                session_timeout_ms=10_000,
                heartbeat_interval_ms=500,
                metadata_max_age_ms=2_000,
            )
            break
        except KafkaConnectionError:
            assert time.monotonic() < deadline, f"{group}: no consumer could start"
    rows = []
    try:
        while set(want) - {v for _, _, v in rows}:
            assert time.monotonic() < deadline, (
                f"{group}: missing {sorted(set(want) - {v for _, _, v in rows})[:10]}")
            try:
                polled = c.poll(timeout_ms=1000)
            except KafkaConnectionError:
                # kafka-python raises a failed connect to the killed node (still listed);
                # the next poll goes on with the others.
                continue
            for part, records in polled.items():
                rows += [(part.partition, r.offset, r.value.decode()) for r in records]
        c.commit()
    finally:
        c.close()
    return rows


def consume_cf(bootstrap, group, want):
    """Reads with a librdkafka consumer group until every value of `want` came."""
    c = CConsumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 500,
        "topic.metadata.refresh.interval.ms": 2_000,
    })
    c.subscribe([TOPIC])
    rows = []
    deadline = time.monotonic() + BOUND_S
    try:
        while set(want) - {v for _, _, v in rows}:
            assert time.monotonic() < deadline, (
                f"{group}: missing {sorted(set(want) - {v for _, _, v in rows})[:10]}")
            m = c.poll(1.0)
            if m is None or m.error() is not None:
                continue
            rows.append((m.partition(), m.offset(), m.value().decode()))
        c.commit(asynchronous=False)
    finally:
        c.close()
    return rows


def kstr(v: str) -> bytes:
    return struct.pack(">h", len(v)) + v.encode()


def follower_group_codes(node, group):
    """SyncGroup v1, LeaveGroup v1 and OffsetCommit v2 for a member of `group` sent to `node`:
    the error code of each answer."""
    sync = kstr(group) + struct.pack(">i", 1) + kstr("m-1") + struct.pack(">i", 0)
    leave = kstr(group) + kstr("m-1")
    commit = (kstr(group) + struct.pack(">i", 1) + kstr("m-1") + struct.pack(">q", -1)
              + struct.pack(">i", 1) + kstr(TOPIC) + struct.pack(">i", 1)
              + struct.pack(">iq", 0, 5) + struct.pack(">h", -1))
    s = kafka_connect(node)
    try:
        s.sendall(kafka_request(14, 1, 1, sync))
        body = read_kafka_frame(s)
        (sync_code,) = struct.unpack(">h", body[8:10])  # corr, throttle, error
        s.sendall(kafka_request(13, 1, 2, leave))
        body = read_kafka_frame(s)
        (leave_code,) = struct.unpack(">h", body[8:10])
        s.sendall(kafka_request(8, 2, 3, commit))
        body = read_kafka_frame(s)
        # corr, [topic: name, [partition, error]]
        at = 4 + 4 + 2 + len(TOPIC) + 4 + 4
        (commit_code,) = struct.unpack(">h", body[at:at + 2])
    finally:
        s.close()
    return sync_code, leave_code, commit_code


def test_kafka_clients_bootstrapped_at_a_follower_reach_the_leader(broker_factory):
    with httpx.Client(timeout=10.0) as http:
        nodes, lead = started_cluster(broker_factory, http, peer_kafka=True)
        follower = next(i for i in sorted(nodes) if i != lead)
        boot = nodes[follower].kafka_bootstrap

        # The follower's Metadata: three brokers, the leader as controller.
        admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=30_000)
        try:
            cluster = admin.describe_cluster()
            brokers = {field(b, "broker_id", "node_id"): (b["host"], b["port"])
                       for b in cluster["brokers"]}
            assert brokers == {i: ("127.0.0.1", n.kafka_port) for i, n in nodes.items()}, cluster
            assert cluster["controller_id"] == lead, cluster
            # CreateTopics goes to the controller, the leader: the follower's engine plans
            # nothing.
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
            deadline = time.monotonic() + FORM_S
            while True:
                described = admin.describe_topics([TOPIC])
                parts = described[0]["partitions"] if described else []
                if described and described[0]["error_code"] == 0 and len(parts) == PARTITIONS:
                    break
                assert time.monotonic() < deadline, described
                time.sleep(0.2)
            for p in parts:
                assert field(p, "leader_id", "leader") == lead, described
                assert sorted(field(p, "replica_nodes", "replicas")) == sorted(nodes), described
        finally:
            admin.close()

        kp = kp_producer(boot)
        cf = cf_producer(boot)
        acked = produce_kp(kp, "kp", 0) + produce_cf(cf, "cf", 0)
        assert len(acked) == 2 * N

        rows = consume_kp(boot, "kc-kafka-python", acked)
        in_order_per_partition(rows)
        rows = consume_cf(boot, "kc-librdkafka", acked)
        in_order_per_partition(rows)

        # A member's group calls sent to the follower send it to the coordinator: the
        # follower's in-memory generations are not the group's (review s22 kmeta M4; Java's
        # commitSync throws on ILLEGAL_GENERATION instead of finding the coordinator).
        assert follower_group_codes(nodes[follower], "kc-kafka-python") == (16, 16, 16)

        # Listing groups asks every broker: the followers coordinate none and say so without
        # an error, which would fail the whole listing (review s23 lead M4).
        admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=30_000)
        try:
            listed = {g["group_id"] for g in admin.list_groups()}
        finally:
            admin.close()
        assert {"kc-kafka-python", "kc-librdkafka"} <= listed, listed

        # The leader dies without a word; the same producers, bootstrapped at the follower,
        # produce again once the other two elected a new leader.
        nodes[lead].kill()
        rest = {i: n for i, n in nodes.items() if i != lead}
        views = wait_settled(http, rest)
        new_lead = next(i for i, v in views.items() if v["role"] == "leader")
        assert new_lead != lead
        acked += produce_kp(kp, "kp", N) + produce_cf(cf, "cf", N)
        kp.close(timeout=10)

        # Everything acknowledged is there, read by a new group bootstrapped at a survivor;
        # the first groups resume from their committed offsets.
        rows = consume_kp(boot, "kc-after", acked)
        in_order_per_partition(rows)
        rows = consume_cf(boot, "kc-librdkafka", acked[2 * N:])
        assert {v for _, _, v in rows} <= set(acked[2 * N:]), (
            "the group's committed offsets were lost in the failover", rows[:5])

        # The admin client asks one broker and does not retry another: the dead node may be
        # the one it picks, so it asks again (bounded).
        deadline = time.monotonic() + FORM_S
        while True:
            admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=10_000)
            try:
                cluster = admin.describe_cluster()
                break
            except KafkaConnectionError:
                assert time.monotonic() < deadline, "no broker answered DescribeCluster"
            finally:
                admin.close()
        assert cluster["controller_id"] == new_lead, cluster
        assert lead in {field(b, "broker_id", "node_id") for b in cluster["brokers"]}, (
            "a killed voter is still a member and still listed", cluster)
