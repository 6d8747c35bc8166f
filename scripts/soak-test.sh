#!/usr/bin/env bash
# The soak test of issue 12 (tests/soak/test_soak.py): SOAK_SECONDS (default 600) of steady
# push + pop + ack against the real binary, with retention on one queue and none on a small
# other one; the data directory must level off, segments be deleted and compacted while the
# load runs, and a kill -9 under the load lose nothing acknowledged.
#
#   ./scripts/soak-test.sh          (after `cargo build --release`)
#
# scripts/test.sh starts it in the background right after the build, so its ten minutes run
# beside cargo test and the other suites. JUnit report: .cache/test-results/soak.xml.
# Binary: $QUEEN_BIN, else ${CARGO_TARGET_DIR:-target}/release/queen.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
export QUEEN_BIN=${QUEEN_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/queen}
VENV=${VENV:-$REPO/.venv}
RESULTS=$REPO/.cache/test-results
BASETEMP=$REPO/.cache/soak-tmp
SOAK_SECONDS=${SOAK_SECONDS:-600}
export SOAK_SECONDS

mkdir -p "$RESULTS"
rm -rf "$BASETEMP"
mkdir -p "$REPO/.cache/soak-bin"
# A copy: cargo test, running beside the soak, may rebuild target/release/queen in place, and
# the start after the kill must run the same build as the first.
cp "$QUEEN_BIN" "$REPO/.cache/soak-bin/queen"
export QUEEN_BIN=$REPO/.cache/soak-bin/queen
# The test's own bound is the soak plus its checks; pytest-timeout stops a hang past it.
exec "$VENV/bin/python" -m pytest -p no:cacheprovider -rfEs -q \
    -o timeout=$((${SOAK_SECONDS%.*} + 300)) --basetemp="$BASETEMP" \
    --junitxml="$RESULTS/soak.xml" tests/soak
