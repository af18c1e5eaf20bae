#!/usr/bin/env bash
# Uneven Ulysses head splits (issue 46): step time on 2 sequence-parallel ranks (mpirun, 1 thread each) of
# three Llamas that differ only in their q heads — 4 (2 + 2 a rank: even), 5 (3 + 2: uneven, imbalance
# 1.2) and 6 (3 + 3: even) — beside `fpdt plan`'s step time of each (at a stated 0.1 TFLOP/s: its ratios
# are the point). One kv head (so every Hq splits alike), D 64, h 240, f 256, L 2, V 257: an
# attention-heavy shape, where the heads' share of the step shows. The three alternate within each round
# (4 5 6, then 6 5 4, …) so drift in the machine's load falls on all alike; ratios are taken within a
# round. The last step of each run is timed. Writes bench/results/NAME.json.
# Usage: [STEPS=2] [NAME=head_split_speed] bench/head_split_speed.sh [BUILD_DIR] [ROUNDS] [SEQ]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
seq=${3:-4096}
steps=${STEPS:-2}
name=${NAME:-head_split_speed}
fpdt=$build/fpdt
results=bench/results
work=$(mktemp -d /tmp/fpdt_heads.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$results"
bash scripts/get_corpus.sh "$fpdt" data >/dev/null
source bench/mpirun.sh
for heads in 4 5 6; do
  cat > "$work/heads$heads.json" <<JSON
{"model_type": "llama", "vocab_size": 257, "hidden_size": 240, "intermediate_size": 256, "num_hidden_layers": 2,
 "num_attention_heads": $heads, "num_key_value_heads": 1, "head_dim": 64, "max_position_embeddings": 1048576,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
JSON
done
out="$work/out.json"
echo "{\"seq\": $seq, \"steps\": $steps, \"plans\": {" > "$out"
for heads in 4 5 6; do
  plan=$("$fpdt" plan --model "$work/heads$heads.json" --seq "$seq" --sp 2 --chunk-tokens $((seq / 4)) --offload ram \
           --recompute none --zero 0 --precision fp32 --hardware cpu --peak-tflops 0.1 \
           --json | python3 -c 'import json, sys; p = json.load(sys.stdin); print(json.dumps({"step_seconds": p["time"]["step_s"], "imbalance": p["config"]["attention_imbalance"]}))')
  [ "$heads" = 4 ] || echo ',' >> "$out"
  echo "\"$heads\": $plan" >> "$out"
done
echo "}, \"runs\": [" >> "$out"
first=1
for round in $(seq 1 "$rounds"); do
  order="4 5 6"
  [ $((round % 2)) -eq 0 ] && order="6 5 4"
  for heads in $order; do
    dir="$work/h${heads}r${round}"
    load=$(cut -d' ' -f1 /proc/loadavg)
    bench_mpirun 2 "$fpdt" train --model "$work/heads$heads.json" \
      --data data/kjv --seq "$seq" --chunk-tokens $((seq / 4)) --offload ram --recompute none --sp 2 --threads 1 \
      --steps "$steps" --eval-batches 0 --save-every 0 --peak-gflops 100 --out "$dir" > "$dir.log" 2>&1
    seconds=$(tail -n 1 "$dir/metrics.jsonl" | python3 -c 'import json, sys; print(json.load(sys.stdin)["step_seconds"])')
    [ $first -eq 1 ] || echo ',' >> "$out"
    first=0
    echo "{\"heads\": $heads, \"round\": $round, \"step_seconds\": $seconds, \"load\": $load}" >> "$out"
    echo "round $round, $heads heads: $seconds s (load $load)" >&2
  done
done
echo "], \"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> "$out"
python3 -m json.tool "$out" > "$results/$name.json"
echo "wrote $results/$name.json" >&2
