"""Rate limiting: bound how many run at once, and how many are admitted per window.

Two tools of the broker, both shared by every process that talks to it:

- a semaphore (`client.semaphore(name, n)`) bounds CONCURRENCY: at most n holders, the
  others wait for a permit (docs/api.md row 18, locks);
- a KV counter with a ceiling (`kv.incr(..., max=n)`) bounds a RATE: `applied` is the
  admission decision, a refused call spends no budget, and the key's expiry ends the
  window (docs/api.md row 17, KV).

Checks: eight jobs behind a 2-permit semaphore never ran more than two at a time and
all finished; of 12 concurrent calls against a budget of 5 per window exactly 5 were
admitted, and the counter stands at 5.
"""

import asyncio

from _kit import URL, check, run, unique
from queen import Queen

PERMITS = 2
JOBS = 8
BUDGET = 5
CALLS = 12


async def bounded_concurrency(queen: Queen) -> None:
    name = unique("sem")
    running = 0
    peak = 0
    finished = 0

    async def job() -> None:
        nonlocal running, peak, finished
        permit = queen.semaphore(name, PERMITS, ttl_seconds=10)
        check(await permit.acquire(wait=15), "a job never got a permit")
        try:
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.05)  # the work
            running -= 1
        finally:
            await permit.release()
        finished += 1

    await asyncio.gather(*(job() for _ in range(JOBS)))
    print(f"semaphore: {finished} jobs, at most {peak} at once (limit {PERMITS})")
    check(finished == JOBS, f"only {finished} of {JOBS} jobs finished")
    check(peak <= PERMITS, f"{peak} jobs ran at once under a {PERMITS}-permit semaphore")


async def bounded_rate(queen: Queen) -> None:
    ns = unique("quota")
    key = "customer-42:window-0"

    async def call() -> bool:
        admitted = await queen.kv.incr(ns, key, delta=1, max=BUDGET, ttl_seconds=60)
        return bool(admitted)

    verdicts = await asyncio.gather(*(call() for _ in range(CALLS)))
    admitted = sum(verdicts)
    counter = await queen.kv.get(ns, key)
    print(f"quota: {admitted} of {CALLS} calls admitted (budget {BUDGET}), counter {counter.get('value')}")
    check(admitted == BUDGET, f"{admitted} calls admitted against a budget of {BUDGET}")
    check(counter.get("value") == BUDGET, f"the counter stands at {counter.get('value')}")


async def main() -> None:
    async with Queen(URL) as queen:
        await bounded_concurrency(queen)
        await bounded_rate(queen)


if __name__ == "__main__":
    run(main)
