#!/usr/bin/env bash
# A few seconds of every queen-bench scenario at tiny scale against a real broker, so the
# load tool never rots: each run must exit 0 and report lost == 0 (push/txn with --verify),
# no malformed or changed payload, no failed request, no refused push item or ack, no error
# text. The binary forms (QPB1, QPB1 frames, QTB1, QPF1) run too: every popped payload is
# compared byte for byte with the one pushed (its pad carries a digest of its fields), so a
# wrong encoder fails here; a QPF1 pop answered in JSON is an error in the tool, so a binary
# run cannot pass as JSON. Not a measurement. Part of scripts/test.sh; about 25 s once built
# on an idle machine, under 60 s at load 10; each run is cut at RUN_TIMEOUT (60 s).
#
#   scripts/bench-smoke.sh
#
# Builds queen and queen-bench (release; a no-op when test.sh built the workspace), starts
# `queen serve` on a temp data dir and a free 127.0.0.1 port, runs push, consume, e2e
# (closed and open loop, two consumer groups), txn, and the binary forms, and kills the broker.
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
python3 "$REPO/scripts/bench/test_binary_table.py" 2>&1 | tail -1 | grep -qx OK ||
    die "scripts/bench/test_binary_table.py failed"
export RUN_TIMEOUT=${RUN_TIMEOUT:-60}
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
    verdict=$(python3 - "$out" "$@" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
moved = (r.get("consume") if r["scenario"] == "consume" else r.get("produce")) or {}
problems = []
if r.get("exit_code") != 0:
    problems.append(f"exit {r.get('exit_code')}")
if r.get("lost") != 0:
    problems.append(f"lost {r.get('lost')}")
if not r.get("accepted"):
    problems.append("nothing accepted and verified")
for key in ("malformed", "payload_mismatches", "errors", "push_items_refused",
            "ack_items_refused"):
    if r.get(key) != 0:
        problems.append(f"{key} {r.get(key)}")
if r.get("error_samples"):
    problems.append(f"{len(r['error_samples'])} error texts")
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
check push-qpb1 push --verify --push-form qpb1 --pop-form qpf1
check push-frames push --verify --push-form qpb1-frames --pop-form qpf1
check consume-qpf1 consume --prefill 2000 --pop-form qpf1
check txn-qtb1 txn --txn-size 10 --verify --push-form qpb1-frames --pop-form qpf1
check e2e-binary e2e --push-form qpb1-frames --pop-form qpf1

stop_broker
rm -rf "$data"
((failures == 0)) || die "$failures of 10 runs failed"
log "all runs passed in ${SECONDS}s"
