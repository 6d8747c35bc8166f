#!/usr/bin/env bash
# Fails when the engine core (broker/engine, package queenmq-engine) reaches tokio, axum, hyper
# or serde_json through its normal dependencies, directly or not: the core is shared by the
# doors and the Raft followers, and must stay free of a runtime and of JSON (issue 9).
#
#   bash scripts/engine-deps.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tree=$(cargo tree -p queenmq-engine -e normal --prefix none)
if found=$(grep -E '^(tokio|axum|hyper|serde_json)( |$)' <<<"$tree"); then
    echo "engine-deps: queenmq-engine depends on what its core must not:" >&2
    sort -u <<<"$found" >&2
    echo "engine-deps: see why with: cargo tree -p queenmq-engine -e normal -i <crate>" >&2
    exit 1
fi
echo "engine-deps: queenmq-engine pulls none of tokio, axum, hyper, serde_json"
