"""Retries and dead letters: a message that keeps failing ends in the dead-letter queue.

A handler that fails acks the message `failed` (consume() does it when the handler
raises): the lease is released and the message comes back on the next pop. After
`retryLimit` retries the broker moves it to the dead-letter queue with the error, the
consumer's cursor passes it, and the messages behind it flow again. The DLQ is read with
`queue(q).dlq().get()` (GET /api/v1/dlq, docs/api.md row 12).

Checks: the poison message was delivered 1 + retryLimit times, then it is in the DLQ
with the handler's error, and every good message was processed.
"""

import asyncio
from collections import Counter

from _kit import URL, check, run, unique, until
from queen import Queen

RETRY_LIMIT = 2
GOOD = 5


async def main() -> None:
    queue = unique("payments")
    async with Queen(URL) as queen:
        await queen.queue(queue).config({"retryLimit": RETRY_LIMIT, "dlqAfterMaxRetries": True}).create()
        items = [{"data": {"n": n, "poison": n == 2}} for n in range(GOOD + 1)]
        await queen.queue(queue).push(items)

        deliveries: Counter = Counter()
        good = set()
        stop = asyncio.Event()

        async def handle(message):
            n = message["data"]["n"]
            deliveries[n] += 1
            if message["data"]["poison"]:
                raise ValueError(f"card {n} declined")
            good.add(n)

        async def dead_lettered() -> bool:
            dlq = await queen.queue(queue).dlq().limit(10).get()
            return len(good) == GOOD and dlq.get("total", len(dlq["messages"])) >= 1

        async def watch() -> None:
            try:
                await until(dead_lettered, 15, "the poison message in the DLQ and every good one processed")
            finally:
                stop.set()

        # each(): one message at a time, so a failure rewinds only to the failed one.
        consumer = queen.queue(queue).batch(3).each().timeout_millis(300)
        await asyncio.gather(watch(), consumer.consume(handle, signal=stop))

        dead = (await queen.queue(queue).dlq().limit(10).get())["messages"]
        check(len(dead) == 1, f"{len(dead)} messages in the DLQ, expected the poison one")
        print(f"poison delivered {deliveries[2]} times, then dead-lettered: {dead[0].get('errorMessage')!r}")
        check(dead[0]["data"]["n"] == 2, f"the DLQ holds {dead[0]['data']}")
        check("declined" in str(dead[0].get("errorMessage")), f"the DLQ entry lost the error: {dead[0]}")
        check(deliveries[2] == 1 + RETRY_LIMIT, f"poison delivered {deliveries[2]} times, not 1 + {RETRY_LIMIT}")
        check(all(deliveries[n] >= 1 for n in range(GOOD + 1) if n != 2), f"deliveries {dict(deliveries)}")
        after = await queen.queue(queue).wait(False).pop()
        check(after == [], f"the dead-lettered message is still handed out: {after}")


if __name__ == "__main__":
    run(main)
