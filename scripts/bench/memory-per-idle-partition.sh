#!/usr/bin/env bash
# Memory per idle partition (issue 4 target: <= 200 bytes of broker RSS per idle partition
# with 1 000 000 partitions). Fresh broker; baseline RSS after SETTLE seconds; then one
# message pushed to each of PARTITIONS partitions of one queue (producer k owns partitions
# k, k+n, …, and pushes exactly one message to each); RSS again after SETTLE seconds.
# RSS is read from /proc/<pid>/status: VmRSS (what the target counts), split into RssAnon
# (heap) and RssFile (mapped segment pages, which the kernel may drop under pressure).
#
#   scripts/bench/memory-per-idle-partition.sh > memory.json
#
# Env (defaults): PARTITIONS (1000000) MSG_BYTES (64) PRODUCERS (4) BATCH (1000) SETTLE (5 s).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PARTITIONS=${PARTITIONS:-1000000}
MSG_BYTES=${MSG_BYTES:-64}
PRODUCERS=${PRODUCERS:-4}
BATCH=${BATCH:-1000}
SETTLE=${SETTLE:-5}

need_tools
data=$(new_data_dir)
start_broker "$data"
sleep "$SETTLE"
base_rss=$(rss_kb VmRSS)
base_anon=$(rss_kb RssAnon)
base_file=$(rss_kb RssFile)
run_bench "$BENCH_TMP/fill.json" push --partitions "$PARTITIONS" --messages "$PARTITIONS" \
    --producers "$PRODUCERS" --batch "$BATCH" --msg-bytes "$MSG_BYTES" --duration-secs 86400
sleep "$SETTLE"
after_rss=$(rss_kb VmRSS)
after_anon=$(rss_kb RssAnon)
after_file=$(rss_kb RssFile)
peak=$(rss_kb VmHWM)
log_bytes=$(du -sb "$data" | cut -f1)
stop_broker
drop_data_dir "$data"

python3 - "$BENCH_TMP/fill.json" "$PARTITIONS" "$base_rss" "$base_anon" "$base_file" \
    "$after_rss" "$after_anon" "$after_file" "$peak" "$log_bytes" >"$BENCH_TMP/memory.json" <<'PY'
import json, sys
fill = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
base_rss, base_anon, base_file, rss, anon, file_, peak, log_bytes = map(int, sys.argv[3:11])
accepted = (fill.get("produce") or {}).get("messages") or 0
per = lambda after, before: round((after - before) * 1024 / n, 1) if n else None
print(json.dumps({
    "partitions": n,
    "messages_accepted": accepted,
    "baseline_kb": {"VmRSS": base_rss, "RssAnon": base_anon, "RssFile": base_file},
    "after_kb": {"VmRSS": rss, "RssAnon": anon, "RssFile": file_, "VmHWM": peak},
    "bytes_per_partition": per(rss, base_rss),
    "anon_bytes_per_partition": per(anon, base_anon),
    "file_bytes_per_partition": per(file_, base_file),
    "data_dir_bytes": log_bytes,
    "fill": fill,
}))
PY
emit memory-per-idle-partition "$(params_json partitions="$PARTITIONS" msg_bytes="$MSG_BYTES" \
    producers="$PRODUCERS" batch="$BATCH" settle_secs="$SETTLE")" "$BENCH_TMP/memory.json"
