"""Delayed messages: deliver not before a given time.

Two served forms:

- a queue with `delayedProcessing: N` holds every message N seconds after its commit
  before any consumer can pop it (docs/api.md row 1, the queue options);
- a timer schedules ONE message into a queue after `delay_ms`, keyed so that it can be
  rescheduled or cancelled until it fires; it fires as an ordinary push
  (docs/api.md rows 19-21, timers).

"Not before" is the promise, never "exactly at": the checks are lower bounds only.

Checks: a delayed message is not handed out right after its push and arrives no sooner
than the delay; a timer's message arrives no sooner than its delay; a cancelled timer
answers `cancelled` and its message never arrives.
"""

import time

from _kit import URL, check, run, unique, until
from queen import Queen

DELAY_S = 2
TIMER_MS = 1500


async def first_message(queen: Queen, queue: str, within_s: float) -> dict:
    got: list = []

    async def arrived() -> bool:
        got.extend(await queen.queue(queue).batch(10).wait(False).pop())
        return bool(got)

    await until(arrived, within_s, f"a message in {queue}")
    await queen.ack(got, True)
    check(len(got) == 1, f"{queue} handed out {len(got)} messages, expected one")
    return got[0]


async def delayed_queue(queen: Queen) -> None:
    queue = unique("reminders")
    await queen.queue(queue).config({"delayedProcessing": DELAY_S}).create()
    pushed_at = time.monotonic()
    await queen.queue(queue).push([{"data": {"remind": "call back"}}])
    early = await queen.queue(queue).wait(False).pop()
    check(early == [], "a delayed message was handed out right after its push")
    await first_message(queen, queue, DELAY_S + 8)
    waited = time.monotonic() - pushed_at
    print(f"delayed queue: delivered after {waited:.2f} s (delay {DELAY_S} s)")
    check(waited >= DELAY_S, f"delivered after {waited:.2f} s, before the {DELAY_S} s delay")


async def timers(queen: Queen) -> None:
    queue = unique("expiries")
    await queen.queue(queue).create()
    scheduled_at = time.monotonic()
    kept = await queen.timers.schedule(queue, "order-1:expire", {"order": 1}, delay_ms=TIMER_MS)
    dropped = await queen.timers.schedule(queue, "order-2:expire", {"order": 2}, delay_ms=TIMER_MS)
    check(bool(kept) and bool(dropped), f"schedule refused: {kept} {dropped}")
    cancelled = await queen.timers.cancel(queue, "order-2:expire")
    check(cancelled.get("status") == "cancelled", f"cancel answered {cancelled}")

    message = await first_message(queen, queue, TIMER_MS / 1000 + 8)
    waited = time.monotonic() - scheduled_at
    print(f"timer: delivered after {waited:.2f} s (delay {TIMER_MS} ms); the cancelled one did not fire")
    check(message["data"] == {"order": 1}, f"the timer delivered {message['data']}")
    check(waited >= TIMER_MS / 1000, f"the timer fired after {waited:.2f} s, before its delay")
    # Both timers were due at the same time: had the cancelled one fired, it would be here.
    pending = await queen.timers.peek(queue, "order-2:expire")
    check(not pending, f"the cancelled timer is still pending: {pending}")
    late = await queen.queue(queue).wait(False).pop()
    check(late == [], f"the cancelled timer delivered {late}")


async def main() -> None:
    async with Queen(URL) as queen:
        await delayed_queue(queen)
        await timers(queen)


if __name__ == "__main__":
    run(main)
