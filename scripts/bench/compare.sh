#!/usr/bin/env bash
# Push, pop+ack and e2e of two broker binaries in ONE run, interleaved (A B A B ...), so a
# change is judged against its parent on the same machine state rather than against figures
# of another day. Prints one line per scenario and run, and a JSON file per run.
#
#   BASE=/path/to/old/queen NEW=target/release/queen scripts/bench/compare.sh [OUT_DIR]
#
# Env (defaults): ROUNDS (2), DURATION (20 s for push and e2e), PREFILL (500000 for consume),
# RATE (the open-loop e2e rate; unset: half the first base run's closed-loop consume rate).
#
# Both binaries run the open loop at the SAME rate: were each run at half its own closed-loop
# rate, the faster binary would be measured under more load and its tails would look worse
# for being faster (session 6's first comparison fell into this: 43k against 37k msg/s).
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
            e2e)
                QUEEN_BIN=$bin DURATION=$DURATION RATE=${RATE:-} "$here/e2e.sh" >"$file"
                if [[ -z ${RATE:-} ]]; then
                    RATE=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["params"]["open_loop_rate"])' "$file")
                    echo "open loop of every later e2e run at $RATE msg/s" >&2
                fi
                ;;
            esac
            echo "round $round $side $scenario -> $file" >&2
        done
    done
done
python3 "$here/compare_table.py" "$out"
