"""One worker at a time: a job that must never run twice at once, fenced.

Three forms, all served (docs/api.md rows 5, 10 and 18):

- a lock (`client.lock(name, ttl_seconds=...)`): one holder at a time; every acquire gets
  a fencing token that only rises. The workers take turns and push their report in a
  transaction guarded by the lock (`transaction().guard(lock)`).
- the fence: a lock is a lease, and a holder that stalls past its lifetime does not know
  it lost the lock. Its guard (a KV `check` of the lock row at ITS token) no longer holds,
  so whatever it commits after that is refused, while the new holder's commit applies.
- a single-partition lease: a partition is leased to one consumer at a time, so a queue
  partition is also a "one at a time" for the work items on it.

Checks: the workers never overlapped and their tokens rose in commit order; the stale
holder's commit was refused (`kv_precondition`) and pushed nothing; a second consumer gets
nothing from a partition while the first holds its lease, and gets it after the ack.
"""

import asyncio

from _kit import URL, check, run, unique, until
from queen import Queen

WORKERS = 3
TURNS = 2


async def taking_turns(queen: Queen) -> None:
    name, reports = unique("nightly-report"), unique("reports")
    await queen.queue(reports).create()
    inside = 0

    async def worker(me: str) -> None:
        nonlocal inside
        for turn in range(TURNS):
            lock = queen.lock(name, ttl_seconds=10)
            check(await lock.acquire(wait=15), f"{me} never got the lock")
            try:
                inside += 1
                check(inside == 1, f"{inside} workers inside the lock at once")
                report = {"worker": me, "turn": turn, "token": lock.token}
                result = await queen.transaction().guard(lock).queue(reports).push([{"data": report}]).commit()
                check(bool(result), f"{me}'s guarded commit was refused while holding the lock: {result}")
                await asyncio.sleep(0.02)
                inside -= 1
            finally:
                await lock.release()

    await asyncio.gather(*(worker(f"w{i}") for i in range(WORKERS)))
    got = await queen.queue(reports).batch(50).wait(False).pop()
    tokens = [m["data"]["token"] for m in got]
    print(f"lock: {len(got)} reports, tokens in commit order {tokens}")
    check(len(got) == WORKERS * TURNS, f"{len(got)} reports, expected {WORKERS * TURNS}")
    check(tokens == sorted(set(tokens)), f"tokens did not rise in commit order: {tokens}")


async def fencing(queen: Queen) -> None:
    name, ledger = unique("ledger-writer"), unique("ledger")
    await queen.queue(ledger).create()
    stalled = queen.lock(name, ttl_seconds=1, auto_renew=False)
    check(await stalled.acquire(), "the first holder did not get a free lock")
    stale_guard = stalled.guard()  # what the holder would send, built while it held the lock
    successor = queen.lock(name, ttl_seconds=10)
    check(not await successor.acquire(wait=0), "a second holder got a held lock")
    # The first holder stalls; its lifetime runs out and the successor takes over.
    check(await successor.acquire(wait=10), "the successor never got the expired lock")
    try:
        check(successor.token > stale_guard["expect"], "the successor's token did not rise")
        late = await (
            queen.transaction()
            .kv.check(stale_guard["ns"], stale_guard["key"], expect=stale_guard["expect"], required=True)
            .queue(ledger)
            .push([{"data": {"by": "stalled holder"}}])
            .commit()
        )
        check(not late and late.get("reason") == "kv_precondition", f"the stale holder's commit applied: {late}")
        fresh = await queen.transaction().guard(successor).queue(ledger).push([{"data": {"by": "successor"}}]).commit()
        check(bool(fresh), f"the holder's guarded commit was refused: {fresh}")
    finally:
        await successor.release()
    written = [m["data"]["by"] for m in await queen.queue(ledger).batch(10).wait(False).pop()]
    print(f"fence: stale token {stale_guard['expect']} refused, successor's {written} applied")
    check(written == ["successor"], f"the ledger holds {written}")


async def partition_lease(queen: Queen) -> None:
    queue = unique("account-jobs")
    await queen.queue(queue).config({"leaseTime": 30}).create()
    await queen.queue(queue).partition("account-7").push([{"data": {"step": s}} for s in range(3)])
    first = await queen.queue(queue).partition("account-7").batch(1).wait(False).pop()
    check(len(first) == 1, f"the first consumer got {len(first)} messages")
    second = await queen.queue(queue).partition("account-7").batch(1).wait(False).pop()
    check(second == [], "a second consumer got messages of a leased partition")
    await queen.ack(first, True)
    after: list = []

    async def handed_over() -> bool:
        after.extend(await queen.queue(queue).partition("account-7").batch(1).wait(False).pop())
        return bool(after)

    await until(handed_over, 5, "the partition after the first consumer's ack")
    check(after[0]["data"]["step"] == 1, f"after the ack the next consumer got {after[0]['data']}")
    await queen.ack(after, True)
    print("partition lease: one consumer at a time, the next one continues where the ack left off")


async def main() -> None:
    async with Queen(URL) as queen:
        await taking_turns(queen)
        await fencing(queen)
        await partition_lease(queen)


if __name__ == "__main__":
    run(main)
