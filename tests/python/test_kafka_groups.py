"""Kafka consumer groups against the real binary (kafka-port/src/group, docs/kafka-compat.md
"Consumer groups"): kafka-python consumers split a topic's partitions and rebalance when a
member joins or leaves; committed offsets (with their metadata) survive a kill -9; kcat's
balanced consumer (librdkafka) consumes with a group id."""

import shutil
import subprocess
import threading
import time

import pytest

kafka = pytest.importorskip("kafka", reason="kafka-python is in scripts/lib/requirements.txt")
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.structs import OffsetAndMetadata  # noqa: E402

PARTITIONS = 4
ENV = {"QUEEN_KAFKA_DEFAULT_PARTITIONS": str(PARTITIONS)}


@pytest.fixture
def gbroker(broker_factory):
    return broker_factory("groups", env=ENV).start()


def produce(broker, topic: str, per_partition: int) -> None:
    p = KafkaProducer(bootstrap_servers=broker.kafka_bootstrap, acks="all")
    for part in range(PARTITIONS):
        for i in range(per_partition):
            p.send(topic, value=f"{part}-{i}".encode(), partition=part)
    p.flush()
    p.close()


def consumer(broker, group: str, topic: str | None = None, **kw) -> KafkaConsumer:
    c = KafkaConsumer(
        bootstrap_servers=broker.kafka_bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=500,
        **kw,
    )
    if topic is not None:
        c.subscribe([topic])
    return c


def settle(consumers: list[KafkaConsumer], want_members: int, deadline_s: float = 60) -> list[set]:
    """Polls every consumer until their assignments cover every partition exactly once."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for c in consumers:
            c.poll(timeout_ms=100)
        sets = [set(c.assignment()) for c in consumers]
        union = set().union(*sets)
        if (
            sum(len(s) for s in sets) == PARTITIONS
            and len(union) == PARTITIONS
            and sum(1 for s in sets if s) == want_members
        ):
            return sets
    raise AssertionError(f"no balanced assignment: {[c.assignment() for c in consumers]}")


class Polled:
    """One consumer driven by its own thread, as applications run them: kafka-python finishes
    a join in the background and, when its caller was not waiting for it, joins once more
    (coordinator/base.py, `join_group_async`); consumers polled in turn from one thread keep
    re-triggering the rebalance they just finished, against any broker."""

    def __init__(self, c: KafkaConsumer):
        self.c = c
        self.lock = threading.Lock()
        self.assigned: set = set()
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.c.poll(timeout_ms=200)
                with self.lock:
                    self.assigned = set(self.c.assignment())
        except BaseException as err:  # reported by settle_threads
            self.error = err

    def assignment(self) -> set:
        if self.error is not None:
            raise AssertionError(f"consumer thread failed: {self.error!r}")
        with self.lock:
            return set(self.assigned)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        self.c.close()


def settle_threads(polled: list[Polled], want_members: int, deadline_s: float = 60) -> list[set]:
    """Waits until the threads' assignments cover every partition exactly once."""
    end = time.monotonic() + deadline_s
    sets: list[set] = []
    while time.monotonic() < end:
        sets = [p.assignment() for p in polled]
        union = set().union(*sets)
        if (
            sum(len(s) for s in sets) == PARTITIONS
            and len(union) == PARTITIONS
            and sum(1 for s in sets if s) == want_members
        ):
            return sets
        time.sleep(0.1)
    raise AssertionError(f"no balanced assignment: {sets}")


def test_two_consumers_split_a_third_joins_and_one_leaves(gbroker):
    topic = "grp-split"
    produce(gbroker, topic, 1)
    a = Polled(consumer(gbroker, "split", topic))
    b = Polled(consumer(gbroker, "split", topic))
    c = None
    try:
        sets = settle_threads([a, b], 2)
        assert all(len(s) == 2 for s in sets), sets
        c = Polled(consumer(gbroker, "split", topic))
        sets = settle_threads([a, b, c], 3)
        assert sorted(len(s) for s in sets) == [1, 1, 2], sets
        admin = KafkaAdminClient(bootstrap_servers=gbroker.kafka_bootstrap)
        try:
            desc = admin.describe_groups(["split"])["split"]
            assert desc["group_state"] == "Stable", desc
            assert len(desc["members"]) == 3
            listed = {g["group_id"]: g["protocol_type"] for g in admin.list_groups()}
            assert listed.get("split") == "consumer", listed
        finally:
            admin.close()
        c.close()  # LeaveGroup: the other two take its partitions
        c = None
        sets = settle_threads([a, b], 2)
        assert sorted(len(s) for s in sets) == [2, 2], sets
    finally:
        for p in (a, b, c):
            if p is not None:
                p.close()


def test_commits_keep_metadata_and_survive_kill_9(broker_factory):
    broker = broker_factory("commit", env=ENV).start()
    topic = "grp-commit"
    produce(broker, topic, 3)
    c = consumer(broker, "durable", topic)
    try:
        settle([c], 1)
        offsets = {
            TopicPartition(topic, p): OffsetAndMetadata(p, f"meta-{p} ü", -1)
            for p in range(PARTITIONS)
        }
        c.commit(offsets)
        for tp in offsets:
            assert c.committed(tp) == tp.partition
    finally:
        c.close()
    broker.kill()
    broker.start()
    admin = KafkaAdminClient(bootstrap_servers=broker.kafka_bootstrap)
    try:
        got = admin.list_group_offsets("durable")["durable"]
        assert {tp.partition: (m.offset, m.metadata) for tp, m in got.items()} == {
            p: (p, f"meta-{p} ü") for p in range(PARTITIONS)
        }
    finally:
        admin.close()
    # A new member of the group resumes from the committed offsets (partition 3 was
    # committed at its end: nothing is left there).
    c = consumer(broker, "durable", topic)
    want = {(p, o) for p in range(PARTITIONS) for o in range(p, 3)}
    try:
        seen = set()
        end = time.monotonic() + 60
        while len(seen) < len(want) and time.monotonic() < end:
            for tp, recs in c.poll(timeout_ms=200).items():
                seen.update((tp.partition, r.offset) for r in recs)
        c.poll(timeout_ms=500)
        assert seen == want
    finally:
        c.close()


def test_delete_groups_refuses_a_live_group_and_removes_an_empty_one(gbroker):
    topic = "grp-delete"
    produce(gbroker, topic, 1)
    c = consumer(gbroker, "gone", topic)
    admin = KafkaAdminClient(bootstrap_servers=gbroker.kafka_bootstrap)
    try:
        settle([c], 1)
        c.commit({TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
        assert admin.delete_groups(["gone"]) == {"gone": "NonEmptyGroupError"}
        c.close()
        assert admin.delete_groups(["gone"]) == {"gone": "OK"}
        assert admin.list_group_offsets("gone")["gone"] == {}
        assert admin.delete_groups(["gone"]) == {"gone": "GroupIdNotFoundError"}
    finally:
        admin.close()


def test_kcat_balanced_consumer_reads_every_record(gbroker):
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed (scripts/lib/setup.sh installs it)")
    topic = "grp-kcat"
    produce(gbroker, topic, 2)
    out = subprocess.run(
        [kcat, "-b", gbroker.kafka_bootstrap, "-G", "kcat-group", "-o", "beginning",
         "-c", str(PARTITIONS * 2), "-e", "-q", "-f", "%p:%s\\n", topic],
        capture_output=True, text=True, timeout=90,
    )
    assert out.returncode == 0, out.stderr
    lines = sorted(out.stdout.split())
    assert lines == sorted(f"{p}:{p}-{i}" for p in range(PARTITIONS) for i in range(2))
