#!/usr/bin/env bash
# librdkafka's own rdkafka_performance (built from the same source as its test suite,
# scripts/librdkafka-build.sh) against the real broker through its Kafka door (issue 10,
# Done-when 6): for each record size, a fresh broker, a producer with acks=all (every
# produce answered after its commit is fsynced) over PARTITIONS partitions, then a consumer
# reading every partition from the beginning. A run counts only if every record was
# delivered with 0 failed and the consumer read them all back; otherwise the script fails.
# Prints one JSON report on stdout (scripts/bench/lib.sh's shape, one run per size).
#
#   scripts/bench/kafka-perf.sh > kafka-perf.json
#
# Env (defaults): SIZES ("1024 256" bytes per record) COUNT_<size> for a size (else COUNT,
# 1000000 records) PARTITIONS (8)
# PRODUCER_OPTS ("-X linger.ms=5 -X batch.num.messages=10000") RUN_TIMEOUT (600 s per run).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
SIZES=${SIZES:-"1024 256"}
PARTITIONS=${PARTITIONS:-8}
PRODUCER_OPTS=${PRODUCER_OPTS:-"-X linger.ms=5 -X batch.num.messages=10000"}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
[[ -x $QUEEN_BIN ]] || die "$QUEEN_BIN not found: cargo build --release -p queenmq-broker"

tests_dir=$("$REPO/scripts/librdkafka-build.sh" | tail -n 1)
examples=$(dirname "$tests_dir")/examples
PERF=$examples/rdkafka_performance
if [[ ! -x $PERF ]]; then
    log "building rdkafka_performance"
    make -C "$examples" rdkafka_performance >"$BENCH_TMP/make-perf.log" 2>&1 \
        || { tail -20 "$BENCH_TMP/make-perf.log" >&2; die "rdkafka_performance did not build"; }
fi

export QUEEN_KAFKA_DEFAULT_PARTITIONS=$PARTITIONS
parts=()
for ((p = 0; p < PARTITIONS; p++)); do parts+=(-p "$p"); done

files=()
for size in $SIZES; do
    count_var=COUNT_$size
    count=${!count_var:-${COUNT:-1000000}}
    KAFKA_PORT=$(free_port)
    start_broker "$(new_data_dir)"
    topic=perf-$size-$RANDOM
    log "produce $count x $size B, acks=all, $PARTITIONS partitions"
    cpu0=$(cpu_secs "$BROKER_PID")
    # shellcheck disable=SC2086 # PRODUCER_OPTS is a list of options
    timeout --kill-after=10 "$RUN_TIMEOUT" "$PERF" -P -t "$topic" -s "$size" -c "$count" -a -1 \
        -b "127.0.0.1:$KAFKA_PORT" $PRODUCER_OPTS >"$BENCH_TMP/produce-$size.txt" 2>&1 \
        || { tail -5 "$BENCH_TMP/produce-$size.txt" >&2; die "rdkafka_performance -P failed"; }
    cpu1=$(cpu_secs "$BROKER_PID")
    log "consume $count x $size B from the beginning of every partition"
    timeout --kill-after=10 "$RUN_TIMEOUT" "$PERF" -C -t "$topic" "${parts[@]}" -o beginning \
        -c "$count" -b "127.0.0.1:$KAFKA_PORT" >"$BENCH_TMP/consume-$size.txt" 2>&1 \
        || { tail -5 "$BENCH_TMP/consume-$size.txt" >&2; die "rdkafka_performance -C failed"; }
    cpu2=$(cpu_secs "$BROKER_PID")
    rss=$(rss_kb VmRSS)
    hwm=$(rss_kb VmHWM)
    out=$BENCH_TMP/run-$size.json
    python3 - "$BENCH_TMP/produce-$size.txt" "$BENCH_TMP/consume-$size.txt" "$size" "$count" \
        "$PARTITIONS" "$cpu0" "$cpu1" "$cpu2" "$rss" "$hwm" "$PRODUCER_OPTS" >"$out" <<'PY' \
        || die "rdkafka_performance's output for $size B does not show every record delivered and read"
import json, re, sys
prod, cons, size, count, parts, c0, c1, c2, rss, hwm, opts = sys.argv[1:]
count = int(count)
# Its last summary lines are the totals of the whole run.
p = [m for m in re.finditer(
    r"% (\d+) messages produced \((\d+) bytes\), (\d+) delivered \(offset -?\d+, (\d+) failed\)"
    r" in (\d+)ms: (\d+) msgs/s and ([\d.]+) MB/s", open(prod).read())][-1]
c = [m for m in re.finditer(
    r"% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms: (\d+) msgs/s \(([\d.]+) MB/s\)",
    open(cons).read())][-1]
delivered, failed, consumed = int(p.group(3)), int(p.group(4)), int(c.group(1))
report = {
    "scenario": "kafka-perf", "record_bytes": int(size), "records": count,
    "partitions": int(parts), "producer_opts": opts, "acks": -1,
    "produce": {"delivered": delivered, "failed": failed, "ms": int(p.group(5)),
                "msg_per_sec": int(p.group(6)), "mb_per_sec": float(p.group(7)),
                "broker_cpu_secs": round(float(c1) - float(c0), 2)},
    "consume": {"records": consumed, "ms": int(c.group(3)), "msg_per_sec": int(c.group(4)),
                "mb_per_sec": float(c.group(5)),
                "broker_cpu_secs": round(float(c2) - float(c1), 2)},
    "broker_rss_kb": int(rss), "broker_hwm_kb": int(hwm),
}
print(json.dumps(report))
sys.exit(0 if delivered == count and failed == 0 and consumed == count else 1)
PY
    stop_broker
    files+=("$out")
done
emit kafka-perf "{\"sizes\": \"$SIZES\", \"partitions\": $PARTITIONS}" "${files[@]}"
