"""aiokafka (the asyncio Kafka client) against the real binary: an idempotent producer with
keys and headers, then two consumers of one group split the topic's partitions, consume
every record once, commit, and a restarted member resumes after the commits (issue 10's
client list)."""

import asyncio

import pytest

aiokafka = pytest.importorskip("aiokafka", reason="aiokafka is in scripts/lib/requirements.txt")

TOPIC = "aio"
PARTITIONS = 4
PER_PARTITION = 25
ENV = {"QUEEN_KAFKA_DEFAULT_PARTITIONS": str(PARTITIONS)}


def consumer(broker, group: str) -> "aiokafka.AIOKafkaConsumer":
    # aiokafka's own session (10 s) and heartbeat (3 s) defaults.
    return aiokafka.AIOKafkaConsumer(TOPIC, bootstrap_servers=broker.kafka_bootstrap, group_id=group,
                                     auto_offset_reset="earliest", enable_auto_commit=False)


async def produce(broker, phase: str) -> list[tuple]:
    """Sends PER_PARTITION records to each partition; (partition, offset, key, value, headers)
    of each as its answer placed it."""
    p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.kafka_bootstrap, enable_idempotence=True,
                                  acks="all")
    await p.start()
    try:
        sent = []
        for part in range(PARTITIONS):
            for i in range(PER_PARTITION):
                key, value, headers = b"k%d" % i, f"{phase}-{part}-{i}".encode(), (("phase", phase.encode()),)
                meta = await p.send_and_wait(TOPIC, value, key=key, partition=part, headers=list(headers))
                sent.append((meta.partition, meta.offset, key, value, headers))
        return sent
    finally:
        await p.stop()


async def split(members, deadline_s: float = 60) -> list[set[int]]:
    """Waits until every member owns partitions and together all of them: a member that joins
    after the group's initial rebalance delay (3 s) would otherwise cause a rebalance while
    the others drain, and commits racing it are refused."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        shares = [{tp.partition for tp in c.assignment()} for c in members]
        owned = [p for ps in shares for p in ps]
        if all(shares) and sorted(owned) == list(range(PARTITIONS)):
            return shares
        assert loop.time() < end, f"the group never split the partitions: {shares}"
        await asyncio.sleep(0.1)


async def drain(members, want: int, seen: list, deadline_s: float = 60) -> None:
    """Consumes with every member until `want` records came; each member commits its own."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while len(seen) < want and loop.time() < end:
        for c in members:
            batches = await c.getmany(timeout_ms=200, max_records=100)
            for records in batches.values():
                seen.extend((r.partition, r.offset, r.key, r.value, tuple(r.headers)) for r in records)
            if batches:
                await c.commit()


@pytest.mark.timeout(120)
def test_aiokafka_producer_and_group_round_trip(broker_factory):
    broker = broker_factory("aiokafka", env=ENV).start()

    async def body():
        sent = await produce(broker, "a")
        assert sorted((p, o) for p, o, *_ in sent) == [(p, o) for p in range(PARTITIONS)
                                                      for o in range(PER_PARTITION)]

        a, b = consumer(broker, "aio-group"), consumer(broker, "aio-group")
        await a.start()
        await b.start()
        seen = []
        try:
            shares = await split([a, b])
            await drain([a, b], len(sent), seen)
        finally:
            await a.stop()
            await b.stop()
        assert not shares[0] & shares[1], shares
        assert sorted(seen) == sorted(sent), "lost, twice, or not as sent"

        # The group resumes after its commits: only the new records come.
        more = await produce(broker, "b")
        c = consumer(broker, "aio-group")
        await c.start()
        again = []
        try:
            await drain([c], len(more), again)
        finally:
            await c.stop()
        assert sorted(again) == sorted(more)

    asyncio.run(body())
