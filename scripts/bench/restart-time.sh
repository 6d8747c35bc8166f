#!/usr/bin/env bash
# Restart time (issue 4 target: serving again within 10 s with 10 GB of log). For each size:
# a fresh broker is filled with pushes until the data directory holds about SIZE (messages =
# SIZE / MSG_BYTES), killed with SIGKILL (no checkpoint on the way down), and started again
# on the same data directory. Measured from the exec of the new process:
#   health_ms     until GET /health answers 200;
#   first_pop_ms  until GET /api/v1/pop/queue/<q>?batch=1&wait=false answers 200 (a message).
#
#   scripts/bench/restart-time.sh > restart.json
#
# Env (defaults): SIZES ("1G 10G", IEC suffixes) MSG_BYTES (1024) PRODUCERS (4) BATCH (100)
# PARTITIONS (100) RESTART_TIMEOUT (600 s).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SIZES=${SIZES:-1G 10G}
MSG_BYTES=${MSG_BYTES:-1024}
PRODUCERS=${PRODUCERS:-4}
BATCH=${BATCH:-100}
PARTITIONS=${PARTITIONS:-100}
RESTART_TIMEOUT=${RESTART_TIMEOUT:-600}
QUEUE=bench-restart

need_tools
files=()
for size in $SIZES; do
    bytes=$(numfmt --from=iec "$size")
    messages=$((bytes / MSG_BYTES))
    data=$(new_data_dir)
    start_broker "$data"
    run_bench "$BENCH_TMP/fill-$size.json" push --queue "$QUEUE" --messages "$messages" \
        --producers "$PRODUCERS" --batch "$BATCH" --partitions "$PARTITIONS" \
        --msg-bytes "$MSG_BYTES" --duration-secs 86400
    log_bytes=$(du -sb "$data" | cut -f1)
    kill9_broker
    log "killed with SIGKILL at $log_bytes bytes of data; restarting"

    started=$(now_ms)
    launch_broker "$data"
    wait_health "$RESTART_TIMEOUT"
    health=$(now_ms)
    deadline=$((started + RESTART_TIMEOUT * 1000))
    until [[ $(http_code "$BROKER_URL/api/v1/pop/queue/$QUEUE?batch=1&wait=false") == 200 ]]; do
        kill -0 "$BROKER_PID" 2>/dev/null || die "broker exited after restart"
        (($(now_ms) < deadline)) || die "no message popped within ${RESTART_TIMEOUT}s of the restart"
        sleep 0.01
    done
    popped=$(now_ms)
    rss=$(rss_kb VmRSS)
    stop_broker
    drop_data_dir "$data"

    python3 - "$BENCH_TMP/fill-$size.json" "$size" "$messages" "$log_bytes" \
        $((health - started)) $((popped - started)) "$rss" >"$BENCH_TMP/restart-$size.json" <<'PY'
import json, sys
fill = json.load(open(sys.argv[1]))
print(json.dumps({
    "size": sys.argv[2],
    "messages_requested": int(sys.argv[3]),
    "messages_accepted": (fill.get("produce") or {}).get("messages"),
    "data_dir_bytes": int(sys.argv[4]),
    "health_ms": int(sys.argv[5]),
    "first_pop_ms": int(sys.argv[6]),
    "rss_kb_after_restart": int(sys.argv[7]) if sys.argv[7] else None,
    "fill": fill,
}))
PY
    files+=("$BENCH_TMP/restart-$size.json")
done
emit restart-time "$(params_json sizes="$SIZES" msg_bytes="$MSG_BYTES" producers="$PRODUCERS" \
    batch="$BATCH" partitions="$PARTITIONS")" "${files[@]}"
