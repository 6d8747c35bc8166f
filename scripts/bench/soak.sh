#!/usr/bin/env bash
# Soak of two broker binaries side by side, under the same load at the same time: each gets
# its own data dir, port and `queen-bench soak` (push, pop and ack at batch 1, 10 and 100),
# and the bench samples that broker's RSS. The per-minute RSS tables are printed at the end.
#
#   BASE=/path/to/old/queen NEW=target/release/queen MINUTES=10 scripts/bench/soak.sh [OUT_DIR]
#
# Both brokers share the two cores, so rates are lower than with one broker; what is compared
# is memory over time under identical conditions.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
BASE=${BASE:?BASE=path of the previous binary}
NEW=${NEW:-$repo/target/release/queen}
BENCH_BIN=${BENCH_BIN:-$repo/target/release/queen-bench}
MINUTES=${MINUTES:-10}
out=${1:-$(mktemp -d)}
root=${BENCH_DATA_ROOT:-$repo/.cache/bench}
mkdir -p "$out" "$root"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

declare -A url pid
for side in base new; do
    bin=$BASE
    [[ $side == new ]] && bin=$NEW
    data=$(mktemp -d "$root/soak-$side-XXXXXX")
    p=$(port)
    "$bin" serve --data-dir "$data" --http-addr "127.0.0.1:$p" --kafka-addr 127.0.0.1:0 >"$out/queen-$side.log" 2>&1 &
    pid[$side]=$!
    pids+=($!)
    url[$side]=http://127.0.0.1:$p
done
for side in base new; do
    for _ in $(seq 1 100); do
        curl -sf -o /dev/null "${url[$side]}/health" && break
        sleep 0.2
    done
done
benches=()
for side in base new; do
    "$BENCH_BIN" soak --url "${url[$side]}" --soak-minutes "$MINUTES" --rss-pid "${pid[$side]}" \
        --json >"$out/soak-$side.json" 2>"$out/soak-$side.txt" &
    benches+=($!)
done
code=0
for b in "${benches[@]}"; do wait "$b" || code=$?; done
for side in base new; do
    echo "== $side ($( [[ $side == base ]] && echo "$BASE" || echo "$NEW"))"
    cat "$out/soak-$side.txt"
done
exit "$code"
