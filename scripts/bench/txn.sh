#!/usr/bin/env bash
# Transactions of TXN_SIZE pushes (issue 4 target: p99 commit <= 10 ms at 5 000 msg/s).
# Open loop at RATE msg/s (= RATE / TXN_SIZE transactions per second), latency from each
# transaction's scheduled time; afterwards every message is consumed to count lost.
#
#   scripts/bench/txn.sh > txn.json
#
# Env (defaults): RATE (5000; empty = closed loop) TXN_SIZE (10) PRODUCERS (4)
# PARTITIONS (100) MSG_BYTES (256) DURATION (30 s).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RATE=${RATE-5000}
TXN_SIZE=${TXN_SIZE:-10}
PRODUCERS=${PRODUCERS:-4}
PARTITIONS=${PARTITIONS:-100}
MSG_BYTES=${MSG_BYTES:-256}
DURATION=${DURATION:-30}

need_tools
data=$(new_data_dir)
start_broker "$data"
args=(txn --txn-size "$TXN_SIZE" --producers "$PRODUCERS" --partitions "$PARTITIONS"
    --msg-bytes "$MSG_BYTES" --duration-secs "$DURATION" --verify --consumers 2)
[[ -n $RATE ]] && args+=(--rate "$RATE")
run_bench "$BENCH_TMP/txn.json" "${args[@]}"
stop_broker
drop_data_dir "$data"
emit txn "$(params_json rate="$RATE" txn_size="$TXN_SIZE" producers="$PRODUCERS" \
    partitions="$PARTITIONS" msg_bytes="$MSG_BYTES" duration_secs="$DURATION")" \
    "$BENCH_TMP/txn.json"
