"""Work queue: three workers share one queue and every job is done exactly once.

A queue without a consumer group is a work queue ("queue mode"): the workers compete, a
pop leases the messages it hands out, and the worker's handler returning is the ack
(consume() acks on success). Jobs spread over partitions so that the workers can hold
different ones at the same time; a partition is leased to one worker at a time. Each
worker pops up to 5 jobs and `each()` hands them to the handler one by one.

Checks: every job was handled, none twice, and the queue is drained.
"""

import asyncio
from collections import Counter

from _kit import URL, check, run, unique
from queen import Queen

JOBS = 90
PARTITIONS = 6
WORKERS = 3


async def main() -> None:
    queue = unique("jobs")
    async with Queen(URL) as queen:
        await queen.queue(queue).config({"leaseTime": 30, "retryLimit": 3}).create()
        for p in range(PARTITIONS):
            jobs = [{"data": {"job": j}} for j in range(p, JOBS, PARTITIONS)]
            await queen.queue(queue).partition(f"p{p}").push(jobs)

        done: Counter = Counter()
        by_worker: Counter = Counter()
        all_done = asyncio.Event()

        def worker(name: str):
            async def handle(message):
                done[message["data"]["job"]] += 1
                by_worker[name] += 1
                await asyncio.sleep(0.005)  # some work, so the others get a turn
                if sum(done.values()) >= JOBS:
                    all_done.set()

            return handle

        # Short long-polls so a worker notices the stop signal soon after the last job.
        await asyncio.gather(
            *(
                queen.queue(queue).batch(5).each().timeout_millis(500).consume(worker(f"w{i}"), signal=all_done)
                for i in range(WORKERS)
            )
        )

        twice = sorted(job for job, n in done.items() if n > 1)
        missing = sorted(set(range(JOBS)) - set(done))
        print(f"handled {sum(done.values())} jobs; per worker: {dict(sorted(by_worker.items()))}")
        check(not twice, f"jobs handled more than once: {twice}")
        check(not missing, f"jobs never handled: {missing}")
        left = await queen.queue(queue).batch(10).wait(False).pop()
        check(left == [], f"the queue still hands out {len(left)} messages after every ack")


if __name__ == "__main__":
    run(main)
