#!/usr/bin/env bash
# usage: probe.sh URL OUT — every 0.5 s: a 1-message push's time, and the checkpoint count/sum
url=$1; out=$2
while true; do
  t=$(date +%s.%N)
  pt=$(curl -s -o /dev/null -w '%{time_total}' --max-time 60 -XPOST "$url/api/v1/push" -H 'content-type: application/json' -d '{"items":[{"queue":"probe","partition":"p","payload":{"x":1}}]}')
  ck=$(curl -s --max-time 5 "$url/metrics/prometheus" | awk '/^queen_checkpoint_seconds_(count|sum)/ {printf "%s ", $NF} /^queen_checkpoint_bytes/ {printf "%s ", $NF}')
  echo "$t $pt $ck" >> "$out"
  sleep 0.5
done
