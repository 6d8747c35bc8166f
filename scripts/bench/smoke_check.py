"""The verdict of one bench-smoke run: `ok · summary` or `FAIL problems · summary`, and up to
three error texts. The report must come from the driver the run asked for (`--driver X`,
else queen-http), so a regression that sends `--driver kafka` back to HTTP fails. A Kafka run
must also have no duplicates and no unexpected ids: the tool never retries a produce and
reads from fixed positions, so either can only be the door storing or serving a record twice.

    python3 scripts/bench/smoke_check.py RUN.json [queen-bench args...]
"""

import json
import sys


def expected_driver(args: list[str]) -> str:
    for i, arg in enumerate(args[:-1]):
        if arg == "--driver":
            return args[i + 1]
    return "queen-http"


def problems(r: dict, args: list[str]) -> list[str]:
    moved = (r.get("consume") if r.get("scenario") == "consume" else r.get("produce")) or {}
    found = []
    if r.get("exit_code") != 0:
        found.append(f"exit {r.get('exit_code')}")
    driver = expected_driver(args)
    if r.get("driver") != driver:
        found.append(f"driver {r.get('driver')} (asked {driver})")
    if r.get("lost") != 0:
        found.append(f"lost {r.get('lost')}")
    if not r.get("accepted"):
        found.append("nothing accepted and verified")
    keys = ["malformed", "payload_mismatches", "errors", "push_items_refused",
            "ack_items_refused"]
    if driver == "kafka":
        keys += ["duplicates", "unexpected"]
    for key in keys:
        if r.get(key) != 0:
            found.append(f"{key} {r.get(key)}")
    if r.get("error_samples"):
        found.append(f"{len(r['error_samples'])} error texts")
    if not moved.get("messages"):
        found.append("no messages")
    return found


def verdict(r: dict, args: list[str]) -> str:
    moved = (r.get("consume") if r.get("scenario") == "consume" else r.get("produce")) or {}
    found = problems(r, args)
    summary = (f"{moved.get('messages', 0)} msgs, {moved.get('msg_per_sec', 0)} msg/s, "
               f"errors {r.get('errors')}")
    lines = [("FAIL " + ", ".join(found) + " · " if found else "ok · ") + summary]
    lines += ["  error: " + text for text in r.get("error_samples", [])[:3]]
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(verdict(json.load(f), sys.argv[2:]))
