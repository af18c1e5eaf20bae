#!/usr/bin/env bash
# The GPU check's training stage (issue 47): `fpdt train` on the cpu backend and on the GPU's, the same run —
# llama-tiny, sequences of 1024 tokens in chunks of 256 offloaded to RAM, 20 steps, in fp32 and in bf16 —
# and their losses step by step within the bounds below, on DATA's shards (gpu_check.sh tokenizes this
# repository's text as bytes: the GPU machine has no corpus). One line per step and a verdict per precision;
# exit 1 when a loss is out of bounds or a run fails.
#   bash scripts/gpu_check_train.sh BUILD DATA WORK [BACKEND]
# BACKEND: the one compared with cpu (default cuda; cpu-guarded rehearses the stage on a machine without
# a GPU: its bits are cpu's, so every difference is 0).
set -euo pipefail
build=$1 data=$2 work=$3 backend=${4:-cuda}
mkdir -p "$work"

for precision in fp32 bf16; do
  for run_backend in cpu "$backend"; do
    run=$work/train-$run_backend-$precision
    "$build/fpdt" train --model llama-tiny --data "$data" --out "$run" --overwrite \
      --backend "$run_backend" --precision "$precision" --seq 1024 --chunk-tokens 256 --offload ram --batch 2 \
      --steps 20 --lr 0.003 --warmup 2 --eval-every 0 --eval-batches 0 --save-every 0 --seed 47 >"$run.log" 2>&1 ||
      { echo "train: fpdt train --backend $run_backend --precision $precision failed: $(tail -1 "$run.log")"; exit 1; }
  done
  # Bounds, relative to the cpu loss. Step 1 runs the same weights on the same tokens, so only the arithmetic
  # differs: fp32 sums in other orders (cuBLAS, the CUDA attention kernels: ~1e-7 relative per value, and the
  # loss averages 2048 of them), 1e-5; bf16 rounds at other points (cuDNN rounds each block's o and its P̃ from
  # its own maximum, tensor cores truncate their sums: a few units of 2^-8 on single values, averaged), 4e-3,
  # one unit. The steps after it add the drift of 19 AdamW updates from slightly different gradients, which
  # the normalised update can amplify where a gradient is near zero: 1e-3 in fp32, 3e-2 in bf16. A wrong
  # kernel is off by far more (an untrained model's loss ~5.6 against ~3 after 20 steps).
  python3 - "$work/train-cpu-$precision/metrics.jsonl" "$work/train-$backend-$precision/metrics.jsonl" \
    "$precision" "$backend" <<'PY'
import json, sys
cpu_path, other_path, precision, backend = sys.argv[1:]
first_bound, later_bound = {"fp32": (1e-5, 1e-3), "bf16": (4e-3, 3e-2)}[precision]
def losses(path):
    return {row["step"]: row["loss"] for row in map(json.loads, open(path)) if "loss" in row}
cpu, other = losses(cpu_path), losses(other_path)
worst, failed = 0.0, []
for step in sorted(cpu):
    if step not in other:
        failed.append(f"step {step}: no loss from {backend}")
        continue
    error = abs(other[step] - cpu[step]) / abs(cpu[step])
    bound = first_bound if step == 1 else later_bound
    worst = max(worst, error / bound)
    print(f"train {precision} step {step:2d}: cpu {cpu[step]:.6f}  {backend} {other[step]:.6f}  "
          f"relative {error:.2e} (bound {bound:.0e})")
    if error > bound:
        failed.append(f"step {step}: {error:.2e} > {bound:.0e}")
if len(cpu) < 20:
    failed.append(f"{len(cpu)} cpu steps recorded, 20 expected")
verdict = "ok" if not failed else "FAILED (" + "; ".join(failed[:3]) + ")"
print(f"train {precision}: {backend} vs cpu over {len(cpu)} steps, worst {worst:.2f} of its bound: {verdict}")
sys.exit(0 if not failed else 1)
PY
done
