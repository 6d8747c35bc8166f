"""What every example shares: the broker URL, unique names, its own check, a bounded run.

Each example is a program: `python examples/01_work_queue.py` against a broker at
$QUEEN_URL (default http://127.0.0.1:6632). It prints what it saw and exits 0 when its
result is the one the pattern promises, 1 with a message otherwise. Every wait is a
polling loop with a deadline, so no example depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from typing import Awaitable, Callable

URL = os.environ.get("QUEEN_URL", "http://127.0.0.1:6632")
# The whole run, waits included, must end well inside this (the runner's timeout is wider).
BUDGET_S = 20.0


class ExampleFailed(Exception):
    """The example's result is not the one the pattern promises."""


def unique(name: str) -> str:
    """A queue/namespace/lock name of this run only, so runs never see each other's data."""
    return f"ex-{name}-{uuid.uuid4().hex[:10]}"


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ExampleFailed(message)


async def until(probe: Callable[[], Awaitable[bool]], within_s: float, what: str) -> None:
    """Poll `probe` until it answers True; fail with `what` when `within_s` runs out."""
    deadline = time.monotonic() + within_s
    while not await probe():
        if time.monotonic() > deadline:
            raise ExampleFailed(f"gave up after {within_s} s waiting for {what}")
        await asyncio.sleep(0.05)


def run(main: Callable[[], Awaitable[None]]) -> None:
    """Run `main` within the budget; exit 1 with the reason when it fails."""
    name = os.path.basename(sys.argv[0])
    try:
        asyncio.run(asyncio.wait_for(main(), BUDGET_S))
    except ExampleFailed as failed:
        print(f"{name}: FAILED: {failed}", file=sys.stderr)
        sys.exit(1)
    except asyncio.TimeoutError:
        print(f"{name}: FAILED: did not finish within {BUDGET_S} s", file=sys.stderr)
        sys.exit(1)
    print(f"{name}: ok")
