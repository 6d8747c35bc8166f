"""Table of a scripts/bench/binary-vs-json.sh directory: one row per run, then the mean of each
form and its ratio to JSON.

    python3 scripts/bench/binary_table.py OUT_DIR
"""

import json
import sys
from pathlib import Path
from statistics import mean


def load(path: Path) -> dict:
    return json.load(open(path))["runs"][0]


def ms(run: dict, op: str, q: str) -> str:
    lat = (run.get("latency_us") or {}).get(op) or {}
    return f"{lat[q] / 1000:.1f}" if lat.get(q) is not None else "-"


def rate(run: dict, side: str) -> float:
    return float((run.get(side) or {}).get("msg_per_sec") or 0.0)


def checks(run: dict) -> str:
    bad = []
    if run.get("exit_code"):
        bad.append(f"exit {run['exit_code']}")
    for key in ("lost", "malformed", "payload_mismatches"):
        if run.get(key):
            bad.append(f"{key} {run[key]}")
    if run.get("errors"):
        bad.append(f"errors {run['errors']}")
    return ", ".join(bad) or "ok"


def main() -> None:
    out = Path(sys.argv[1])
    rows = []
    for path in sorted(out.glob("*.json")):
        scenario, rest = path.stem.split("-", 1)
        form, round_ = rest.rsplit("-", 1)
        rows.append((int(round_), scenario, form, load(path)))
    rows.sort(key=lambda r: (r[0], r[1] != "push"))
    print("| round | scenario | form | msg/s | latency p50 / p99 ms | broker RSS after (peak) MiB | tool CPU % | checks |")
    print("|---|---|---|---|---|---|---|---|")
    means: dict = {}
    for round_, scenario, form, run in rows:
        side = "produce" if scenario == "push" else "consume"
        r = rate(run, side)
        means.setdefault((scenario, form), []).append(r)
        ops = ["push"] if scenario == "push" else ["pop", "ack"]
        lat = "; ".join(f"{op} {ms(run, op, 'p50')} / {ms(run, op, 'p99')}" for op in ops)
        rss = run.get("broker_rss_kb")
        hwm = run.get("broker_hwm_kb")
        mem = f"{rss / 1024:.0f} ({hwm / 1024:.0f})" if rss and hwm else "-"
        cpu = (run.get("tool") or {}).get("cpu_percent_of_core")
        print(f"| {round_} | {scenario} | {form} | {r:,.0f} | {lat} | {mem} | {cpu} | {checks(run)} |")
    print()
    print("| scenario | form | mean msg/s | runs | against JSON |")
    print("|---|---|---|---|---|")
    for (scenario, form), values in sorted(means.items()):
        base = means.get((scenario, "json"))
        ratio = f"{mean(values) / mean(base):.2f}x" if base and mean(base) else "-"
        runs = " / ".join(f"{v:,.0f}" for v in values)
        print(f"| {scenario} | {form} | {mean(values):,.0f} | {runs} | {ratio} |")


if __name__ == "__main__":
    main()
