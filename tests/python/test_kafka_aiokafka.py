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


async def produce(broker, phase: str) -> list[tuple[int, int]]:
    p = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.kafka_bootstrap, enable_idempotence=True,
                                  acks="all")
    await p.start()
    try:
        sent = []
        for part in range(PARTITIONS):
            for i in range(PER_PARTITION):
                meta = await p.send_and_wait(TOPIC, f"{phase}-{part}-{i}".encode(), key=b"k%d" % i,
                                             partition=part, headers=[("phase", phase.encode())])
                sent.append((meta.partition, meta.offset))
        return sent
    finally:
        await p.stop()


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
        assert sorted(sent) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]

        a, b = consumer(broker, "aio-group"), consumer(broker, "aio-group")
        await a.start()
        await b.start()
        seen = []
        try:
            await drain([a, b], len(sent), seen)
            shares = [{tp.partition for tp in c.assignment()} for c in (a, b)]
        finally:
            await a.stop()
            await b.stop()
        assert sorted((p, o) for p, o, *_ in seen) == sorted(sent), "lost or twice"
        assert all(shares) and not shares[0] & shares[1] and len(shares[0] | shares[1]) == PARTITIONS
        p, o, key, value, headers = min(seen)
        assert (p, o, key, value, headers) == (0, 0, b"k0", b"a-0-0", (("phase", b"a"),))

        # The group resumes after its commits: only the new records come.
        more = await produce(broker, "b")
        c = consumer(broker, "aio-group")
        await c.start()
        again = []
        try:
            await drain([c], len(more), again)
        finally:
            await c.stop()
        assert sorted((p, o) for p, o, *_ in again) == sorted(more)
        assert {v.split(b"-")[0] for _, _, _, v, _ in again} == {b"b"}

    asyncio.run(body())
