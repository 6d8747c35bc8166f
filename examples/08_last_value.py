"""Last value: a reader wants only the newest price of each symbol, not the whole history.

The book's form is conflation: a consumer group with `.conflation()` gets only the newest
visible message of each partition and the ack retires everything behind it. A broker that
does not serve it yet answers a conflating pop with 501 `unsupported` (docs/api.md has the
current status). The client 2.6.0 retries a 5xx pop three times and then returns [] (it
raises only when a broker ignores the flag), so this example asks the broker directly
before it picks a form, and says which one it ran.

The forms that need no conflation, shown and checked either way:

- the producer writes each update as a push AND a KV put in one transaction, so the
  KV row of a symbol is always its newest pushed price (docs/api.md rows 10 and 17);
- an offset read (`changed_since` + `fetch`) reads the last record of each partition
  without a lease or a cursor (docs/api.md rows 15 and 16).

Checks: for every symbol, the KV row and the partition's last record are the newest price;
with conflation served, one pop hands out exactly the newest update of each symbol.
"""

import httpx

from _kit import URL, check, run, unique
from queen import Queen

SYMBOLS = ("ACME", "INITECH", "UMBRELLA")
UPDATES = 15


async def conflation_status(queue: str) -> int:
    """The broker's answer to a conflating pop (200 when it serves conflation)."""
    params = {"consumerGroup": "probe", "subscriptionMode": "all", "conflation": "true", "wait": "false", "batch": "1"}
    async with httpx.AsyncClient(base_url=URL, timeout=10) as http:
        answer = await http.get(f"/api/v1/pop/queue/{queue}", params=params)
    if answer.status_code == 200:
        check(answer.json().get("conflation") is True, "the broker ignored the conflation flag")
    return answer.status_code


async def newest_by_conflation(queen: Queen, queue: str) -> dict:
    messages = await (
        queen.queue(queue)
        .group("dashboard")
        .subscription_mode("all")  # a named group starts at `new` by default: this one wants the backlog
        .conflation()
        .batch(len(SYMBOLS))
        .partitions(len(SYMBOLS))
        .wait(False)
        .pop()
    )
    check(len(messages) == len(SYMBOLS), f"a conflating pop handed out {len(messages)} messages")
    await queen.ack(messages, True, {"group": "dashboard"})
    return {m["partition"]: m["data"]["price"] for m in messages}


async def newest_by_kv(queen: Queen, ns: str) -> dict:
    got = await queen.kv.get_many(ns, list(SYMBOLS))
    check(not got.get("missing"), f"no KV row for {got.get('missing')}")
    return {row["key"]: row["value"]["price"] for row in got["rows"]}


async def newest_by_offset_read(queen: Queen, queue: str) -> dict:
    changed = await queen.queue(queue).changed_since()
    last = {p["name"]: p["lastOffset"] for p in changed["partitions"]}
    read = await queen.queue(queue).fetch(list(last), offsets=last)
    return {name: part["records"][-1]["payload"]["price"] for name, part in read.items() if part["records"]}


async def main() -> None:
    queue, ns = unique("prices"), unique("last-price")
    async with Queen(URL) as queen:
        await queen.queue(queue).create()
        newest = {}
        for n in range(UPDATES):
            for i, symbol in enumerate(SYMBOLS):
                price = 100 * (i + 1) + n
                result = await (
                    queen.transaction()
                    .queue(queue)
                    .partition(symbol)
                    .push([{"data": {"price": price}}])
                    .kv.put(ns, symbol, {"price": price}, ttl_seconds=600)
                    .commit()
                )
                check(bool(result), f"update refused: {result}")
                newest[symbol] = price

        by_kv = await newest_by_kv(queen, ns)
        check(by_kv == newest, f"KV rows {by_kv}, newest pushed {newest}")
        by_offset = await newest_by_offset_read(queen, queue)
        check(by_offset == newest, f"last records {by_offset}, newest pushed {newest}")

        status = await conflation_status(queue)
        if status == 200:
            by_conflation = await newest_by_conflation(queen, queue)
            check(by_conflation == newest, f"conflated pop {by_conflation}, newest pushed {newest}")
            print(f"last value of {len(SYMBOLS)} symbols: conflation, KV and offset reads agree")
        else:
            check(status == 501, f"a conflating pop answered {status}, neither 200 nor 501")
            print(f"last value of {len(SYMBOLS)} symbols from KV and offset reads; conflation: 501 (not served)")


if __name__ == "__main__":
    run(main)
