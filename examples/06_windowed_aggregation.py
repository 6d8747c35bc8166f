"""Windowed aggregation: sales summed per region per 10-second tumbling window.

Windows are on event time (the `ts` the producer stamps), so the result does not depend
on when the aggregator runs. The aggregator pops a batch, adds each (region, window)
sum to a KV counter, and commits the counters in the SAME transaction as the ack of the
batch: a batch is counted exactly once, because a redelivered batch (after a lost lease)
can only commit if the first attempt did not.

Not served yet: the client's `Stream` builder (`window_tumbling(...).aggregate(...)`) runs
its state and sink commits through the broker's `/streams/v1/*` routes, which this broker
answers with 501 `unsupported` (docs/api.md rows 31-33). This example is the same pattern
built from what is served: transactions with KV riders (docs/api.md rows 10 and 17).

Checks: the sum per region per window read back from KV equals the one computed here.
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


if __name__ == "__main__":
    run(main)
