#!/usr/bin/env bash
# Push and consume together (issue 4 targets: >= 60 000 msg/s end to end; p99 end-to-end
# latency under 50 ms at half that rate). Two runs on one fresh broker per run:
#   1. closed loop: the most the broker sustains;
#   2. open loop at HALF_FACTOR x the consume rate of run 1 (or at RATE if set): latency
#      measured from each batch's scheduled send time (no coordinated omission).
#
#   scripts/bench/e2e.sh > e2e.json
#
# Env (defaults): PRODUCERS (2) CONSUMERS (4 per group) PARTITIONS (100) BATCH (100)
# MSG_BYTES (256) CONSUMER_GROUPS (0 = queue mode) DURATION (30 s) HALF_FACTOR (0.5) RATE (unset)
# DRIVER (queen-http; kafka = the same runs through the broker's Kafka door on a fixed
# KAFKA_PORT: one Produce per batch with acks=-1, Fetch, OffsetCommit; see bench/README.md).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PRODUCERS=${PRODUCERS:-2}
# Four consumers: each one pops, then acks, then pops again (as the SDK consumers do), so
# one consumer moves at most BATCH messages per two commit round trips; two cannot keep up
# with two producers.
CONSUMERS=${CONSUMERS:-4}
PARTITIONS=${PARTITIONS:-100}
BATCH=${BATCH:-100}
MSG_BYTES=${MSG_BYTES:-256}
CONSUMER_GROUPS=${CONSUMER_GROUPS:-0}
DURATION=${DURATION:-30}
HALF_FACTOR=${HALF_FACTOR:-0.5}
RATE=${RATE:-}
DRIVER=${DRIVER:-queen-http}

need_tools
common=(e2e --producers "$PRODUCERS" --consumers "$CONSUMERS" --partitions "$PARTITIONS"
    --batch "$BATCH" --msg-bytes "$MSG_BYTES" --groups "$CONSUMER_GROUPS" --duration-secs "$DURATION"
    --driver "$DRIVER")
case $DRIVER in
queen-http) ;;
kafka)
    KAFKA_PORT=${KAFKA_PORT:-$(free_port)}
    common+=(--kafka-addr "127.0.0.1:$KAFKA_PORT")
    ;;
*) die "DRIVER=$DRIVER: queen-http or kafka" ;;
esac

data=$(new_data_dir)
start_broker "$data"
run_bench "$BENCH_TMP/closed.json" "${common[@]}"
stop_broker
drop_data_dir "$data"

if [[ -z $RATE ]]; then
    RATE=$(python3 - "$BENCH_TMP/closed.json" "$HALF_FACTOR" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
rate = (report.get("consume") or {}).get("msg_per_sec") or 0
print(max(1, int(rate * float(sys.argv[2]))))
PY
)
fi
log "open loop at $RATE msg/s"
data=$(new_data_dir)
start_broker "$data"
run_bench "$BENCH_TMP/open.json" "${common[@]}" --rate "$RATE"
stop_broker
drop_data_dir "$data"

emit e2e "$(params_json producers="$PRODUCERS" consumers="$CONSUMERS" partitions="$PARTITIONS" \
    batch="$BATCH" msg_bytes="$MSG_BYTES" groups="$CONSUMER_GROUPS" duration_secs="$DURATION" \
    open_loop_rate="$RATE" driver="$DRIVER")" "$BENCH_TMP/closed.json" "$BENCH_TMP/open.json"
