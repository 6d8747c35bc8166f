#!/usr/bin/env bash
# JSON against the binary forms (docs/binary-forms.md) in ONE run, interleaved, so the load
# of a shared machine falls on every form alike: each round runs push with the JSON body,
# with QPB1 and with QPB1 frames (zstd made in the tool), then pop+ack with JSON answers and
# with QPF1 framed answers; each run on a fresh broker (scripts/bench/push.sh, consume.sh).
# Prints the table (markdown) on stdout; one JSON file per run in OUT_DIR.
#
#   scripts/bench/binary-vs-json.sh [OUT_DIR]
#
# Env (defaults): ROUNDS (3) DURATION (20 s per push run) PREFILL (300000 per consume run,
# pushed as JSON: the stored messages are the same whatever body brought them)
# PRODUCERS (4) CONSUMERS (4) PARTITIONS (100) BATCH (100) MSG_BYTES (256).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-20}
PREFILL=${PREFILL:-300000}
export PRODUCERS=${PRODUCERS:-4} CONSUMERS=${CONSUMERS:-4} PARTITIONS=${PARTITIONS:-100}
export BATCH=${BATCH:-100} MSG_BYTES=${MSG_BYTES:-256}
out=${1:-$(mktemp -d)}
mkdir -p "$out"

for round in $(seq 1 "$ROUNDS"); do
    for form in json qpb1 qpb1-frames; do
        file=$out/push-$form-$round.json
        PUSH_FORM=$form DURATION=$DURATION "$here/push.sh" >"$file"
        echo "round $round push $form -> $file" >&2
    done
    for form in json qpf1; do
        file=$out/consume-$form-$round.json
        POP_FORM=$form PREFILL=$PREFILL "$here/consume.sh" >"$file"
        echo "round $round consume $form -> $file" >&2
    done
done
python3 "$here/binary_table.py" "$out"
