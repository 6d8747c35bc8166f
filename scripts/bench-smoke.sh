#!/usr/bin/env bash
# A few seconds of every queen-bench scenario at tiny scale against a real broker, so the
# load tool never rots: each run must exit 0 and report lost == 0 (push/txn with --verify).
# Not a measurement. Part of scripts/test.sh; whole run <= 30 s once built.
#
#   scripts/bench-smoke.sh
#
# Builds queen and queen-bench (release; a no-op when test.sh built the workspace), starts
# `queen serve` on a temp data dir and a free 127.0.0.1 port, runs push, consume, e2e
# (closed and open loop, two consumer groups) and txn, and kills the broker.
# SMOKE_NO_BUILD=1 skips the build (binaries from $QUEEN_BIN / $BENCH_BIN).
set -euo pipefail
SCRIPT_NAME=bench-smoke
source "$(dirname "${BASH_SOURCE[0]}")/bench/lib.sh"

cd "$REPO"
if [[ ${SMOKE_NO_BUILD:-0} != 1 ]]; then
    log "building queen and queen-bench"
    cargo build --release --quiet -p queenmq-bench -p queenmq-broker
fi
need_tools
data=$(mktemp -d)
start_broker "$data"

tiny=(--duration-secs 2 --producers 2 --consumers 2 --partitions 8 --batch 50
    --msg-bytes 256 --drain-secs 5 --messages 20000)
failures=0
check() {
    local name=$1
    shift
    local out=$BENCH_TMP/$name.json
    run_bench "$out" "$@" "${tiny[@]}"
    local verdict
    verdict=$(python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
moved = (r.get("consume") if r["scenario"] == "consume" else r.get("produce")) or {}
problems = []
if r.get("exit_code") != 0:
    problems.append(f"exit {r.get('exit_code')}")
if r.get("lost") != 0:
    problems.append(f"lost {r.get('lost')}")
if not moved.get("messages"):
    problems.append("no messages")
summary = f"{moved.get('messages', 0)} msgs, {moved.get('msg_per_sec', 0)} msg/s, errors {r.get('errors')}"
print(("FAIL " + ", ".join(problems) + " · " if problems else "ok · ") + summary)
for text in r.get("error_samples", [])[:3]:
    print("  error: " + text)
PY
)
    log "$name: $verdict"
    [[ $verdict == ok* ]] || failures=$((failures + 1))
}

check push push --verify
check consume consume --prefill 2000
check e2e e2e --groups 2
check e2e-open e2e --rate 2000
check txn txn --txn-size 10 --verify

stop_broker
rm -rf "$data"
((failures == 0)) || die "$failures of 5 runs failed"
log "all runs passed in ${SECONDS}s"
