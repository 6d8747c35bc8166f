"""Windowed aggregation: sales summed per region per 10-second tumbling window.

Windows are on event time (the `ts` the producer stamps), so the result does not depend
on when the aggregator runs. The aggregator pops a batch, adds each (region, window)
sum to a KV counter, and commits the counters in the SAME transaction as the ack of the
batch: a batch is counted exactly once, because a redelivered batch (after a lost lease)
can only commit if the first attempt did not.

The client's `Stream` builder (`window_tumbling(...).reduce(...)`) does the same through the
broker's `/streams/v1/*` routes (docs/api.md rows 31-33, "Streams runtime"; driven end to end
in tests/python/test_streams.py). This example shows the pattern underneath, built by hand:
transactions with KV riders (docs/api.md rows 10 and 17).

Checks: the sum per region per window read back from KV equals the one computed here;
an aggregator that stalled past its lease cannot commit its counters once the batch went to
another one, so the late batch is counted once.
"""

import asyncio
import random
from collections import Counter

from _kit import URL, check, run, unique
from queen import Queen

WINDOW_MS = 10_000
REGIONS = ("eu", "us", "apac")
EVENTS = 150
BASE_MS = 1_700_000_000_000  # a fixed event-time origin, aligned to a window


def window_key(event: dict) -> str:
    """The KV key of the tumbling window the event falls in, by its event time."""
    return f"sum:{event['region']}:{event['ts'] // WINDOW_MS * WINDOW_MS}"


async def main() -> None:
    queue, ns = unique("sales"), unique("sales-per-window")
    rng = random.Random(11)
    events = [
        {"region": rng.choice(REGIONS), "ts": BASE_MS + rng.randrange(4 * WINDOW_MS), "amount": rng.randrange(1, 100)}
        for _ in range(EVENTS)
    ]
    expected: Counter = Counter()
    for e in events:
        expected[window_key(e)] += e["amount"]

    async with Queen(URL) as queen:
        await queen.queue(queue).config({"leaseTime": 30}).create()
        for region in REGIONS:
            await queen.queue(queue).partition(region).push([{"data": e} for e in events if e["region"] == region])

        counted = 0
        all_counted = asyncio.Event()

        async def aggregate(batch):
            nonlocal counted
            sums: Counter = Counter()
            for m in batch:
                sums[window_key(m["data"])] += m["data"]["amount"]
            tx = queen.transaction().ack(batch)
            for key, total in sums.items():
                tx = tx.kv.incr(ns, key, delta=total, ttl_seconds=600)
            result = await tx.commit()
            check(bool(result), f"aggregation commit refused: {result}")
            counted += len(batch)
            if counted >= EVENTS:
                all_counted.set()

        # auto_ack off: the transaction above is the ack.
        await asyncio.gather(
            *(
                queen.queue(queue).batch(20).auto_ack(False).timeout_millis(500).consume(aggregate, signal=all_counted)
                for _ in range(2)
            )
        )

        rows = await queen.kv.list_all(ns, "sum:")
        got = {row["key"]: row["value"] for row in rows}
        print(f"{EVENTS} events -> {len(got)} (region, window) sums")
        check(got == dict(expected), f"sums differ: got {got}, expected {dict(expected)}")
        await stalled_aggregator(queen, ns)


async def stalled_aggregator(queen: Queen, ns: str) -> None:
    """A batch whose first aggregator stalled past its lease is counted once."""
    queue = unique("late-sales")
    await queen.queue(queue).config({"leaseTime": 1}).create()
    await queen.queue(queue).push([{"data": {"region": "eu", "ts": BASE_MS, "amount": 7}}])
    stalled = await queen.queue(queue).wait(False).pop()
    check(len(stalled) == 1, f"the first aggregator got {len(stalled)} events")
    # The long poll returns when the stalled aggregator's lease runs out.
    live = await queen.queue(queue).timeout_millis(5000).wait(True).pop()
    check(len(live) == 1, "the event did not come back after the lease ran out")
    try:
        await queen.transaction().ack(stalled).kv.incr(ns, "late:eu", delta=7, ttl_seconds=600).commit()
        refused = ""
    except Exception as error:  # the client raises every refusal but a lost KV precondition
        refused = str(error)
    check("lease" in refused, f"the stalled aggregator's commit was not refused for its lease: {refused!r}")
    result = await queen.transaction().ack(live).kv.incr(ns, "late:eu", delta=7, ttl_seconds=600).commit()
    check(bool(result), f"the live aggregator's commit was refused: {result}")
    total = await queen.kv.get(ns, "late:eu")
    print(f"a stalled aggregator's commit was refused; the late batch counted once: {total.get('value')}")
    check(total.get("value") == 7, f"the late batch was counted as {total.get('value')}")


if __name__ == "__main__":
    run(main)
