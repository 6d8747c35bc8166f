#!/usr/bin/env bash
# The test command of QueenMQ: installs what it needs, then runs every check and
# stops at the first failure with a non-zero exit.
#
#   ./scripts/test.sh
#
# Steps: cargo fmt --check, clippy -D warnings, the engine core's dependency check
# (scripts/engine-deps.sh), release build, cargo test,
# our pytest suite (tests/python), the official queen-mq 2.6.0 suite
# (tests/sdk/run.py), librdkafka's own integration tests from an allowlist
# (tests/librdkafka/run.py, built by scripts/librdkafka-build.sh) and
# scripts/bench-smoke.sh when it exists. The soak test (scripts/soak-test.sh) starts after
# the build and runs in the background beside them; it is waited for after the suites.
# Python packages go into .venv (pinned in scripts/lib/requirements.txt);
# downloads and reports into .cache (both ignored by git).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
RESULTS=$REPO/.cache/test-results
REQUIREMENTS=$REPO/scripts/lib/requirements.txt
VENV=$REPO/.venv
child=""
soak=""
python_ran=0

say() { printf '\n==> %s\n' "$*"; }

on_exit() {
    local code=$?
    local pid
    for pid in $child $soak; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            sleep 1
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    echo
    if [[ $code != 0 ]]; then
        echo "test.sh: FAILED (exit $code) after $SECONDS s"
    fi
    if [[ $python_ran == 1 && -x $VENV/bin/python ]]; then
        "$VENV/bin/python" "$REPO/scripts/lib/junit_summary.py" "$RESULTS" || true
    fi
    exit "$code"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs a command in the background so the traps can stop it, and times it.
step() {
    local name=$1
    shift
    say "$name"
    local started=$SECONDS code=0
    "$@" &
    child=$!
    wait "$child" || code=$?
    child=""
    echo "--- $name: $((SECONDS - started)) s, exit $code"
    return "$code"
}

# shellcheck source=lib/setup.sh
. "$REPO/scripts/lib/setup.sh"

install_tools() {
    if [[ -d $HOME/.cargo/bin ]]; then PATH=$HOME/.cargo/bin:$PATH; fi
    command -v cargo >/dev/null || { echo "test.sh: cargo not found (install Rust)" >&2; return 1; }
    command -v cc >/dev/null || apt_install build-essential
    # The Kafka port's tests run kcat (librdkafka) when it is there.
    command -v kcat >/dev/null || apt_install kcat || say "kcat not installed; its test skips"
    if ! cargo fmt --version >/dev/null 2>&1; then rustup component add rustfmt; fi
    if ! cargo clippy --version >/dev/null 2>&1; then rustup component add clippy; fi

    ensure_venv
}

run_pytest() {
    # pytest exits 5 when it collected nothing: that is a failure here too.
    local report=$1
    shift
    "$VENV/bin/python" -m pytest -p no:cacheprovider -rfEs --junitxml="$report" "$@"
}

say "install"
install_tools
echo "--- install: $SECONDS s"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
export QUEEN_BIN=${QUEEN_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/queen}

step "cargo fmt" cargo fmt --all --check
step "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings
step "engine deps" bash scripts/engine-deps.sh
step "cargo build" cargo build --release --workspace
# The soak test paces a light load for ten minutes: it runs in the background beside cargo
# test and the suites, and is waited for after the loopback suites.
mkdir -p "$RESULTS/logs"
say "soak test: started in the background"
python_ran=1
bash scripts/soak-test.sh >"$RESULTS/logs/soak.log" 2>&1 &
soak=$!
step "cargo test" cargo test --release --workspace
step "chart test" bash scripts/chart-test.sh
step "prometheus test" bash scripts/prometheus-test.sh
step "librdkafka build" bash scripts/librdkafka-build.sh
python_ran=1
# The loopback suites mostly wait on timers (leases, long polls, timeouts), so they run side by
# side, each broker on its own port and data dir; each one's output is shown when it ends.
suites() {
    local logs=$RESULTS/logs code=0 i
    local -a pids=() names=() files=()
    mkdir -p "$logs"
    trap 'kill "${pids[@]}" 2>/dev/null; exit 143' TERM
    run_pytest "$RESULTS/python.xml" tests/python >"$logs/python.log" 2>&1 &
    pids+=($!) names+=("pytest tests/python") files+=("$logs/python.log")
    "$VENV/bin/python" tests/sdk/run.py --results "$RESULTS/sdk" >"$logs/sdk.log" 2>&1 &
    pids+=($!) names+=("official queen-mq suite") files+=("$logs/sdk.log")
    "$VENV/bin/python" tests/sdk/run.py --binary --results "$RESULTS/sdk-binary" >"$logs/sdk-binary.log" 2>&1 &
    pids+=($!) names+=("official queen-mq suite, binary forms") files+=("$logs/sdk-binary.log")
    bash scripts/powercut-test.sh >"$logs/powercut.log" 2>&1 &
    pids+=($!) names+=("power-cut test") files+=("$logs/powercut.log")
    "$VENV/bin/python" tests/librdkafka/run.py --results "$RESULTS/librdkafka" >"$logs/librdkafka.log" 2>&1 &
    pids+=($!) names+=("librdkafka suite") files+=("$logs/librdkafka.log")
    for i in "${!pids[@]}"; do
        local c=0
        wait "${pids[$i]}" || c=$?
        say "${names[$i]}: exit $c (after $SECONDS s)"
        cat "${files[$i]}"
        [[ $c == 0 ]] || code=$c
    done
    return "$code"
}
step "loopback suites" suites
# The soak test is a child of this shell, not of the suites' subshell: waited for here.
say "soak test"
soak_code=0
wait "$soak" || soak_code=$?
soak=""
cat "$RESULTS/logs/soak.log"
echo "--- soak test: exit $soak_code (after $SECONDS s)"
if [[ $soak_code != 0 ]]; then exit "$soak_code"; fi
if [[ -f scripts/bench-smoke.sh ]]; then
    step "bench smoke" bash scripts/bench-smoke.sh
fi
say "all checks passed in $SECONDS s"
