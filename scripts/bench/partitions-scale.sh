#!/usr/bin/env bash
# Partition scaling in one queue (issue 4 target: with 1 000 000 partitions, push + consume
# throughput within 20 % of the 1 000-partition figure). One fresh broker per count; each
# run is a closed-loop e2e run whose producers walk the partitions round robin, so every
# partition is created in the first pass and written again on each later pass.
#
#   scripts/bench/partitions-scale.sh > partitions.json
#
# Env (defaults): COUNTS ("1 1000 100000 1000000") PRODUCERS (2) CONSUMERS (2) BATCH (100)
# MSG_BYTES (256) DURATION (30 s) POP_PARTITIONS (unset: min(batch, partitions)).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

COUNTS=${COUNTS:-1 1000 100000 1000000}
PRODUCERS=${PRODUCERS:-2}
CONSUMERS=${CONSUMERS:-2}
BATCH=${BATCH:-100}
MSG_BYTES=${MSG_BYTES:-256}
DURATION=${DURATION:-30}
POP_PARTITIONS=${POP_PARTITIONS:-}

need_tools
files=()
for count in $COUNTS; do
    data=$(new_data_dir)
    start_broker "$data"
    args=(e2e --partitions "$count" --producers "$PRODUCERS" --consumers "$CONSUMERS"
        --batch "$BATCH" --msg-bytes "$MSG_BYTES" --duration-secs "$DURATION")
    [[ -n $POP_PARTITIONS ]] && args+=(--pop-partitions "$POP_PARTITIONS")
    out=$BENCH_TMP/partitions-$count.json
    run_bench "$out" "${args[@]}"
    python3 - "$out" "$(rss_kb VmRSS)" <<'PY'
import json, sys
path, rss = sys.argv[1], sys.argv[2]
report = json.load(open(path))
report["broker_rss_kb_after"] = int(rss) if rss else None
json.dump(report, open(path, "w"))
PY
    files+=("$out")
    stop_broker
    drop_data_dir "$data"
done
emit partitions-scale "$(params_json counts="$COUNTS" producers="$PRODUCERS" \
    consumers="$CONSUMERS" batch="$BATCH" msg_bytes="$MSG_BYTES" duration_secs="$DURATION")" \
    "${files[@]}"
