#!/usr/bin/env bash
# JSON against the binary forms (docs/binary-forms.md) in ONE run, interleaved, so the load
# of a shared machine falls on every form alike: each round runs push with the JSON body,
# with QPB1 and with QPB1 frames (zstd made in the tool), then pop+ack with JSON answers and
# with QPF1 framed answers; each run on a fresh broker (scripts/bench/push.sh, consume.sh).
# The form order rotates by one every round (round r starts at form r-1), so no form always
# runs first; the order is written to OUT_DIR/order.txt.
# Every push run is verified (VERIFY=1): after the measured window, outside the timing, all
# accepted messages are popped back (JSON answers) and compared byte for byte; a run that
# lost, changed or refused anything exits non-zero and binary_table.py leaves it out of the
# summary. Prints the table (markdown) on stdout; one JSON file per run in OUT_DIR, which
# must be new or empty (old runs would be mixed in).
#
#   scripts/bench/binary-vs-json.sh [OUT_DIR]
#
# Env (defaults): ROUNDS (3) DURATION (20 s per push run; consume runs stop when the queue
# is empty, at DURATION at most) PREFILL (300000 per consume run, pushed as JSON: the stored
# messages are the same whatever body brought them) PRODUCERS (4) CONSUMERS (4)
# PARTITIONS (100) BATCH (100) MSG_BYTES (256) RUN_TIMEOUT (600 s per tool run).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROUNDS=${ROUNDS:-3}
PREFILL=${PREFILL:-300000}
export DURATION=${DURATION:-20} RUN_TIMEOUT=${RUN_TIMEOUT:-600}
export PRODUCERS=${PRODUCERS:-4} CONSUMERS=${CONSUMERS:-4} PARTITIONS=${PARTITIONS:-100}
export BATCH=${BATCH:-100} MSG_BYTES=${MSG_BYTES:-256}
out=${1:-$(mktemp -d)}
mkdir -p "$out"
if [[ -n $(ls -A "$out") ]]; then
    echo "binary-vs-json: $out is not empty; give a new directory" >&2
    exit 1
fi

# rotate N ITEMS...: the items starting at index N mod their count.
rotate() {
    local n=$1
    shift
    local items=("$@") i
    for ((i = 0; i < ${#items[@]}; i++)); do
        echo "${items[(i + n) % ${#items[@]}]}"
    done
}

for round in $(seq 1 "$ROUNDS"); do
    for form in $(rotate $((round - 1)) json qpb1 qpb1-frames); do
        file=$out/push-$form-$round.json
        echo "round $round push $form" >>"$out/order.txt"
        PUSH_FORM=$form POP_FORM=json VERIFY=1 "$here/push.sh" >"$file"
        echo "round $round push $form -> $file" >&2
    done
    for form in $(rotate $((round - 1)) json qpf1); do
        file=$out/consume-$form-$round.json
        echo "round $round consume $form" >>"$out/order.txt"
        POP_FORM=$form PREFILL=$PREFILL "$here/consume.sh" >"$file"
        echo "round $round consume $form -> $file" >&2
    done
done
python3 "$here/binary_table.py" "$out"
