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
# What the broker counts at the same moment (its memory pools, checkpoints written so far) and
# how much of RSS is huge pages: to tell the live structures from what the allocator keeps.
curl -s --max-time 5 "$BROKER_URL/metrics/prometheus" >"$BENCH_TMP/after.prom" 2>/dev/null || true
awk '$1 == "AnonHugePages:" { print $2 }' "/proc/$BROKER_PID/smaps_rollup" >"$BENCH_TMP/thp" 2>/dev/null || true
log_bytes=$(du -sb "$data" | cut -f1)
stop_broker
drop_data_dir "$data"

python3 - "$BENCH_TMP/fill.json" "$PARTITIONS" "$base_rss" "$base_anon" "$base_file" \
    "$after_rss" "$after_anon" "$after_file" "$peak" "$log_bytes" "$BENCH_TMP/after.prom" \
    "$BENCH_TMP/thp" >"$BENCH_TMP/memory.json" <<'PY'
import json, re, sys
fill = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
base_rss, base_anon, base_file, rss, anon, file_, peak, log_bytes = map(int, sys.argv[3:11])
accepted = (fill.get("produce") or {}).get("messages") or 0
per = lambda after, before: round((after - before) * 1024 / n, 1) if n else None
pools, checkpoints = {}, None
try:
    for line in open(sys.argv[11]):
        m = re.match(r'queen_memory_bytes\{pool="([a-z_]+)"\} (\S+)', line)
        if m:
            pools[m.group(1)] = int(float(m.group(2)))
        m = re.match(r'queen_checkpoint_seconds_count(\{[^}]*\})? (\S+)', line)
        if m:
            checkpoints = (checkpoints or 0) + int(float(m.group(2)))
except OSError:
    pass
try:
    thp_kb = int(open(sys.argv[12]).read().strip())
except (OSError, ValueError):
    thp_kb = None
print(json.dumps({
    "partitions": n,
    "messages_accepted": accepted,
    "baseline_kb": {"VmRSS": base_rss, "RssAnon": base_anon, "RssFile": base_file},
    "after_kb": {"VmRSS": rss, "RssAnon": anon, "RssFile": file_, "VmHWM": peak},
    "bytes_per_partition": per(rss, base_rss),
    "anon_bytes_per_partition": per(anon, base_anon),
    "file_bytes_per_partition": per(file_, base_file),
    "data_dir_bytes": log_bytes,
    # At the sample: the broker's pools (bytes, counted from capacities), how many checkpoints
    # it had written, and the huge pages in its RSS (kB).
    "pools_after": pools,
    "checkpoints_written": checkpoints,
    "anon_huge_pages_kb": thp_kb,
    "fill": fill,
}))
PY
emit memory-per-idle-partition "$(params_json partitions="$PARTITIONS" msg_bytes="$MSG_BYTES" \
    producers="$PRODUCERS" batch="$BATCH" settle_secs="$SETTLE")" "$BENCH_TMP/memory.json"
