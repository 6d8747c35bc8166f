# Shared by scripts/bench/*.sh and scripts/bench-smoke.sh (sourced, not run).
#
# Starts and stops one `queen serve` on a free 127.0.0.1 port, runs `queen-bench`
# against it, reads the broker's RSS, and assembles JSON results with python3.
# Logs go to stderr; only results go to stdout.
#
# Binaries: $QUEEN_BIN and $BENCH_BIN, else ${CARGO_TARGET_DIR:-target}/release/{queen,queen-bench}.
# Data: $BENCH_DATA_ROOT (default .cache/bench in the repository: a real disk, so fsync
# costs what it costs; never a tmpfs). Broker log: $BENCH_TMP/queen-<n>.log, tail shown on failure.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
[[ $TARGET == /* ]] || TARGET=$REPO/$TARGET
QUEEN_BIN=${QUEEN_BIN:-$TARGET/release/queen}
BENCH_BIN=${BENCH_BIN:-$TARGET/release/queen-bench}
BENCH_DATA_ROOT=${BENCH_DATA_ROOT:-$REPO/.cache/bench}
BROKER_START_SECS=${BROKER_START_SECS:-60}
SCRIPT_NAME=${SCRIPT_NAME:-$(basename "$0" .sh)}

BENCH_TMP=$(mktemp -d)
BROKER_PID=""
BROKER_PORT=""
BROKER_URL=""
BROKER_LOG=""
BROKER_STARTS=0

log() { printf '%s: %s\n' "$SCRIPT_NAME" "$*" >&2; }
die() {
    log "FAIL: $*"
    exit 1
}

bench_cleanup() {
    local code=$?
    if [[ -n $BROKER_PID ]] && kill -0 "$BROKER_PID" 2>/dev/null; then
        kill -KILL "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
    fi
    if [[ $code != 0 && -n $BROKER_LOG && -f $BROKER_LOG ]]; then
        log "broker log (tail of $BROKER_LOG):"
        tail -n 30 "$BROKER_LOG" >&2 || true
    fi
    # KEEP_DATA=1 keeps the broker logs and the tool's reports with the data, also on failure.
    if [[ ${KEEP_DATA:-0} == 1 ]] && compgen -G "$BENCH_TMP/*" >/dev/null; then
        local kept
        kept=$(mktemp -d "$BENCH_DATA_ROOT/logs-XXXXXX")
        cp -a "$BENCH_TMP"/. "$kept"/ && log "kept broker logs and reports in $kept"
    fi
    rm -rf "$BENCH_TMP"
    exit "$code"
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

need_tools() {
    command -v python3 >/dev/null || die "python3 is needed"
    command -v curl >/dev/null || die "curl is needed"
    [[ -x $QUEEN_BIN ]] || die "$QUEEN_BIN not found: cargo build --release -p queenmq-broker"
    [[ -x $BENCH_BIN ]] || die "$BENCH_BIN not found: cargo build --release -p queenmq-bench"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

now_ms() { date +%s%3N; }

# http_code URL: the HTTP status of a GET, 000 when there is no answer.
http_code() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" 2>/dev/null || true
}

# A fresh data directory under $BENCH_DATA_ROOT.
new_data_dir() {
    mkdir -p "$BENCH_DATA_ROOT"
    mktemp -d "$BENCH_DATA_ROOT/data-XXXXXX"
}

# launch_broker DATA_DIR [PORT]: starts `queen serve` and returns at once.
launch_broker() {
    local data_dir=$1
    BROKER_PORT=${2:-$(free_port)}
    BROKER_URL=http://127.0.0.1:$BROKER_PORT
    BROKER_STARTS=$((BROKER_STARTS + 1))
    BROKER_LOG=$BENCH_TMP/queen-$BROKER_STARTS.log
    # Only what we pass here configures the broker's address and data. The Kafka port (if the
    # binary has one) on a free loopback port, through the environment: an older binary run
    # as BASE by compare.sh knows no --kafka-addr flag and ignores the variable. KAFKA_PORT
    # fixes it for a script that drives the Kafka door (kafka-perf.sh).
    env -u QUEEN_CONFIG -u QUEEN_JWT_SECRET -u QUEEN_HTTP_ADDR -u QUEEN_DATA_DIR \
        QUEEN_KAFKA_ADDR="127.0.0.1:${KAFKA_PORT:-0}" \
        "$QUEEN_BIN" serve --data-dir "$data_dir" --http-addr "127.0.0.1:$BROKER_PORT" \
        >"$BROKER_LOG" 2>&1 &
    BROKER_PID=$!
}

# wait_health [SECS]: until GET /health answers 200; fails if the broker exits.
wait_health() {
    local secs=${1:-$BROKER_START_SECS} deadline
    deadline=$(($(now_ms) + secs * 1000))
    until [[ $(http_code "$BROKER_URL/health") == 200 ]]; do
        kill -0 "$BROKER_PID" 2>/dev/null || die "broker exited while starting (see log)"
        (($(now_ms) < deadline)) || die "no /health 200 from $BROKER_URL after ${secs}s"
        sleep 0.01
    done
}

# start_broker DATA_DIR [PORT]
start_broker() {
    launch_broker "$@"
    wait_health
    log "broker pid $BROKER_PID on $BROKER_URL (data $1)"
}

# stop_broker: SIGTERM, then SIGKILL after 40 s.
stop_broker() {
    [[ -n $BROKER_PID ]] || return 0
    if kill -0 "$BROKER_PID" 2>/dev/null; then
        kill -TERM "$BROKER_PID" 2>/dev/null || true
        local i
        for i in $(seq 400); do
            kill -0 "$BROKER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$BROKER_PID" 2>/dev/null || true
    fi
    wait "$BROKER_PID" 2>/dev/null || true
    BROKER_PID=""
}

# kill9_broker: SIGKILL now (a crash).
kill9_broker() {
    [[ -n $BROKER_PID ]] || return 0
    kill -KILL "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
    BROKER_PID=""
}

# rss_kb FIELD [PID]: a field of /proc/PID/status in kB (VmRSS, RssAnon, RssFile, VmHWM).
rss_kb() {
    local field=$1 pid=${2:-$BROKER_PID}
    awk -v f="$field:" '$1 == f { print $2 }' "/proc/$pid/status"
}

# cpu_secs PID: user + system CPU seconds of a process (USER_HZ = 100), empty if gone.
cpu_secs() {
    awk '{ sub(/^.*\) /, ""); printf "%.2f\n", ($12 + $13) / 100 }' "/proc/$1/stat" 2>/dev/null || true
}

# run_bench OUT_FILE ARGS...: queen-bench against the broker, JSON report into OUT_FILE
# with the tool's exit status added as "exit_code" (2 = lost, malformed or changed messages,
# 3 = failed requests or refused items/acks) and the broker's CPU seconds during the run as
# "broker_cpu_secs". Dies only when the tool gave no report. RUN_TIMEOUT (seconds, 0 = none)
# bounds one run, so a broker that accepts connections and never answers cannot stall a script.
run_bench() {
    local out=$1
    shift
    log "queen-bench $*"
    local code=0 cpu_before cpu_after
    cpu_before=$(cpu_secs "$BROKER_PID")
    timeout --kill-after=10 "${RUN_TIMEOUT:-0}" "$BENCH_BIN" "$@" --url "$BROKER_URL" --json \
        >"$out" || code=$?
    cpu_after=$(cpu_secs "$BROKER_PID")
    python3 - "$out" "$code" "$cpu_before" "$cpu_after" <<'PY' || die "queen-bench exited $code without a report"
import json, sys
path, code, before, after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    report = json.load(open(path))
except (OSError, ValueError):
    sys.exit(1)
report["exit_code"] = code
report["broker_cpu_secs"] = round(float(after) - float(before), 2) if before and after else None
json.dump(report, open(path, "w"))
PY
    ((code == 0)) || log "queen-bench exited $code"
}

# annotate FILE KEY VALUE: adds "KEY": VALUE (a number, or null when empty) to a JSON report.
annotate() {
    python3 - "$@" <<'PY'
import json, sys
path, key, value = sys.argv[1], sys.argv[2], sys.argv[3]
report = json.load(open(path))
report[key] = float(value) if "." in value else int(value) if value else None
json.dump(report, open(path, "w"))
PY
}

# json_get FILE PATH...: one value of a JSON file (keys and list indexes), `null` if absent.
json_get() {
    python3 - "$@" <<'PY'
import json, sys
value = json.load(open(sys.argv[1]))
for key in sys.argv[2:]:
    if isinstance(value, list):
        key = int(key)
        value = value[key] if key < len(value) else None
    elif isinstance(value, dict):
        value = value.get(key)
    if value is None:
        break
print(json.dumps(value))
PY
}

# machine_json: the machine the numbers come from.
machine_json() {
    python3 - "$REPO" "$BENCH_DATA_ROOT" <<'PY'
import json, os, platform, subprocess, sys
repo, data_root = sys.argv[1], sys.argv[2]
def first(path, key):
    try:
        for line in open(path):
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
os.makedirs(data_root, exist_ok=True)
print(json.dumps({
    "cpus": os.cpu_count(),
    "cpu_model": first("/proc/cpuinfo", "model name"),
    "mem_total": first("/proc/meminfo", "MemTotal"),
    "kernel": platform.release(),
    "data_fs": (run("df", "--output=fstype,source", data_root) or "").splitlines()[-1:],
    "commit": run("git", "-C", repo, "rev-parse", "--short", "HEAD"),
}))
PY
}

# emit NAME PARAMS_JSON RESULT_FILES...: prints {"scenario", "machine", "params", "runs": [...]}.
emit() {
    local name=$1 params=$2
    shift 2
    local machine
    machine=$(machine_json)
    python3 - "$name" "$params" "$machine" "$@" <<'PY'
import json, sys
name, params, machine, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
runs = [json.load(open(f)) for f in files]
print(json.dumps({"scenario": name, "machine": json.loads(machine),
                  "params": json.loads(params), "runs": runs}, indent=2))
PY
}

# params_json KEY=VALUE...: a JSON object; numbers stay numbers, empty values are null.
params_json() {
    python3 - "$@" <<'PY'
import json, sys
out = {}
for arg in sys.argv[1:]:
    key, _, value = arg.partition("=")
    if value == "":
        out[key] = None
        continue
    for cast in (int, float):
        try:
            out[key] = cast(value)
            break
        except ValueError:
            pass
    else:
        out[key] = value
print(json.dumps(out))
PY
}

# drop_data_dir DIR: removes a run's data unless KEEP_DATA=1.
drop_data_dir() {
    if [[ ${KEEP_DATA:-0} == 1 ]]; then
        log "keeping $1"
    else
        rm -rf "$1"
    fi
}
