#!/usr/bin/env bash
# Pop + ack only: the queue is pre-filled (unmeasured), then consumers pop and ack until it
# is empty (or DURATION passes). Fresh single-node broker.
#
#   scripts/bench/consume.sh > consume.json
#
# Env (defaults): PREFILL (1000000) CONSUMERS (4) PRODUCERS (4, for the pre-fill)
# PARTITIONS (100) BATCH (100) MSG_BYTES (256) CONSUMER_GROUPS (0 = queue mode) DURATION (120 s)
# POP_FORM (json; qpf1: framed answers) PUSH_FORM (json; the pre-fill's body).
# The broker's VmRSS and VmHWM after the run are added as broker_rss_kb / broker_hwm_kb.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PREFILL=${PREFILL:-1000000}
CONSUMERS=${CONSUMERS:-4}
PRODUCERS=${PRODUCERS:-4}
PARTITIONS=${PARTITIONS:-100}
BATCH=${BATCH:-100}
MSG_BYTES=${MSG_BYTES:-256}
CONSUMER_GROUPS=${CONSUMER_GROUPS:-0}
DURATION=${DURATION:-120}
POP_FORM=${POP_FORM:-json}
PUSH_FORM=${PUSH_FORM:-json}

need_tools
data=$(new_data_dir)
start_broker "$data"
run_bench "$BENCH_TMP/consume.json" consume --prefill "$PREFILL" --consumers "$CONSUMERS" \
    --producers "$PRODUCERS" --partitions "$PARTITIONS" --batch "$BATCH" \
    --msg-bytes "$MSG_BYTES" --groups "$CONSUMER_GROUPS" --duration-secs "$DURATION" \
    --pop-form "$POP_FORM" --push-form "$PUSH_FORM"
annotate "$BENCH_TMP/consume.json" broker_rss_kb "$(rss_kb VmRSS)"
annotate "$BENCH_TMP/consume.json" broker_hwm_kb "$(rss_kb VmHWM)"
stop_broker
drop_data_dir "$data"
emit consume "$(params_json prefill="$PREFILL" consumers="$CONSUMERS" producers="$PRODUCERS" \
    partitions="$PARTITIONS" batch="$BATCH" msg_bytes="$MSG_BYTES" groups="$CONSUMER_GROUPS" \
    duration_secs="$DURATION" pop_form="$POP_FORM" push_form="$PUSH_FORM")" "$BENCH_TMP/consume.json"
