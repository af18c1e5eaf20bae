#!/usr/bin/env bash
# bf16 beside fp32 under one offload budget (issue 28): for each model and --recompute, `fpdt plan --mode fpdt
# --offload ram --max-seq` in both precisions — the longest sequence whose step fits — and the store's bytes per
# token at the fp32 run's longest S (the plan's store rows, which are the pipeline's own table), bf16 / fp32.
# Two kinds of budget: on the cpu preset the compute tier and the offload tier share --host-mem (the offload
# tier gets what the compute peak leaves, so a bf16 run's weight working copy, 2 bytes a parameter, comes out
# of it); on a GPU preset (the paper's: Llama-3-8B over 4 H100s) the offload tier is the host RAM per rank,
# fixed, and the working copy lives in the GPU's memory beside the fp32 masters.
# Usage: bench/bf16_max_seq.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
fpdt=${1:-build}/fpdt
# model, hardware, the pool (cpu: the preset's 24 GiB; llama3-8b's fp32 model states alone are 126 GiB on one
# rank, so it gets 256 GiB) or "-" (the GPU preset's host RAM), sequence-parallel ranks
runs=("llama-demo cpu 24GiB 1" "bench/configs/peer_llama.json cpu 24GiB 1" "llama3-8b cpu 256GiB 1"
      "llama3-8b H100-80GB - 4")
printf '%-30s %-11s %-9s %-7s %14s %14s %9s %12s\n' model hardware recompute pool S_fp32 S_bf16 ratio store_ratio
for run in "${runs[@]}"; do
  read -r model hardware pool sp <<<"$run"
  for recompute in none layer; do
    common=(--model "$model" --hardware "$hardware" --sp "$sp" --mode fpdt --offload ram --recompute "$recompute")
    [ "$pool" = - ] || common+=(--host-mem "$pool" --compute-mem "$pool")
    "$fpdt" plan "${common[@]}" --precision fp32 --max-seq --json >/tmp/bf16_max_seq_fp32.$$
    "$fpdt" plan "${common[@]}" --precision bf16 --max-seq --json >/tmp/bf16_max_seq_bf16.$$
    seq=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["max_seq"]["seq_tokens"])' \
      /tmp/bf16_max_seq_fp32.$$)
    for p in fp32 bf16; do
      "$fpdt" plan "${common[@]}" --precision "$p" --seq "$seq" --json >/tmp/bf16_store_$p.$$
    done
    python3 - "$model" "$hardware" "$recompute" "$pool" /tmp/bf16_max_seq_fp32.$$ /tmp/bf16_max_seq_bf16.$$ \
      /tmp/bf16_store_fp32.$$ /tmp/bf16_store_bf16.$$ <<'PY'
import json, sys
model, hardware, recompute, pool, *paths = sys.argv[1:]
fp32, bf16, store_fp32, store_bf16 = (json.load(open(p)) for p in paths)
def store(plan):  # the offload tier's rows: the store (layer inputs, activations, gradients)
    return sum(c["bytes"] for c in plan["memory"]["components"] if c["tier"] == "offload")
s32, s16 = fp32["max_seq"]["seq_tokens"], bf16["max_seq"]["seq_tokens"]
print(f"{model:<30} {hardware:<11} {recompute:<9} {pool:<7} {s32:>14,} {s16:>14,} {s16 / s32:>9.3f} {store(store_bf16) / store(store_fp32):>12.4f}")
PY
  done
done
rm -f /tmp/bf16_max_seq_*.$$ /tmp/bf16_store_*.$$
