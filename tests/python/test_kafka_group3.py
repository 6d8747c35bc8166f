"""Three confluent-kafka (librdkafka) consumers in one group on a 6-partition topic, with
each assignment strategy librdkafka offers (eager range and roundrobin, cooperative-sticky):
the assignment covers every partition once; a member that leaves (close) hands its
partitions to the other two, which consume what is produced after; a member that joins gets
a share. Every member commits what it consumed; a record is consumed again only if its
commit failed (a commit racing a rebalance, refused as Kafka refuses it), never after its
commit succeeded, and none is lost (issue 10, Done-when 2).

Each member polls from its own thread, as applications do: librdkafka serves assignment
changes inside poll, so members polled in turn from one thread can block each other (one
closing waits for a rebalance that a member not being polled cannot finish)."""

import threading
import time
from collections import Counter

import pytest

confluent = pytest.importorskip("confluent_kafka", reason="confluent-kafka is in scripts/lib/requirements.txt")

TOPIC = "g3"
PARTITIONS = 6
PER_PARTITION = 10
ENV = {"QUEEN_KAFKA_DEFAULT_PARTITIONS": str(PARTITIONS)}


class Members:
    """The group's consumers, one thread each, and what they consumed and committed."""

    def __init__(self, broker, strategy: str) -> None:
        self.broker, self.strategy = broker, strategy
        self.lock = threading.Lock()
        self.live: dict[str, tuple[confluent.Consumer, threading.Event, threading.Thread]] = {}
        self.consumed: list[tuple[int, int]] = []  # (partition, offset), in consumption order
        self.committed: set[tuple[int, int]] = set()
        self.consumed_after_commit: list[tuple[int, int]] = []
        # Each consumption of a record, in order, with the poll batch it came in; a batch's
        # commit verdict is in `batch_ok` (True: answered, False: refused).
        self.consumptions: list[tuple[tuple[int, int], int]] = []
        self.batch_ok: dict[int, bool] = {}
        self.wrong_values: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.held: dict[str, set[int]] = {}  # member -> partitions it last saw assigned
        self.commit_failures = 0
        self.started = time.monotonic()
        self.log: list[str] = []  # what happened when, for a failure's message

    def note(self, what: str) -> None:
        with self.lock:
            self.log.append(f"{time.monotonic() - self.started:.1f}s {what}")

    def join(self, name: str) -> None:
        c = confluent.Consumer({
            "bootstrap.servers": self.broker.kafka_bootstrap,
            "group.id": f"g3-{self.strategy}",
            "client.id": name,
            "partition.assignment.strategy": self.strategy,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 30000,
        })
        c.subscribe([TOPIC])
        stop = threading.Event()
        thread = threading.Thread(target=self.run, args=(name, c, stop), daemon=True)
        self.live[name] = (c, stop, thread)
        thread.start()
        self.note(f"{name} joined")

    def leave(self, name: str) -> None:
        _, stop, thread = self.live.pop(name)
        stop.set()  # its thread closes it: LeaveGroup, the others rebalance at once
        thread.join(timeout=30)
        assert not thread.is_alive(), f"{name} did not close: {self.log}"
        self.note(f"{name} closed")

    def run(self, name: str, c: confluent.Consumer, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.poll(name, c)
        except Exception as error:  # noqa: BLE001 - reported by settle
            with self.lock:
                self.errors.append(f"{name}: {error!r}")
        finally:
            c.close()
            with self.lock:
                self.held.pop(name, None)

    def poll(self, name: str, c: confluent.Consumer) -> None:
        records = []
        batch = c.consume(num_messages=100, timeout=0.1)
        # Read here, in the member's own thread: a Consumer's calls from another thread
        # while it sits in consume() can block until that returns, or longer.
        held = {tp.partition for tp in c.assignment()}
        with self.lock:
            self.held[name] = held
        for m in batch:
            if m.error() is not None:
                raise AssertionError(m.error())
            assert m.topic() == TOPIC
            records.append((m.partition(), m.offset()))
            if m.value() != expected_value(m.partition(), m.offset()):
                with self.lock:
                    self.wrong_values.append((m.partition(), m.offset(), m.value()))
        if not records:
            return
        with self.lock:
            self.consumed_after_commit += [r for r in records if r in self.committed]
            self.consumed += records
            batch = len(self.batch_ok)
            self.batch_ok[batch] = False
            self.consumptions += [(r, batch) for r in records]
        last: dict[int, int] = {}
        for p, o in records:
            last[p] = max(o, last.get(p, -1))
        offsets = [confluent.TopicPartition(TOPIC, p, o + 1) for p, o in last.items()]
        try:
            c.commit(offsets=offsets, asynchronous=False)
        except confluent.KafkaException as error:
            # A commit racing a rebalance is refused; its records may be consumed again.
            self.note(f"{name} commit refused: {error}")
            with self.lock:
                self.commit_failures += 1
            return
        with self.lock:
            self.committed.update(records)
            self.batch_ok[batch] = True

    def consumed_again_after_a_commit(self) -> list[tuple[int, int]]:
        """Records consumed again although an earlier consumption's commit was answered:
        only the last consumption of a record may have had its commit succeed. This catches
        a commit a broker took from a stale generation after the partition moved, which the
        other member had already read past."""
        with self.lock:
            events = list(self.consumptions)
            ok = dict(self.batch_ok)
        last = {r: i for i, (r, _) in enumerate(events)}
        return sorted({r for i, (r, batch) in enumerate(events) if i != last[r] and ok[batch]})

    def assignments(self) -> dict[str, set[int]]:
        with self.lock:
            return {n: set(self.held.get(n, ())) for n in self.live}

    def settle(self, members: int, want_records: int, deadline_s: float = 60) -> dict[str, set[int]]:
        """Waits until every member has partitions, together every partition exactly once,
        and `want_records` distinct records have been consumed."""
        end = time.monotonic() + deadline_s
        last = None
        while time.monotonic() < end:
            assert not self.errors, (self.errors, self.log)
            a = self.assignments()
            if a != last:
                self.note(str(a))
                last = a
            counts = Counter(p for ps in a.values() for p in ps)
            with self.lock:
                have = len(set(self.consumed))
            if (
                len(a) == members
                and all(a.values())
                and sorted(counts) == list(range(PARTITIONS))
                and set(counts.values()) == {1}
                and have >= want_records
            ):
                return a
            time.sleep(0.1)
        raise AssertionError(f"no settled group of {members} in {deadline_s} s: {last}, "
                             f"{len(set(self.consumed))}/{want_records} records; {self.log}")

    def close(self) -> None:
        for name in list(self.live):
            self.leave(name)


PHASES = ("a", "b", "c")


def expected_value(partition: int, offset: int) -> bytes:
    """What produce() put there: each phase appends PER_PARTITION records to every partition."""
    phase = PHASES[offset // PER_PARTITION] if offset < len(PHASES) * PER_PARTITION else "?"
    return f"{phase}-{partition}-{offset % PER_PARTITION}".encode()


def produce(broker, phase: str) -> None:
    p = confluent.Producer({"bootstrap.servers": broker.kafka_bootstrap, "acks": "all"})
    failed = []
    for part in range(PARTITIONS):
        for i in range(PER_PARTITION):
            p.produce(TOPIC, f"{phase}-{part}-{i}".encode(), partition=part,
                      on_delivery=lambda err, msg: err and failed.append(err))
    assert p.flush(30) == 0 and not failed, failed


# The test's own deadlines (3 settles of 60 s, 3 flushes of 30 s, 4 closes of 30 s) fit.
@pytest.mark.timeout(420)
@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_three_members_share_six_partitions_through_a_leave_and_a_join(broker_factory, strategy):
    broker = broker_factory("group3", env=ENV).start()
    produce(broker, "a")
    members = Members(broker, strategy)
    try:
        for name in ("m1", "m2", "m3"):
            members.join(name)
        first = members.settle(3, PARTITIONS * PER_PARTITION)
        assert sorted(len(ps) for ps in first.values()) == [2, 2, 2], first

        members.leave("m2")
        produce(broker, "b")
        after_leave = members.settle(2, 2 * PARTITIONS * PER_PARTITION)
        assert sorted(len(ps) for ps in after_leave.values()) == [3, 3], after_leave

        members.join("m4")
        produce(broker, "c")
        after_join = members.settle(3, 3 * PARTITIONS * PER_PARTITION)
        assert after_join["m4"], after_join
    finally:
        members.close()

    assert not members.errors, (members.errors, members.log)
    want = {(p, o) for p in range(PARTITIONS) for o in range(3 * PER_PARTITION)}
    assert set(members.consumed) == want, "records lost or from nowhere"
    assert not members.wrong_values, f"records with values not produced there: {members.wrong_values[:10]}"
    assert not members.consumed_after_commit, \
        f"consumed again after a commit: {members.consumed_after_commit[:10]}; {members.log}"
    again = members.consumed_again_after_a_commit()
    assert not again, f"consumed again although its commit was answered: {again[:10]}; {members.log}"
    twice = [k for k, n in Counter(members.consumed).items() if n > 1]
    print(f"{strategy}: {len(members.consumed)} consumptions, {len(twice)} again, "
          f"{members.commit_failures} failed commits; {members.log}")
