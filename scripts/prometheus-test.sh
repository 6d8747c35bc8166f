#!/usr/bin/env bash
# End-to-end metrics check with a real Prometheus: the broker's push counter,
# scraped from /metrics/prometheus and read back through Prometheus's HTTP
# API, must equal the number of messages pushed.
#
#   ./scripts/prometheus-test.sh          (after `cargo build --release`)
#
# - Installs Debian's `prometheus` package when the binary is missing (one
#   apt-get update; a policy-rc.d keeps the packaged service from starting)
#   and runs the binary itself: temp config, scrape interval 1 s, TSDB in a
#   temp dir, listening on a free 127.0.0.1 port.
# - Starts `queen serve --data-dir <tmp> --http-addr 127.0.0.1:<free port>`.
# - Pushes $MESSAGES messages (default 250) over two queues with
#   POST /api/v1/push, then polls
#   /api/v1/query?query=sum(queen_messages_pushed_total) until it equals
#   $MESSAGES ($WAIT_SECS, default 30 s), then checks through PromQL that the
#   scrape-time depth gauge equals it, that the push route's request counter
#   (labelled by route template) counts every push call, and that the Raft and
#   fsync series arrive. tests/python/test_metrics.py checks every series.
# Both processes are stopped on exit, by their pid. Needs python3 (stdlib).
# Binary: $QUEEN_BIN, else ${CARGO_TARGET_DIR:-target}/release/queen.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
QUEEN_BIN=${QUEEN_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/queen}
MESSAGES=${MESSAGES:-250}
WAIT_SECS=${WAIT_SECS:-30}
SERIES=queen_messages_pushed_total

say() { printf 'prometheus-test: %s\n' "$*"; }
die() { say "FAIL: $*" >&2; exit 1; }

as_root() {
    if [[ $(id -u) == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        die "need root to run: $*"
    fi
}

install_prometheus() {
    command -v apt-get >/dev/null || die "prometheus is missing and there is no apt-get"
    say "installing Debian's prometheus package"
    # Keep the package's init script from starting a system Prometheus.
    local policy=/usr/sbin/policy-rc.d created=0
    if [[ ! -e $policy ]]; then
        as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy"
        created=1
    fi
    local code=0
    as_root apt-get update -qq || code=$?
    if [[ $code == 0 ]]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
            >/dev/null || code=$?
    fi
    if [[ $created == 1 ]]; then as_root rm -f "$policy"; fi
    [[ $code == 0 ]] || die "apt-get failed (exit $code)"
}

PROMETHEUS=$(command -v prometheus || true)
if [[ -z $PROMETHEUS ]]; then
    install_prometheus
    PROMETHEUS=$(command -v prometheus || echo /usr/bin/prometheus)
fi
[[ -x $PROMETHEUS ]] || die "no prometheus binary after install"
[[ -x $QUEEN_BIN ]] || die "$QUEEN_BIN not found; build it first (cargo build --release -p queenmq-broker)"
command -v python3 >/dev/null || die "python3 is needed"

TMP=$(mktemp -d)
queen_pid=""
prom_pid=""
cleanup() {
    local code=$?
    for pid in $queen_pid $prom_pid; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    if [[ $code != 0 ]]; then
        say "queen log (tail):"; tail -n 30 "$TMP/queen.log" 2>/dev/null || true
        say "prometheus log (tail):"; tail -n 30 "$TMP/prometheus.log" 2>/dev/null || true
    fi
    rm -rf "$TMP"
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# http GET|POST URL [BODY] -> prints the body; exit 1 on non-2xx or no answer.
http() {
    python3 - "$@" <<'PY'
import sys, urllib.request
method, url = sys.argv[1], sys.argv[2]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request(url, data=data, method=method)
if data is not None:
    req.add_header("Content-Type", "application/json")
try:
    with urllib.request.urlopen(req, timeout=5) as r:
        sys.stdout.write(r.read().decode())
except Exception as e:
    sys.stderr.write(f"{method} {url}: {e}\n")
    sys.exit(1)
PY
}

# wait_for SECONDS DESCRIPTION COMMAND...: retry COMMAND every 0.2 s; gives
# up early when a process we started has exited.
wait_for() {
    local secs=$1 what=$2 deadline pid
    shift 2
    deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        for pid in $queen_pid $prom_pid; do
            kill -0 "$pid" 2>/dev/null || die "process $pid exited while waiting for $what"
        done
        ((SECONDS < deadline)) || die "timed out after ${secs}s waiting for $what"
        sleep 0.2
    done
}

QPORT=$(free_port)
PPORT=$(free_port)
QUEEN=http://127.0.0.1:$QPORT
PROM=http://127.0.0.1:$PPORT

say "starting queen on $QUEEN"
# A clean environment for the broker's settings: only what we pass counts.
env -u QUEEN_CONFIG -u QUEEN_JWT_SECRET -u QUEEN_HTTP_ADDR -u QUEEN_DATA_DIR \
    "$QUEEN_BIN" serve --data-dir "$TMP/data" --http-addr "127.0.0.1:$QPORT" --kafka-addr 127.0.0.1:0 >"$TMP/queen.log" 2>&1 &
queen_pid=$!
wait_for 30 "queen /health" http GET "$QUEEN/health"

# Before anything is recorded the exposition may be empty, which is valid;
# whether the text parses is Prometheus's call (up == 1 below).
scrape=$(http GET "$QUEEN/metrics/prometheus") || die "GET /metrics/prometheus failed"
say "/metrics/prometheus answers ($(grep -c '^# TYPE ' <<<"$scrape" || true) series types before any push)"

cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: queen
    metrics_path: /metrics/prometheus
    static_configs:
      - targets: ["127.0.0.1:$QPORT"]
YML
say "starting $("$PROMETHEUS" --version 2>&1 | head -n 1) on $PROM"
"$PROMETHEUS" --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
    --web.listen-address="127.0.0.1:$PPORT" --log.level=warn >"$TMP/prometheus.log" 2>&1 &
prom_pid=$!
wait_for 30 "prometheus /-/ready" http GET "$PROM/-/ready"

# The first query result's value, or empty. PromQL via urllib quoting.
query() {
    python3 - "$PROM" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
prom, q = sys.argv[1], sys.argv[2]
url = f"{prom}/api/v1/query?query={urllib.parse.quote(q)}"
with urllib.request.urlopen(url, timeout=5) as r:
    body = json.load(r)
res = body.get("data", {}).get("result", [])
if body.get("status") != "success" or not res:
    sys.exit(1)
print(res[0]["value"][1])
PY
}
target_up() { [[ $(query 'up{job="queen"}') == 1 ]]; }
wait_for 30 "Prometheus to scrape queen (up == 1)" target_up
say "Prometheus scrapes queen"

say "pushing $MESSAGES messages"
python3 - "$QUEEN" "$MESSAGES" <<'PY'
import json, sys, urllib.request, uuid
base, total = sys.argv[1], int(sys.argv[2])
batch, sent = 50, 0
while sent < total:
    n = min(batch, total - sent)
    items = [
        {
            "queue": "prometheus-test-a" if (sent + i) % 2 == 0 else "prometheus-test-b",
            "partition": f"p{(sent + i) % 5}",
            "payload": {"n": sent + i},
            "transactionId": str(uuid.uuid4()),
        }
        for i in range(n)
    ]
    req = urllib.request.Request(
        f"{base}/api/v1/push", data=json.dumps({"items": items}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        results = json.load(r)
    if not isinstance(results, list) or len(results) != n:
        sys.exit(f"push answered {results!r:.200}")
    bad = [x for x in results if x.get("status") != "queued"]
    if bad:
        sys.exit(f"push refused items: {bad[:3]}")
    sent += n
print(f"pushed {sent}")
PY

direct=$(http GET "$QUEEN/metrics/prometheus" | awk -v s="$SERIES" '$1 ~ "^"s"({|$)" {sum += $NF} END {print sum + 0}')
say "broker's own scrape: sum($SERIES) = $direct"

deadline=$((SECONDS + WAIT_SECS))
got=""
until [[ $got == "$MESSAGES" ]]; do
    ((SECONDS < deadline)) || die "Prometheus says sum($SERIES) = ${got:-<no series>} after ${WAIT_SECS}s, want $MESSAGES"
    sleep 0.5
    got=$(query "sum($SERIES)" 2>/dev/null || true)
done
per_queue=$(python3 - "$PROM" "$SERIES" <<'PY'
import json, sys, urllib.parse, urllib.request
prom, s = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(f"{prom}/api/v1/query?query={urllib.parse.quote(s)}", timeout=5) as r:
    res = json.load(r)["data"]["result"]
print(", ".join(f'{x["metric"].get("queue", "?")}={x["value"][1]}' for x in res))
PY
)
say "Prometheus: sum($SERIES) = $MESSAGES ($per_queue)"

# true_within SECONDS EXPR: waits until the PromQL comparison EXPR holds (a
# comparison without `bool` returns no sample while it is false).
true_within() {
    local deadline=$((SECONDS + $1))
    until query "$2" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "Prometheus never saw: $2 (now: $(query "${2%% [=><]*}" 2>/dev/null || echo '<no series>'))"
        sleep 0.5
    done
    say "Prometheus: $2"
}
# Nothing consumed, so every pushed message is in the depth; one request per
# batch of 50 went to the push route, named by its template.
true_within "$WAIT_SECS" "sum(queen_queue_depth) == $MESSAGES"
true_within "$WAIT_SECS" "sum(queen_http_requests_total{route=\"/api/v1/push\",method=\"POST\",status=~\"2..\"}) >= $(((MESSAGES + 49) / 50))"
true_within "$WAIT_SECS" "queen_raft_is_leader == 1"
true_within "$WAIT_SECS" "sum(queen_log_fsync_seconds_count) > 0"
say "PASS"
