"""Table of a scripts/bench/compare.sh directory: one row per scenario, side and round.

    python3 scripts/bench/compare_table.py OUT_DIR
"""

import json
import sys
from pathlib import Path


def cells(run: dict) -> str:
    parts = []
    rate = (run.get("config") or {}).get("rate")
    if rate:
        parts.append(f"offered {rate:,.0f} msg/s")
    for side in ("produce", "consume"):
        moved = run.get(side) or {}
        if moved.get("msg_per_sec"):
            parts.append(f"{side} {moved['msg_per_sec']:,.0f} msg/s")
    for name, lat in sorted((run.get("latency_us") or {}).items()):
        if lat and lat.get("count"):
            parts.append(f"{name} p50 {lat['p50'] / 1000:.1f} p99 {lat['p99'] / 1000:.1f} ms")
    if run.get("lost"):
        parts.append(f"LOST {run['lost']}")
    return "; ".join(parts)


def main() -> None:
    out = Path(sys.argv[1])
    print("| scenario | binary | round | mode | result |")
    print("|---|---|---|---|---|")
    for scenario in ("push", "consume", "e2e"):
        for side in ("base", "new"):
            for path in sorted(out.glob(f"{scenario}-{side}-*.json")):
                round_no = path.stem.rsplit("-", 1)[1]
                report = json.loads(path.read_text() or "{}")
                for run in report.get("runs", []):
                    mode = (run.get("config") or {}).get("mode", "")
                    print(f"| {scenario} | {side} | {round_no} | {mode} | {cells(run)} |")


if __name__ == "__main__":
    main()
