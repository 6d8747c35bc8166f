#!/usr/bin/env bash
# Partition scaling in one queue (issue 4 target: with 1 000 000 partitions, push + consume
# throughput within 20 % of the 1 000-partition figure). One fresh broker per count, two
# runs on one queue:
#   1. create (PRECREATE=1): a `consume` run whose pre-fill pushes exactly one message to
#      each partition, then pops + acks them all — so every partition exists (and the
#      consume rate over that many partitions is measured too);
#   2. e2e: closed-loop push + consume on the same queue, producers walking all partitions
#      round robin. The queue-mode cursor is past run 1, so only run 2's messages count.
#
#   scripts/bench/partitions-scale.sh > partitions.json
#
# Env (defaults): COUNTS ("1 1000 100000 1000000") PRODUCERS (2) CONSUMERS (4) BATCH (100)
# MSG_BYTES (256) DURATION (30 s) POP_PARTITIONS (unset: min(batch, partitions))
# PRECREATE (1).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

COUNTS=${COUNTS:-1 1000 100000 1000000}
PRODUCERS=${PRODUCERS:-2}
# Four consumers: each one pops, then acks, then pops again (as the SDK consumers do), so
# one consumer moves at most BATCH messages per two commit round trips; two cannot keep up
# with two producers.
CONSUMERS=${CONSUMERS:-4}
BATCH=${BATCH:-100}
MSG_BYTES=${MSG_BYTES:-256}
DURATION=${DURATION:-30}
POP_PARTITIONS=${POP_PARTITIONS:-}
PRECREATE=${PRECREATE:-1}

need_tools
files=()
for count in $COUNTS; do
    data=$(new_data_dir)
    start_broker "$data"
    queue=bench-scale-$count
    shape=(--queue "$queue" --partitions "$count" --producers "$PRODUCERS"
        --consumers "$CONSUMERS" --batch "$BATCH" --msg-bytes "$MSG_BYTES")
    [[ -n $POP_PARTITIONS ]] && shape+=(--pop-partitions "$POP_PARTITIONS")
    if [[ $PRECREATE == 1 ]]; then
        run_bench "$BENCH_TMP/create-$count.json" consume "${shape[@]}" --prefill "$count" \
            --duration-secs 86400
        files+=("$BENCH_TMP/create-$count.json")
    fi
    out=$BENCH_TMP/partitions-$count.json
    run_bench "$out" e2e "${shape[@]}" --duration-secs "$DURATION"
    annotate "$out" broker_rss_kb_after "$(rss_kb VmRSS)"
    files+=("$out")
    stop_broker
    drop_data_dir "$data"
done
emit partitions-scale "$(params_json counts="$COUNTS" producers="$PRODUCERS" \
    consumers="$CONSUMERS" batch="$BATCH" msg_bytes="$MSG_BYTES" duration_secs="$DURATION" \
    precreate="$PRECREATE")" \
    "${files[@]}"
