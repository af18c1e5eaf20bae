#!/usr/bin/env bash
# Sliding-window cost (issue 13): a Mistral whose layers attend to a window of W = 2048 tokens
# (configs/window_mistral.json, the memory bench's Llama otherwise), trained at S = W and S = 8W with
# chunks of C = W offloaded to RAM, one rank, 2 threads: step seconds per token at each length (the
# best of 2 runs, alternated), their ratio, and the same model without its window at S = 8W for
# comparison. A window-W model should cost per token at 8W about what it costs at W.
# Writes bench/results/window_speed.json. Usage: bench/window_speed.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
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

# Seconds per token of the second step (the first warms the caches and the offload store).
per_token() { python3 -c "import json,sys; l=[json.loads(x) for x in open(sys.argv[1])]; print(l[-1]['step_seconds']/int(sys.argv[2]))" "$1" "$2"; }

declare -A best
for round in 1 2; do
  for run in window_1 window_8 full_8; do
    model=bench/configs/window_mistral.json; [ $run = full_8 ] && model=$work/full.json
    S=$((W * ${run#*_}))
    out="$work/$run.$round"
    "$fpdt" "${common[@]}" --model "$model" --seq $S --out "$out" > "$out.log" 2>&1
    t=$(per_token "$out/metrics.jsonl" $S)
    echo "$run (S = $S) round $round: $t s/token" >&2
    if [ -z "${best[$run]:-}" ] || python3 -c "import sys; sys.exit(0 if $t < ${best[$run]} else 1)"; then best[$run]=$t; fi
  done
done
python3 - "${best[window_1]}" "${best[window_8]}" "${best[full_8]}" $W <<'PY' | tee bench/results/window_speed.json
import json, sys
w1, w8, f8, W = map(float, sys.argv[1:5])
print(json.dumps({"window": int(W), "seconds_per_token": {"window_S_W": w1, "window_S_8W": w8, "full_S_8W": f8},
                  "ratio_window_8W_to_W": round(w8 / w1, 3), "ratio_full_8W_to_W": round(f8 / w1, 3)}, indent=2))
PY
