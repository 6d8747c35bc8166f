"""The checkpoint series of one phase of a run: the difference of two /metrics/prometheus
scrapes (the one right before the phase, the one at its end), so a histogram holds only that
phase's samples, not the pre-fill's (review s29 ckpt M2). Then, per histogram, its n, mean,
the bucket holding the p99 sample, and the samples over 5 ms per checkpoint taken in the phase
(a p99 over different sample counts is not comparable between builds: review s29 ckpt M3).

    python3 scripts/bench/prom_delta.py before.prom end.prom
"""

import math
import re
import sys

SERIES = re.compile(r"^(queen_checkpoint_[a-z_]+)(\{[^}]*\})?\s+(\S+)$")
LE = re.compile(r'le="([^"]+)"')
SLOW_SECS = 0.005


def parse(text: str) -> dict:
    """Series key (name and labels as written) to value, checkpoint series only."""
    out = {}
    for line in text.splitlines():
        m = SERIES.match(line.strip())
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out[(m.group(1), m.group(2) or "")] = value
    return out


def delta(before: dict, end: dict) -> dict:
    """Each end series less its value before (absent before: the whole of it)."""
    return {key: value - before.get(key, 0.0) for key, value in end.items()}


def histograms(series: dict) -> dict:
    """Histogram (base name, labels without `le`) to its buckets [(le, cumulative)], sum, count."""
    out = {}
    for (name, labels), value in series.items():
        for suffix in ("_bucket", "_sum", "_count"):
            if not name.endswith(suffix):
                continue
            base = name[: -len(suffix)]
            rest = LE.sub("", labels).replace(",,", ",").replace("{,", "{").replace(",}", "}")
            h = out.setdefault((base, rest), {"buckets": [], "sum": 0.0, "count": 0.0})
            if suffix == "_bucket":
                le = LE.search(labels)
                if le:
                    h["buckets"].append((float(le.group(1)), value))
            else:
                h[suffix[1:]] = value
    for h in out.values():
        h["buckets"].sort()
    return out


def p99_bucket(buckets: list, count: float, seconds: bool = True) -> str:
    """The bucket (lower, upper] holding the p99 sample, as text (seconds as ms); "-" without
    samples."""
    if count <= 0:
        return "-"
    scale, unit = (1e3, " ms") if seconds else (1.0, "")
    rank = math.ceil(0.99 * count)
    lower = 0.0
    for le, cumulative in buckets:
        if cumulative >= rank:
            return f"{lower * scale:g}-{le * scale:g}{unit}"
        lower = le
    return f"> {lower * scale:g}{unit}"


def over(buckets: list, count: float, secs: float) -> float:
    """Samples above `secs` (which must be a bucket bound; else the next bound above it)."""
    for le, cumulative in buckets:
        if le >= secs:
            return count - cumulative
    return 0.0


def summary(series: dict) -> list:
    hs = histograms(series)
    checkpoints = sum(h["count"] for (base, _), h in hs.items()
                      if base == "queen_checkpoint_encode_seconds")
    lines = [f"# checkpoints in the phase: {checkpoints:g}"]
    for (base, labels), h in sorted(hs.items()):
        n = h["count"]
        if not base.endswith("_seconds"):
            # A count per sample (copies per stretch): no unit, no 5 ms threshold.
            mean = h["sum"] / n if n > 0 else 0.0
            lines.append(f"# {base}{labels}: n {n:g}, mean {mean:.1f}, sum {h['sum']:g}, "
                         f"p99 {p99_bucket(h['buckets'], n, seconds=False)}")
            continue
        mean = h["sum"] / n * 1e3 if n > 0 else 0.0
        slow = over(h["buckets"], n, SLOW_SECS)
        per = f"{slow / checkpoints:.2f}" if checkpoints > 0 else "-"
        lines.append(f"# {base}{labels}: n {n:g}, mean {mean:.3f} ms, sum {h['sum']:.3f} s, "
                     f"p99 {p99_bucket(h['buckets'], n)}, over 5 ms {slow:g} ({per} per checkpoint)")
    return lines


def main(argv: list) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        text = f.read()
    if not text.strip():
        # A failed scrape: the delta would be the whole run, printed as the phase's.
        print(f"{argv[1]} is empty: no scrape before the phase", file=sys.stderr)
        return 1
    before = parse(text)
    with open(argv[2]) as f:
        end = parse(f.read())
    d = delta(before, end)
    for (name, labels), value in sorted(d.items()):
        print(f"{name}{labels} {value:.9g}")
    for line in summary(d):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
