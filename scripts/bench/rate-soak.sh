#!/usr/bin/env bash
# RSS over a steady open-loop load (issue 12, Done-when 3): one fresh broker, `queen-bench
# e2e --rate RATE` (push, pop and ack at a fixed rate) for MINUTES, the broker's VmRSS and
# its memory pools (`queen_memory_bytes{pool}`) sampled every EVERY seconds, then a table per
# minute and the growth from the end of minute WARM (the dedup hot table and the bounded
# caches fill first) to the end of the load, per message stored in between. Then a kill -9
# and the time until the restarted broker answers /health 200.
#
#   RATE=50000 MINUTES=10 MSG_BYTES=128 scripts/bench/rate-soak.sh > rate-soak.txt
#
# Env (defaults): RATE (50000) MINUTES (10) WARM (2) EVERY (5) PRODUCERS (2) CONSUMERS (4)
# PARTITIONS (100) BATCH (100) MSG_BYTES (256). The broker runs with its defaults plus what
# the environment sets (QUEEN_* keys, e.g. QUEEN_DEDUP_HOT_IDS). Binaries as lib.sh says.
# KEEP_DATA=1 keeps the data dir's logs and the tool's report (lib.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RATE=${RATE:-50000}
MINUTES=${MINUTES:-10}
WARM=${WARM:-2}
EVERY=${EVERY:-5}
PRODUCERS=${PRODUCERS:-2}
CONSUMERS=${CONSUMERS:-4}
PARTITIONS=${PARTITIONS:-100}
BATCH=${BATCH:-100}
MSG_BYTES=${MSG_BYTES:-256}

need_tools
data=$(new_data_dir)
start_broker "$data"
samples=$BENCH_TMP/samples.tsv
report=$BENCH_TMP/e2e.json
secs=$((MINUTES * 60))
"$BENCH_BIN" e2e --url "$BROKER_URL" --json --rate "$RATE" --duration-secs "$secs" \
    --producers "$PRODUCERS" --consumers "$CONSUMERS" --partitions "$PARTITIONS" \
    --batch "$BATCH" --msg-bytes "$MSG_BYTES" >"$report" &
bench=$!
log "queen-bench e2e at $RATE msg/s for $secs s (pid $bench)"
start=$(now_ms)
# t_ms, VmRSS kB, pools as name=bytes, pushed so far (queen_messages_pushed_total or empty)
while kill -0 "$bench" 2>/dev/null; do
    t=$(($(now_ms) - start))
    rss=$(rss_kb VmRSS || true)
    pools=$(curl -s --max-time 2 "$BROKER_URL/metrics/prometheus" 2>/dev/null |
        awk '/^queen_memory_bytes\{/ { match($0, /pool="[a-z_]+"/); p = substr($0, RSTART + 6, RLENGTH - 7); printf "%s=%s ", p, $NF }' || true)
    printf '%s\t%s\t%s\n' "$t" "$rss" "$pools" >>"$samples"
    sleep "$EVERY"
done
code=0
wait "$bench" || code=$?
log "queen-bench exited $code"
hwm=$(rss_kb VmHWM || true)
du_kb=$(du -sk "$data" | cut -f1)
# A crash at the end of the load, then the time until /health answers 200 again: the restart
# reads the checkpoint, the log after it and the dedup filters the load left.
kill9_broker
t0=$(now_ms)
launch_broker "$data" "$BROKER_PORT"
wait_health 120
restart_ms=$(($(now_ms) - t0))
log "restart after kill -9: /health 200 after $restart_ms ms (data dir $((du_kb / 1024)) MiB)"
stop_broker
drop_data_dir "$data"
python3 - "$samples" "$report" "$WARM" "$RATE" "$hwm" "$du_kb" "$code" "$restart_ms" <<'PY'
import json, sys
samples, report_path, warm, rate, hwm, du_kb, code, restart_ms = sys.argv[1:9]
warm, rate = int(warm), float(rate)
rows = []
for line in open(samples):
    t, rss, pools = (line.rstrip("\n").split("\t") + ["", ""])[:3]
    if not rss:
        continue
    p = dict(kv.split("=", 1) for kv in pools.split() if "=" in kv)
    rows.append((int(t) / 1000.0, int(rss) * 1024, {k: float(v) for k, v in p.items()}))
try:
    report = json.load(open(report_path))
except (OSError, ValueError):
    report = {}
pools = sorted({k for _, _, p in rows for k in p})
print(f"# rate-soak: target {rate:.0f} msg/s, queen-bench exit {code}, VmHWM {int(hwm or 0) // 1024} MiB, data dir {int(du_kb) // 1024} MiB, restart after kill -9 {restart_ms} ms to /health 200")
print("| minute | VmRSS at end, MiB (max in minute) | " + " | ".join(f"{k} MiB" for k in pools) + " |")
print("|---|---|" + "---|" * len(pools))
minutes = int(max((t for t, _, _ in rows), default=0) // 60) + 1
ends = {}
for m in range(1, minutes + 1):
    inside = [r for r in rows if (m - 1) * 60 <= r[0] < m * 60]
    if not inside:
        continue
    t, rss, p = inside[-1]
    ends[m] = (t, rss)
    peak = max(r[1] for r in inside)
    cells = " | ".join(f"{p.get(k, 0) / 2**20:.1f}" for k in pools)
    print(f"| {m} | {rss / 2**20:.0f} ({peak / 2**20:.0f}) | {cells} |")
produce = report.get("produce") or {}
consume = report.get("consume") or {}
e2e = (report.get("latency_us") or {}).get("e2e") or {}
print(f"# produced {produce.get('msg_per_sec')} msg/s, consumed {consume.get('msg_per_sec')} msg/s, accepted {report.get('accepted')}, lost {report.get('lost')}, duplicates {report.get('duplicates')}, errors {report.get('errors')}, e2e latency us {json.dumps(e2e)}")
full = [m for m in ends if m > warm]
if warm in ends and full:
    last = max(full)
    (t0, r0), (t1, r1) = ends[warm], ends[last]
    stored = float(produce.get("msg_per_sec") or rate) * (t1 - t0)
    grow = r1 - r0
    print(f"# from the end of minute {warm} to the end of minute {last}: VmRSS {r0 / 2**20:.0f} -> {r1 / 2**20:.0f} MiB ({100.0 * grow / r0:+.1f} %), {grow / stored:.2f} B per message pushed meanwhile (at the produced rate)")
PY
