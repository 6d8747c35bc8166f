#!/usr/bin/env bash
# Push, pop+ack and e2e of two broker binaries in ONE run, interleaved (A B A B ...), so a
# change is judged against its parent on the same machine state rather than against figures
# of another day. Prints one line per scenario and run, and a JSON file per run.
#
#   BASE=/path/to/old/queen NEW=target/release/queen scripts/bench/compare.sh [OUT_DIR]
#
# Env (defaults): ROUNDS (2), DURATION (20 s for push and e2e), PREFILL (500000 for consume).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BASE=${BASE:?BASE=path of the previous binary}
NEW=${NEW:-$here/../../target/release/queen}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-20}
PREFILL=${PREFILL:-500000}
out=${1:-$(mktemp -d)}
mkdir -p "$out"


for round in $(seq 1 "$ROUNDS"); do
    for side in base new; do
        bin=$BASE
        [[ $side == new ]] && bin=$NEW
        for scenario in push consume e2e; do
            file=$out/$scenario-$side-$round.json
            case $scenario in
            push) QUEEN_BIN=$bin DURATION=$DURATION "$here/push.sh" >"$file" ;;
            consume) QUEEN_BIN=$bin PREFILL=$PREFILL "$here/consume.sh" >"$file" ;;
            e2e) QUEEN_BIN=$bin DURATION=$DURATION "$here/e2e.sh" >"$file" ;;
            esac
            echo "round $round $side $scenario -> $file" >&2
        done
    done
done
python3 "$here/compare_table.py" "$out"
