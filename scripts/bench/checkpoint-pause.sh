#!/usr/bin/env bash
# The checkpoint's pause of the engine at COUNT partitions (issue 12): one fresh broker
# checkpointing every INTERVAL seconds, the partitions-scale shape (a consume run whose
# pre-fill pushes one message to each partition and pops + acks them all, so the queue-mode
# group holds COUNT cursors, then a closed-loop e2e for DURATION s), then the checkpoint
# series read from /metrics/prometheus: `queen_checkpoint_encode_seconds` (the pause under
# the lock) and `queen_checkpoint_cow_copy_seconds` (the copies of shared blocks moved to the
# engine's first writes; absent from builds before session 26; per kind of block,
# `queen_checkpoint_cow_block_seconds{block}`, from session 27).
#
#   COUNT=100000 scripts/bench/checkpoint-pause.sh > pause.txt
#
# IDS > 0 pushes that many more messages, each with its own transaction id, between the
# pre-fill and the e2e, so the dedup window holds that many in-window ids (issue 12's 10 M):
#
#   COUNT=1000000 IDS=10000000 MSG_BYTES=64 DURATION=1200 scripts/bench/checkpoint-pause.sh > pause-ids.txt
#
# The metrics are scraped right before the e2e (after the IDS push, if any) and at the end,
# and after the whole run's series the difference of the two is printed (`# the e2e phase
# only`, scripts/bench/prom_delta.py): only the checkpoints and stretches of the e2e (with
# SPREAD, the scattered writers; with IDS, all IDS ids in the window: the dedup window is an
# hour, so none expire in a run shorter than that), then per histogram its n, mean, p99
# bucket and samples over 5 ms per checkpoint of the phase. The series over the whole run
# mix in the pre-fill's checkpoints, a different share on each build (review s28 ckpt M1,
# s29 ckpt M2), and p99s over different n are not comparable (s29 M3). DURATION / INTERVAL
# is roughly how many checkpoints the phase holds: 1200 s at 5 s for about 240, enough for a
# p99 that is not the maximum.
#
# SPREAD > 1 scatters the producers of the e2e (and of the IDS run): a producer's consecutive
# messages go to partitions SPREAD apart (queen-bench --partition-spread), so with SPREAD=256
# a batch of 100 first-touches up to 100 partition chunks and cursor shards after a
# checkpoint, where round robin touches one or two (session 28):
#
#   COUNT=1000000 SPREAD=256 scripts/bench/checkpoint-pause.sh > pause-scattered.txt
#
# KEEP_DATA=1 keeps the data dir, the broker log and the tool's JSON reports (lib.sh), and
# QUEEN_LOG sets the broker's log filter (e.g. info,queenmq_broker=debug).
#
# Env (defaults): COUNT (100000) IDS (0) SPREAD (1) INTERVAL (5) DURATION (30) PRODUCERS (2)
# CONSUMERS (4) BATCH (100) MSG_BYTES (256). Binaries as lib.sh says (QUEEN_BIN to compare
# builds).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

COUNT=${COUNT:-100000}
IDS=${IDS:-0}
INTERVAL=${INTERVAL:-5}
DURATION=${DURATION:-30}
PRODUCERS=${PRODUCERS:-2}
CONSUMERS=${CONSUMERS:-4}
BATCH=${BATCH:-100}
MSG_BYTES=${MSG_BYTES:-256}
SPREAD=${SPREAD:-1}

need_tools
data=$(new_data_dir)
export QUEEN_CHECKPOINT_INTERVAL_SECS=$INTERVAL
start_broker "$data"
shape=(--queue "bench-scale-$COUNT" --partitions "$COUNT" --producers "$PRODUCERS"
    --consumers "$CONSUMERS" --batch "$BATCH" --msg-bytes "$MSG_BYTES")
run_bench "$BENCH_TMP/create.json" consume "${shape[@]}" --prefill "$COUNT" --duration-secs 86400
spread=()
((SPREAD > 1)) && spread=(--partition-spread "$SPREAD")
if ((IDS > 0)); then
    run_bench "$BENCH_TMP/ids.json" push "${shape[@]}" "${spread[@]}" --messages "$IDS" --duration-secs 86400
    log "ids run: $(json_get "$BENCH_TMP/ids.json" errors) errors, exit $(json_get "$BENCH_TMP/ids.json" exit_code)"
fi
curl -s "$BROKER_URL/metrics/prometheus" >"$BENCH_TMP/before-e2e.prom" || true
# Without it the delta below would be the whole run under the e2e heading (review s30 L4a).
[[ -s $BENCH_TMP/before-e2e.prom ]] || die "the scrape before the e2e phase failed"
run_bench "$BENCH_TMP/e2e.json" e2e "${shape[@]}" "${spread[@]}" --duration-secs "$DURATION"
echo "# $QUEEN_BIN COUNT=$COUNT IDS=$IDS SPREAD=$SPREAD INTERVAL=$INTERVAL DURATION=$DURATION rss_kb=$(rss_kb VmRSS)"
curl -s "$BROKER_URL/metrics/prometheus" >"$BENCH_TMP/end.prom" || true
grep -E '^queen_checkpoint_(encode_seconds|cow_copy_seconds|cow_block_seconds|cow_copies_total|bytes)' "$BENCH_TMP/end.prom" || true
# Cumulative series: the end's value less the one right before the e2e, per series.
echo "# the e2e phase only (SPREAD=$SPREAD; IDS=$IDS ids in the window; _count is the phase's n):"
python3 "$REPO/scripts/bench/prom_delta.py" "$BENCH_TMP/before-e2e.prom" "$BENCH_TMP/end.prom" || true
stop_broker
drop_data_dir "$data"
