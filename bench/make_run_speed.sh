#!/usr/bin/env bash
# `make run`'s shape (llama-demo, 8 sequences of 256 tokens, its learning-rate schedule) for STEPS steps,
# this build against BASELINE (the fpdt binary of another build), ROUNDS runs each, alternated (ABBA) so
# both see the same load: per run the median tokens/s and MFU of steps 2..STEPS (each run measures its
# own FMA peak and sgemm rate, so MFU and the sgemm ratio are of that run's machine), the process's CPU
# seconds per step (builds that log it) and the load;
# then the medians and the ratio of tokens/s this / baseline. OMP_WAIT_POLICY=passive for both unless
# the caller sets it. Writes bench/results/make_run_speed.json.
#   usage: bench/make_run_speed.sh [BUILD_DIR [BASELINE_FPDT]]     ROUNDS=3 STEPS=30 override
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fpdt=$build/fpdt
baseline=${2:-}
rounds=${ROUNDS:-3}
steps=${STEPS:-30}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
work=$(mktemp -d /tmp/fpdt_make_run.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p bench/results
bash scripts/get_corpus.sh "$fpdt" data >/dev/null
args=(train --model llama-demo --data data/kjv --batch 8 --seq 256 --lr 3e-3 --min-lr 3e-4 --warmup 20
      --eval-batches 0 --save-every 1000 --threads 2 --steps "$steps")

run() {  # which binary
  local out="$work/$1$RANDOM"
  "$2" "${args[@]}" --out "$out" > "$out.log" 2>&1
  python3 - "$out" "$1" >> "$work/runs.jsonl" <<'PY'
import json, statistics, sys
out, which = sys.argv[1:]
steps = [json.loads(line) for line in open(out + "/metrics.jsonl")][1:]
med = lambda key: statistics.median(s[key] for s in steps) if key in steps[0] else None
peak = [line for line in open(out + ".log") if line.startswith("| peak GFLOP/s") or line.startswith("| sgemm GFLOP/s")]
print(json.dumps({"which": which, "tokens_per_second": med("tokens_per_second"), "gflops": med("gflops"),
                  "mfu": med("mfu"), "sgemm_ratio": med("sgemm_ratio"), "load_average": med("load_average"),
                  "cpu_seconds": med("cpu_seconds"),
                  "loss": steps[-1]["loss"], "rates": [p.strip() for p in peak]}))
PY
  tail -n 1 "$work/runs.jsonl" >&2
}
for r in $(seq "$rounds"); do
  if [ -z "$baseline" ]; then run new "$fpdt"
  elif [ $((r % 2)) = 1 ]; then run baseline "$baseline"; run new "$fpdt"
  else run new "$fpdt"; run baseline "$baseline"; fi
done
python3 - "$work/runs.jsonl" "$OMP_WAIT_POLICY" "$steps" <<'PY' | tee bench/results/make_run_speed.json
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
summary = {"omp_wait_policy": sys.argv[2], "steps": int(sys.argv[3]), "runs": runs}
for which in ("new", "baseline"):
    mine = [r for r in runs if r["which"] == which]
    if not mine:
        continue
    med = lambda key: statistics.median(r[key] for r in mine) if mine[0][key] is not None else None
    summary[which] = {key: med(key) for key in ("tokens_per_second", "gflops", "mfu", "sgemm_ratio", "cpu_seconds", "load_average")}
if "baseline" in summary:
    summary["tokens_per_second_over_baseline"] = summary["new"]["tokens_per_second"] / summary["baseline"]["tokens_per_second"]
print(json.dumps(summary, indent=1))
PY
