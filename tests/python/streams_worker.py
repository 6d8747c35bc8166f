"""A streams worker of the official client, run as its own process so a test can SIGKILL it
mid-stream: `python streams_worker.py URL QUERY_ID SOURCE SINK`.

The query: a tumbling event-time window of 10 s per source partition, summing `amount`,
each closed window pushed to SINK as {"partition", "windowStart", "sum"}. Small batches, so
a run is many cycles.
"""

import asyncio
import sys

from queen import Queen, Stream


def window_sum(client: Queen, source: str, sink: str, seconds: float = 10) -> Stream:
    return (
        Stream.from_(client.queue(source))
        .window_tumbling(seconds=seconds, event_time=lambda m: m["data"]["ts"])
        .reduce(lambda acc, v: acc + v["amount"], initial=0)
        .map(lambda v, ctx: {"partition": ctx["partition"], "windowStart": ctx["windowStart"], "sum": v})
        .to(client.queue(sink))
    )


async def main(url: str, query_id: str, source: str, sink: str) -> None:
    async with Queen(url=url) as client:
        runner = await window_sum(client, source, sink).run(
            query_id=query_id, url=url, batch_size=7, max_partitions=2, max_wait_millis=200,
            subscription_mode="all",
        )
        print("running", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.stop()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
