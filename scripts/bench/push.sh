#!/usr/bin/env bash
# Push only (issue 4 target: >= 150 000 msg/s with batch 100 and 256-byte messages, every
# group commit fsynced). Fresh single-node broker, closed loop unless RATE is set.
#
#   scripts/bench/push.sh > push.json
#
# Env (defaults): PRODUCERS (4) PARTITIONS (100) BATCH (100) MSG_BYTES (256)
# DURATION (30 s) RATE (unset: closed loop) VERIFY (0; 1 = consume afterwards, count lost)
# PUSH_FORM (json; qpb1 or qpb1-frames: the binary bodies) POP_FORM (json; qpf1, for VERIFY).
# The broker's VmRSS and VmHWM after the run are added as broker_rss_kb / broker_hwm_kb.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PRODUCERS=${PRODUCERS:-4}
PARTITIONS=${PARTITIONS:-100}
BATCH=${BATCH:-100}
MSG_BYTES=${MSG_BYTES:-256}
DURATION=${DURATION:-30}
RATE=${RATE:-}
VERIFY=${VERIFY:-0}
PUSH_FORM=${PUSH_FORM:-json}
POP_FORM=${POP_FORM:-json}

need_tools
data=$(new_data_dir)
start_broker "$data"
args=(push --producers "$PRODUCERS" --partitions "$PARTITIONS" --batch "$BATCH"
    --msg-bytes "$MSG_BYTES" --duration-secs "$DURATION" --consumers 2
    --push-form "$PUSH_FORM" --pop-form "$POP_FORM")
[[ -n $RATE ]] && args+=(--rate "$RATE")
[[ $VERIFY == 1 ]] && args+=(--verify)
run_bench "$BENCH_TMP/push.json" "${args[@]}"
annotate "$BENCH_TMP/push.json" broker_rss_kb "$(rss_kb VmRSS)"
annotate "$BENCH_TMP/push.json" broker_hwm_kb "$(rss_kb VmHWM)"
stop_broker
drop_data_dir "$data"
emit push "$(params_json producers="$PRODUCERS" partitions="$PARTITIONS" batch="$BATCH" \
    msg_bytes="$MSG_BYTES" duration_secs="$DURATION" rate="$RATE" verify="$VERIFY" push_form="$PUSH_FORM" \
    pop_form="$POP_FORM")" \
    "$BENCH_TMP/push.json"
