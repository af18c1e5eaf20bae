#!/usr/bin/env bash
# Two fpdt binaries back to back, ROUNDS pairs, alternating which runs first (ABBA), one training step
# of bench/fpdt_speed.sh's 32K configuration each: for comparing builds on a shared machine, where
# best-of-N wall times swing more than the difference sought. One line per run:
#   which wall_seconds user_seconds sys_seconds step_seconds load_at_start
# then the medians over the pairs of (new / baseline) for step_seconds and for CPU time (user + sys).
# Usage: bench/fpdt_speed_pairs.sh NEW_FPDT BASELINE_FPDT none|ram|disk SEQ ROUNDS
set -euo pipefail
new=$1; base=$2; offload=$3; seq=$4; rounds=$5
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/fpdt_pairs.XXXXXX); trap 'rm -rf "$work"' EXIT
bash scripts/get_corpus.sh "$new" data >/dev/null
common=(train --model bench/configs/memory_llama.json --data data/kjv --batch 1 --steps 1 --eval-batches 0
        --save-every 0 --threads 2 --chunk-tokens 8192 --recompute none --peak-gflops 1)
run() {
  local which=$1 bin=$2 target=$offload
  [ "$offload" = disk ] && target="disk:$work"
  local out="$work/$which$RANDOM"
  local load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%e %U %S" -o "$out.time" "$bin" "${common[@]}" --seq "$seq" --offload "$target" --out "$out" > "$out.log" 2>&1
  local step=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['step_seconds'])" "$out/metrics.jsonl")
  echo "$which $(cat "$out.time") $step $load" | tee -a "$work/runs"
}
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then run base "$base"; run new "$new"; else run new "$new"; run base "$base"; fi
done
python3 - "$work/runs" <<'PY'
import statistics, sys
runs = [line.split() for line in open(sys.argv[1])]
pairs = [dict((run[0], run) for run in runs[k:k + 2]) for k in range(0, len(runs), 2)]
wall = [float(p["new"][4]) / float(p["base"][4]) for p in pairs]
cpu = [(float(p["new"][2]) + float(p["new"][3])) / (float(p["base"][2]) + float(p["base"][3])) for p in pairs]
print(f"pairs {len(pairs)}: step_seconds new/baseline median {statistics.median(wall):.3f} "
      f"(each {[round(r, 3) for r in wall]}), CPU time median {statistics.median(cpu):.3f}")
PY
