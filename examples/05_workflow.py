"""Workflow: an order goes through validate -> charge -> ship, one queue per step.

Each step pops from its queue and commits ONE transaction that acks its input and pushes
the next step's message (same partition: the order id, so an order's steps stay in order).
A step either happened completely or not at all; no message is lost or doubled between
steps. The last step also claims a KV marker (`once`) in the same transaction: a shipment
is an external effect, and a replayed shipping step must not commit it a second time.

Checks: every order reached the end with its steps in order, nothing is left in the
intermediate queues, and replaying the shipping commit is refused (`kv_precondition`)
without pushing anything.
"""

import asyncio

from _kit import URL, check, run, unique, until
from queen import Queen

ORDERS = 12
STEPS = ("validate", "charge", "ship")


async def step(queen: Queen, name: str, source: str, target: str, dedup_ns: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        batch = await queen.queue(source).batch(10).timeout_millis(300).wait(True).pop()
        for msg in batch:
            order = msg["data"]
            order["history"].append(name)
            tx = queen.transaction()
            if name == "ship":
                tx = tx.once(dedup_ns, f"shipped:{order['id']}", ttl_seconds=600)
            result = await tx.ack(msg).queue(target).partition(msg["partition"]).push([{"data": order}]).commit()
            check(bool(result), f"step {name} of {order['id']} was refused: {result}")


async def main() -> None:
    queues = {s: unique(s) for s in STEPS}
    done_queue = unique("shipped")
    dedup_ns = unique("workflow")
    async with Queen(URL) as queen:
        for q in (*queues.values(), done_queue):
            await queen.queue(q).create()
        for i in range(ORDERS):
            await queen.queue(queues["validate"]).partition(f"order-{i}").push(
                [{"data": {"id": f"order-{i}", "history": []}}]
            )

        finished: dict = {}

        async def all_shipped() -> bool:
            got = await queen.queue(done_queue).batch(50).wait(False).pop()
            for m in got:
                check(m["data"]["id"] not in finished, f"{m['data']['id']} arrived twice")
                finished[m["data"]["id"]] = m["data"]["history"]
            if got:
                await queen.ack(got, True)
            return len(finished) == ORDERS

        async def watch() -> None:
            try:
                await until(all_shipped, 15, f"{ORDERS} shipped orders")
            finally:
                stop.set()

        stop = asyncio.Event()
        targets = [queues[s] for s in STEPS[1:]] + [done_queue]
        await asyncio.gather(
            watch(),
            *(step(queen, s, queues[s], t, dedup_ns, stop) for s, t in zip(STEPS, targets)),
        )

        wrong = {o: h for o, h in finished.items() if h != list(STEPS)}
        check(not wrong, f"orders whose steps ran out of order: {wrong}")
        for s, q in queues.items():
            left = await queen.queue(q).batch(10).wait(False).pop()
            check(left == [], f"step queue {s} still holds {len(left)} messages")

        # A replayed shipping step: the marker is taken, so the bundle commits nothing.
        replay = await (
            queen.transaction()
            .once(dedup_ns, "shipped:order-0", ttl_seconds=600)
            .queue(done_queue)
            .partition("order-0")
            .push([{"data": {"id": "order-0", "history": ["replayed"]}}])
            .commit()
        )
        check(not replay and replay.get("reason") == "kv_precondition", f"replay was not refused: {replay}")
        extra = await queen.queue(done_queue).batch(10).wait(False).pop()
        check(extra == [], f"the refused replay pushed {len(extra)} messages")
        print(f"{len(finished)} orders went {' -> '.join(STEPS)}; the replayed shipment was refused")


if __name__ == "__main__":
    run(main)
