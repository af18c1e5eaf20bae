#!/usr/bin/env bash
# Sliding-window cost (issue 13): a Mistral whose layers attend to a window of W = 2048 tokens
# (configs/window_mistral.json, the memory bench's Llama otherwise), trained at S = W and S = 8W with
# chunks of C = W offloaded to RAM, one rank, 2 threads: step seconds per token (the second of two
# steps) and offload traffic per token (bytes fetched from and written to the offload tier in that
# step, from metrics.jsonl) at each length, and the same model without its window at S = 8W. The runs
# alternate (their order too) for ROUNDS rounds and the medians are compared. A window-W model should
# cost per token at 8W about what it costs at W, and move per token what its window needs: the pipeline
# skips the (q, kv) chunk pairs outside the window (not computed, not fetched) and the kernels the tiles.
# Writes bench/results/window_speed.json. Usage: bench/window_speed.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
fpdt=$build/fpdt
work=$(mktemp -d /tmp/fpdt_window.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p bench/results
W=2048
"$fpdt" tokenize --out "$work/data" --val-fraction 0.05 docs/*.md src/fpdt/*/*.h src/fpdt/*/*.cpp >/dev/null
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['sliding_window']=None; json.dump(c, open(sys.argv[2],'w'))" \
  bench/configs/window_mistral.json "$work/full.json"
common=(train --data "$work/data" --batch 1 --steps 2 --eval-batches 0 --save-every 0 --threads 2
        --chunk-tokens $W --offload ram --peak-gflops 1 --warmup 1)

run() {
  local name=$1 round=$2
  local model=bench/configs/window_mistral.json; [ "$name" = full_8 ] && model=$work/full.json
  local S=$((W * ${name#*_})) out="$work/$name.$round"
  local load=$(cut -d' ' -f1 /proc/loadavg)
  "$fpdt" "${common[@]}" --model "$model" --seq $S --out "$out" > "$out.log" 2>&1 || { tail -3 "$out.log" >&2; exit 1; }
  python3 - "$out/metrics.jsonl" "$name" $S "$load" <<'PY' | tee -a "$work/runs"
import json, sys
step = [json.loads(line) for line in open(sys.argv[1])][-1]
S = int(sys.argv[3])
print(sys.argv[2], step["step_seconds"] / S, step["offload_read_bytes"] / S, step["offload_written_bytes"] / S, sys.argv[4])
PY
}
# The traffic per token that the schedule counts (dry runs: no compute) at S = W .. 32W, window and full.
for k in 1 2 4 8 16 32; do
  for model in bench/configs/window_mistral.json "$work/full.json"; do
    "$fpdt" "${common[@]}" --model "$model" --seq $((W * k)) --out "$work/dry" --dry-run 2>&1 | grep '"dry_run"' |
      python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print('dry', sys.argv[1], sys.argv[2], (d['offload_read_bytes'] + d['offload_written_bytes']) / d['seq'])" \
        "$(basename "$model" .json)" $k | tee -a "$work/dry_runs"
  done
done
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order="window_1 window_8 full_8"; else order="full_8 window_8 window_1"; fi
  for name in $order; do run "$name" "$round"; done
done
python3 - "$work/runs" $W "$work/dry_runs" <<'PY' | tee bench/results/window_speed.json
import json, statistics, sys
runs = [line.split() for line in open(sys.argv[1])]
dry = [line.split() for line in open(sys.argv[3])]
counted = {m: {f"{k}W": float(b) for _, model, k, b in dry if model == m} for m in ("window_mistral", "full")}
names = ("window_1", "window_8", "full_8")
median = {n: statistics.median(float(r[1]) for r in runs if r[0] == n) for n in names}
traffic = {n: next({"read": float(r[2]), "written": float(r[3])} for r in runs if r[0] == n) for n in names}
print(json.dumps({"window": int(sys.argv[2]), "seconds_per_token_median": median,
                  "seconds_per_token_runs": {n: [float(r[1]) for r in runs if r[0] == n] for n in names},
                  "offload_bytes_per_token": traffic, "counted_offload_bytes_per_token": counted,
                  "loads": [float(r[4]) for r in runs],
                  "ratio_window_8W_to_W": round(median["window_8"] / median["window_1"], 3),
                  "ratio_full_8W_to_W": round(median["full_8"] / median["window_1"], 3)}, indent=2))
PY
