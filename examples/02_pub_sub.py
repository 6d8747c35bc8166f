"""Publish/subscribe: every consumer group sees every message.

Each consumer group keeps its own cursor on the queue, so two groups (billing and
analytics) each receive the whole stream, while the workers inside one group would
compete. A group's subscription mode says where it starts: `all` (the default) reads the
history, `new` only what is pushed after the group first asks. A named group that says
nothing starts as `new` (the 2.x broker default), so a subscriber that wants the history
asks for `all`.

Checks: both groups saw all events exactly once; a group subscribed with mode `new` after
the first batch sees only the second batch.
"""

import asyncio

from _kit import URL, check, run, unique, until
from queen import Queen

FIRST = 20
SECOND = 10


async def drain(queen: Queen, queue: str, group: str, want: int, mode: str) -> list:
    """Pop as `group` until `want` events arrived; returns the event numbers in order."""
    seen: list = []

    async def got_all() -> bool:
        messages = await queen.queue(queue).group(group).subscription_mode(mode).batch(50).wait(False).pop()
        seen.extend(m["data"]["n"] for m in messages)
        if messages:
            await queen.ack(messages, True, {"group": group})
        return len(seen) >= want

    await until(got_all, 10, f"{want} events in group {group}")
    return seen


async def main() -> None:
    queue = unique("events")
    async with Queen(URL) as queen:
        await queen.queue(queue).create()
        await queen.queue(queue).push([{"data": {"n": n}} for n in range(FIRST)])

        # A group in mode `new` joins now: its first pop registers it at the queue's end.
        late = await queen.queue(queue).group("late").subscription_mode("new").wait(False).pop()
        check(late == [], f"a group in mode new got {len(late)} messages pushed before it joined")

        await queen.queue(queue).push([{"data": {"n": n}} for n in range(FIRST, FIRST + SECOND)])
        everything = list(range(FIRST + SECOND))

        billing, analytics, late = await asyncio.gather(
            drain(queen, queue, "billing", len(everything), "all"),
            drain(queen, queue, "analytics", len(everything), "all"),
            drain(queen, queue, "late", SECOND, "new"),
        )
        print(f"billing {len(billing)}, analytics {len(analytics)}, late {len(late)} events")
        check(sorted(billing) == everything, f"billing saw {sorted(billing)}")
        check(sorted(analytics) == everything, f"analytics saw {sorted(analytics)}")
        check(sorted(late) == everything[FIRST:], f"the `new` group saw {sorted(late)}")


if __name__ == "__main__":
    run(main)
