#!/usr/bin/env bash
# ZeRO benchmark (issue 15): per-rank compute-tier peak and step time for --zero 0..3 at W = 1, 2, 4
# sequence-parallel ranks, on the ~100M-parameter Llama of configs/zero_llama.json (h 768, L 16, Hq 12,
# Hkv 4, f 2048, V 257: 100.7 M parameters), chunks of S/8 offloaded to RAM, --recompute layer, one
# sequence a step.
# - Memory: rank 0's compute-tier peak at S = 16K from dry runs (one process lays out rank 0 of W; the
#   mpirun tests check that a run's peak equals its dry run's to the byte).
# - Time: mpirun runs of W processes at S = SEQ, STEPS steps each (default 2); the last step's time is
#   reported (the first pays first touches: with STEPS=1, for a 16K step of minutes, those are a few
#   seconds, larger for the stages that hold more). Stages alternate within each round (0 3 1 2, then
#   2 1 3 0) so drift in the machine's load falls on all of them alike; the load average is recorded
#   before and after.
# WS="1 2 4" picks the W of the timed runs, FIRST_ROUND=1 numbers them (extra rounds of one W keep the
# alternation), NAME=zero_speed names the results; tools/plot_zero.py pools the runs of several files.
# Writes bench/results/NAME.json and .png. Usage: [STEPS=2] bench/zero_speed.sh [BUILD_DIR] [ROUNDS] [SEQ]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-2}
seq_time=${3:-16384}
steps=${STEPS:-2}
read -r -a widths <<< "${WS:-1 2 4}"
first_round=${FIRST_ROUND:-1}
name=${NAME:-zero_speed}
fpdt=$build/fpdt
config=bench/configs/zero_llama.json
results=bench/results
work=$(mktemp -d /tmp/fpdt_zero.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$results"
bash scripts/get_corpus.sh "$fpdt" data >/dev/null
source bench/mpirun.sh
common=(train --model "$config" --data data/kjv --offload ram --recompute layer --batch 1 --eval-batches 0
        --save-every 0 --peak-gflops 100)

out="$work/out.json"
echo "{\"config\": \"$config\", \"seq_memory\": 16384, \"seq_time\": $seq_time, \"steps\": $steps," > "$out"
echo "\"dry_runs\": [" >> "$out"
first=1
for W in 1 2 4; do
  for stage in 0 1 2 3; do
    line=$("$fpdt" "${common[@]}" --seq 16384 --chunk-tokens 2048 --sp "$W" --zero "$stage" --dry-run 2>&1 |
           grep '^{' | tail -n 1 | python3 -c 'import json, sys; r = json.load(sys.stdin); r.pop("components"); print(json.dumps(r))')
    [ $first -eq 1 ] || echo ',' >> "$out"
    first=0
    echo "{\"W\": $W, \"zero\": $stage, \"result\": $line}" >> "$out"
  done
done
echo "], \"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"runs\": [" >> "$out"
first=1
run() {  # W stage round
  local W=$1 stage=$2 round=$3 threads=$(( W >= 2 ? 1 : 2 ))
  local dir="$work/w${W}z${stage}r${round}" line seconds load
  load=$(cut -d' ' -f1 /proc/loadavg)
  line=$(bench_mpirun "$W" "$fpdt" "${common[@]}" \
           --seq "$seq_time" --chunk-tokens $((seq_time / 8)) --steps "$steps" --out "$dir" --sp "$W" --zero "$stage" \
           --threads $threads 2>&1 | grep '^{' | tail -n 1)
  seconds=$(tail -n 1 "$dir/metrics.jsonl" | python3 -c 'import json, sys; print(json.load(sys.stdin)["step_seconds"])')
  [ $first -eq 1 ] || echo ',' >> "$out"
  first=0
  echo "{\"W\": $W, \"zero\": $stage, \"round\": $round, \"load\": $load, \"step_seconds\": $seconds, \"result\": $line}" >> "$out"
  echo "W=$W ZeRO $stage round $round (load $load): step $seconds s; $line" >&2
}
for round in $(seq "$first_round" $((first_round + rounds - 1))); do
  if [ $((round % 2)) -eq 1 ]; then stages="0 3 1 2"; else stages="2 1 3 0"; fi
  for W in "${widths[@]}"; do
    for stage in $stages; do run "$W" "$stage" "$round"; done
  done
done
echo "], \"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> "$out"
python3 -m json.tool "$out" > "$results/$name.json"
PY=$(tools/reference_env.sh 2>/dev/null || echo /usr/bin/python3)
"$PY" tools/plot_zero.py "$results/$name.json" "$results/$name.png"
