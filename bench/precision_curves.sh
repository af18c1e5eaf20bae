#!/usr/bin/env bash
# bf16 beside fp32 over a whole training run (issue 28): one pair of `fpdt train` runs of the same model,
# data, seed and optimizer, one `--precision fp32`, one `--precision bf16`, run one after the other (never
# side by side: each gets the same 2 threads), validated every EVAL_EVERY steps on the same held-out
# batches. Writes bench/results/precision_curves/PAIR_{fp32,bf16}.csv (one row a step: training loss,
# validation loss where measured, step time, load) and PAIR.svg (bench/plot_curves.py), and prints the
# final validation losses and their relative difference |bf16 - fp32| / fp32 (issue 28 asks <= 1 %).
#   pairs:  demo    `make demo`'s first stage: llama-demo, 8 sequences of 256 bytes (scripts/long_context_demo.sh)
#           peer8k  the peer model (configs/peer_llama.json, bench/peer_torch.sh) at T = 8K, batch 1, one
#                   chunk resident (as peer_torch.sh's t8k runs it)
#   both on the King James Bible bytes (scripts/get_corpus.sh), with the demo's optimizer settings
#   (lr 3e-3 cosine to 3e-4, 20 warmup steps, AdamW defaults).
# Restartable, for a shared machine where a pair can outlast a session: each run lives in
# runs/precision_curves/PAIR/PRECISION, checkpointed at every validation, and a new call resumes it
# (bitwise the run never stopped: tests/cli/resume_test.cpp); a precision whose CSV already reaches
# STEPS is not run again. Delete runs/precision_curves/PAIR and the CSVs to start afresh.
#   usage: bench/precision_curves.sh demo|peer8k [BUILD_DIR]     STEPS=200 EVAL_EVERY=10 EVAL_BATCHES=8 override
set -euo pipefail
cd "$(dirname "$0")/.."
pair=$1
build=${2:-build}
fpdt=$build/fpdt
steps=${STEPS:-200}
eval_every=${EVAL_EVERY:-10}
eval_batches=${EVAL_BATCHES:-8}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}  # the machine may be shared: no spinning threads
case $pair in
  demo) shape=(--model llama-demo --batch 8 --seq 256) ;;
  peer8k) shape=(--model bench/configs/peer_llama.json --batch 1 --seq 8192) ;;
  *) echo "[precision_curves] unknown pair '$pair'; hint: demo or peer8k" >&2; exit 1 ;;
esac
bash scripts/get_corpus.sh "$fpdt" data >/dev/null
results=bench/results/precision_curves
runs=runs/precision_curves/$pair
mkdir -p "$results" "$runs"

for precision in fp32 bf16; do
  csv=$results/${pair}_$precision.csv
  if [ -s "$csv" ] && [ "$(tail -n 1 "$csv" | cut -d, -f1)" = "$steps" ]; then
    echo "== $pair $precision: $csv already holds $steps steps" >&2
    continue
  fi
  echo "== $pair $precision: $steps steps, validation every $eval_every ($(date -u +%H:%M:%S) UTC)" >&2
  "$fpdt" train "${shape[@]}" --data data/kjv --steps "$steps" --lr 3e-3 --min-lr 3e-4 --warmup 20 \
    --eval-every "$eval_every" --eval-batches "$eval_batches" --save-every "$eval_every" --threads 2 --seed 1234 \
    --precision "$precision" --out "$runs/$precision" --resume >> "$runs/$precision.log" 2>&1 ||
    { tail -n 20 "$runs/$precision.log" >&2; exit 1; }
  # The CSV: step 0 is the validation loss before training (the first segment of the log; metrics.jsonl
  # starts at step 1).
  python3 - "$runs/$precision" "$csv" <<'PY'
import json, re, sys
run, csv_path = sys.argv[1:]
before = re.search(r"validation loss before training: ([0-9.]+)", open(run + ".log").read()).group(1)
rows = ["step,loss,val_loss,step_seconds,load_average", f"0,,{before},,"]
for line in open(run + "/metrics.jsonl"):
    m = json.loads(line)
    val = f"{m['val_loss']:.6f}" if "val_loss" in m else ""
    rows.append(f"{m['step']},{m['loss']:.6f},{val},{m['step_seconds']:.4f},{m['load_average']:.2f}")
open(csv_path, "w").write("\n".join(rows) + "\n")
PY
done

python3 bench/plot_curves.py "$results/$pair.svg" "$pair: ${shape[*]}, $steps steps" \
  "fp32=$results/${pair}_fp32.csv" "bf16=$results/${pair}_bf16.csv"
