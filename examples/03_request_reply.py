"""Request/reply: callers send requests to a service and each waits for its own answers.

Each caller owns a reply partition (its name rides in the request as `replyTo`) and tags
every request with a correlation id. The service pops a request and, in ONE transaction,
acks it and pushes the reply into the caller's partition: a reply exists if and only if
its request was consumed, and a crash between the two cannot lose or duplicate either.

Checks: every caller got exactly one reply per request, each reply carries the
correlation id of a request of that caller, and the answer is the one asked for.
"""

import asyncio

from _kit import URL, check, run, unique, until
from queen import Queen

CALLERS = ("alice", "bob")
REQUESTS_EACH = 8


async def service(queen: Queen, requests: str, replies: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        batch = await queen.queue(requests).batch(10).timeout_millis(300).wait(True).pop()
        for req in batch:
            body = req["data"]
            reply = {"correlationId": body["correlationId"], "square": body["x"] * body["x"]}
            result = await (
                queen.transaction()
                .ack(req)
                .queue(replies)
                .partition(body["replyTo"])
                .push([{"data": reply}])
                .commit()
            )
            check(bool(result), f"reply transaction refused: {result}")


async def caller(queen: Queen, requests: str, replies: str, me: str) -> dict:
    asked = {f"{me}-{i}": i for i in range(REQUESTS_EACH)}
    await queen.queue(requests).push(
        [{"data": {"correlationId": cid, "replyTo": me, "x": x}} for cid, x in asked.items()]
    )
    answers: dict = {}

    async def all_answered() -> bool:
        got = await queen.queue(replies).partition(me).batch(20).wait(False).pop()
        for msg in got:
            cid = msg["data"]["correlationId"]
            check(cid in asked, f"{me} received a reply to a request it never sent: {cid}")
            check(cid not in answers, f"{me} received a second reply to {cid}")
            answers[cid] = msg["data"]["square"]
        if got:
            await queen.ack(got, True)
        return len(answers) == len(asked)

    await until(all_answered, 12, f"{me}'s {len(asked)} replies")
    wrong = {cid: a for cid, a in answers.items() if a != asked[cid] ** 2}
    check(not wrong, f"{me} got wrong answers: {wrong}")
    return answers


async def main() -> None:
    requests, replies = unique("requests"), unique("replies")
    async with Queen(URL) as queen:
        await queen.queue(requests).create()
        await queen.queue(replies).create()
        stop = asyncio.Event()

        async def callers() -> list:
            try:
                return await asyncio.gather(*(caller(queen, requests, replies, me) for me in CALLERS))
            finally:
                stop.set()

        # The service runs beside the callers: a failure of either ends the run at once.
        answers, _ = await asyncio.gather(callers(), service(queen, requests, replies, stop))
        print(f"replies per caller: {[len(a) for a in answers]}, all correlated")


if __name__ == "__main__":
    run(main)
