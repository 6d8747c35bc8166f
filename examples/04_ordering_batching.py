"""Ordering and batching: per-entity order kept while pushes and pops go in batches.

One partition per entity (here a customer account) is the unit of order: its messages
are delivered in the order they were pushed, and a partition is leased to one worker at a
time, so even several concurrent workers never process one entity's events out of order.
The producer batches on its side with the client buffer (one POST per 25 messages), the
consumers take batches of up to 10 messages from up to 3 partitions per pop.

Checks: every account's events arrived complete, each exactly once, in push order.
"""

import asyncio
from collections import defaultdict

from _kit import URL, check, run, unique
from queen import Queen

ACCOUNTS = 5
EVENTS_EACH = 40
WORKERS = 3


async def main() -> None:
    queue = unique("ledger")
    async with Queen(URL) as queen:
        await queen.queue(queue).config({"leaseTime": 30}).create()

        # Interleave the accounts the way live traffic would; each buffer keeps its order.
        for seq in range(EVENTS_EACH):
            for a in range(ACCOUNTS):
                await (
                    queen.queue(queue)
                    .partition(f"account-{a}")
                    .buffer({"message_count": 25, "time_millis": 200})
                    .push([{"data": {"account": a, "seq": seq}}])
                )
        await queen.flush_all_buffers()

        seen: dict = defaultdict(list)
        batches: list = []
        total = ACCOUNTS * EVENTS_EACH
        all_seen = asyncio.Event()

        async def handle(messages):
            batches.append(len(messages))
            for m in messages:
                seen[m["data"]["account"]].append(m["data"]["seq"])
            if sum(len(v) for v in seen.values()) >= total:
                all_seen.set()

        await asyncio.gather(
            *(
                queen.queue(queue).batch(10).partitions(3).timeout_millis(500).consume(handle, signal=all_seen)
                for _ in range(WORKERS)
            )
        )

        print(f"{sum(batches)} events in {len(batches)} batches (largest {max(batches)})")
        expected = list(range(EVENTS_EACH))
        for a in range(ACCOUNTS):
            check(seen[a] == expected, f"account-{a} events arrived as {seen[a]}")


if __name__ == "__main__":
    run(main)
