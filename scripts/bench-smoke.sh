#!/usr/bin/env bash
# A few seconds of every queen-bench scenario at tiny scale against a real broker, so the
# load tool never rots: each run must exit 0 and report lost == 0 (push/txn with --verify),
# no malformed or changed payload, no failed request, no refused push item or ack, no error
# text. The binary forms (QPB1, QPB1 frames, QTB1, QPF1) run too: every popped payload is
# compared byte for byte with the one pushed (its pad carries a digest of its fields), so a
# wrong encoder fails here; a QPF1 pop answered in JSON is an error in the tool, so a binary
# run cannot pass as JSON. The Kafka driver runs e2e and consume through the broker's Kafka
# door (a fixed KAFKA_PORT): produce, fetch and offset commits, every record checked the same
# way; a Kafka run also fails on any duplicate or unexpected id, and every report must name
# the driver the run asked for (scripts/bench/smoke_check.py). Not a measurement. Part of
# scripts/test.sh (so of CI): 24-27 s once built for all 12 runs, the two Kafka ones included,
# measured at load 10 on the 2-core box (2026-12-04); each run stops at --messages 20000 or
# 2 s, and is cut at RUN_TIMEOUT (60 s).
#
#   scripts/bench-smoke.sh
#
# Builds queen and queen-bench (release; a no-op when test.sh built the workspace), starts
# `queen serve` on a temp data dir and a free 127.0.0.1 port, runs push, consume, e2e
# (closed and open loop, two consumer groups), txn, the binary forms and the Kafka driver, and
# kills the broker.
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
python3 "$REPO/scripts/bench/test_smoke_check.py" 2>&1 | tail -1 | grep -qx OK ||
    die "scripts/bench/test_smoke_check.py failed"
python3 "$REPO/scripts/bench/test_prom_delta.py" 2>&1 | tail -1 | grep -qx OK ||
    die "scripts/bench/test_prom_delta.py failed"
export RUN_TIMEOUT=${RUN_TIMEOUT:-60}
data=$(mktemp -d)
KAFKA_PORT=$(free_port)
start_broker "$data"
kafka=(--driver kafka --kafka-addr "127.0.0.1:$KAFKA_PORT")

tiny=(--duration-secs 2 --producers 2 --consumers 2 --partitions 8 --batch 50
    --msg-bytes 256 --drain-secs 5 --messages 20000)
failures=0
check() {
    local name=$1
    shift
    local out=$BENCH_TMP/$name.json
    run_bench "$out" "$@" "${tiny[@]}"
    local verdict
    verdict=$(python3 "$REPO/scripts/bench/smoke_check.py" "$out" "$@")
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
check e2e-kafka e2e --groups 2 "${kafka[@]}"
check consume-kafka consume --prefill 2000 "${kafka[@]}"

stop_broker
rm -rf "$data"
((failures == 0)) || die "$failures of 12 runs failed"
log "all runs passed in ${SECONDS}s"
