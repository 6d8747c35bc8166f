"""Table of a scripts/bench/binary-vs-json.sh directory: one row per run, then per form the
median and range of the runs that passed every check, and the median against JSON's.

    python3 scripts/bench/binary_table.py OUT_DIR

A run passes when it was verified (every accepted message popped back and compared; `lost`
present) and shows no failure: exit 0, nothing lost, malformed or changed, no failed request,
no refused item or ack. Other runs are listed with what failed and left out of the summary.
"""

import json
import sys
from pathlib import Path
from statistics import median


def load(path: Path) -> dict:
    return json.load(open(path))["runs"][0]


def ms(run: dict, op: str, q: str) -> str:
    lat = (run.get("latency_us") or {}).get(op) or {}
    return f"{lat[q] / 1000:.1f}" if lat.get(q) is not None else "-"


def rate(run: dict, side: str) -> float:
    return float((run.get(side) or {}).get("msg_per_sec") or 0.0)


def checks(run: dict) -> str:
    """"ok", or what is wrong with the run ("not verified" when nothing was read back)."""
    bad = []
    if run.get("lost") is None:
        bad.append("not verified")
    if run.get("exit_code"):
        bad.append(f"exit {run['exit_code']}")
    for key in ("lost", "malformed", "payload_mismatches", "errors", "push_items_refused",
                "ack_items_refused"):
        if run.get(key):
            bad.append(f"{key} {run[key]}")
    return ", ".join(bad) or "ok"


def runs_of(out: Path) -> list:
    rows = []
    for path in sorted(out.glob("*.json")):
        scenario, rest = path.stem.split("-", 1)
        form, round_ = rest.rsplit("-", 1)
        rows.append((int(round_), scenario, form, load(path)))
    rows.sort(key=lambda r: (r[0], r[1] != "push"))
    return rows


def summary(rows: list) -> list:
    """Per (scenario, form): (median, min, max, passed runs, all runs, median / JSON median)."""
    passed: dict = {}
    total: dict = {}
    for _, scenario, form, run in rows:
        side = "produce" if scenario == "push" else "consume"
        key = (scenario, form)
        total[key] = total.get(key, 0) + 1
        passed.setdefault(key, [])
        if checks(run) == "ok":
            passed[key].append(rate(run, side))
    out = []
    for key in sorted(total):
        values = passed[key]
        base = passed.get((key[0], "json")) or []
        if not values:
            out.append((key, None, None, None, 0, total[key], None))
            continue
        ratio = median(values) / median(base) if base and median(base) else None
        out.append((key, median(values), min(values), max(values), len(values), total[key], ratio))
    return out


def main() -> None:
    rows = runs_of(Path(sys.argv[1]))
    print("| round | scenario | form | msg/s | latency p50 / p99 ms | broker RSS after (peak) MiB | tool CPU % | checks |")
    print("|---|---|---|---|---|---|---|---|")
    for round_, scenario, form, run in rows:
        side = "produce" if scenario == "push" else "consume"
        ops = ["push"] if scenario == "push" else ["pop", "ack"]
        lat = "; ".join(f"{op} {ms(run, op, 'p50')} / {ms(run, op, 'p99')}" for op in ops)
        rss = run.get("broker_rss_kb")
        hwm = run.get("broker_hwm_kb")
        mem = f"{rss / 1024:.0f} ({hwm / 1024:.0f})" if rss and hwm else "-"
        cpu = (run.get("tool") or {}).get("cpu_percent_of_core")
        print(f"| {round_} | {scenario} | {form} | {rate(run, side):,.0f} | {lat} | {mem} | {cpu} | {checks(run)} |")
    print()
    print("Summary over the runs whose checks are ok (failed runs are left out):")
    print()
    print("| scenario | form | median msg/s | min – max | runs ok / all | median against JSON median |")
    print("|---|---|---|---|---|---|")
    for (scenario, form), mid, low, high, ok, all_, ratio in summary(rows):
        if mid is None:
            print(f"| {scenario} | {form} | n/a | n/a | 0 / {all_} | n/a |")
            continue
        against = f"{ratio:.1f}x" if ratio is not None else "n/a"
        print(f"| {scenario} | {form} | {mid:,.0f} | {low:,.0f} – {high:,.0f} | {ok} / {all_} | {against} |")


if __name__ == "__main__":
    main()
