#!/usr/bin/env bash
# The GPU check's speed stage (issue 47), JSON lines on stdout:
#   1. bench_cuda: cuBLASLt's GEMM peak, the backend's linear, and its attention blocks (cuDNN in bf16) on one
#      fully visible (C, C) block of H heads of dimension D; then PyTorch's SDPA on the same shapes
#      (bench/attention_torch_sdpa.py, the GPU machine's torch), FLOPs counted alike.
#   2. A training step of a 1B Llama (bench/configs/llama3_2_1b.json: Llama 3.2 1B's shape) in bf16 with
#      chunks offloaded to RAM: at 64K tokens (three steps), and at the longest sequence `fpdt plan --max-seq`
#      finds for this GPU and host (two steps) — run only up to LONG_SEQ_CAP tokens: a step's attention grows
#      as S² (the plan gives a 1B model ~40 s a step at 256K on an H200, ~10 min at 1M) and the check has
#      minutes; the planned longest is printed beside it. The last step is reported (the first builds cuDNN's
#      graphs): tokens/s and MFU against the GPU's stated bf16 peak, and the tiers' peaks.
#   bash scripts/gpu_check_speed.sh BUILD DATA WORK     (DATA: token shards of at least 128K tokens)
# Environment: LONG_SEQ_CAP (default 128K tokens), PYTHON (default python3: the one with the GPU's torch).
set -uo pipefail
build=$1 data=$2 work=$3
cap=${LONG_SEQ_CAP:-131072}
python=${PYTHON:-python3}
model=bench/configs/llama3_2_1b.json
status=0
mkdir -p "$work"

"$build/bench/bench_cuda" --gemm 8192 --chunk 4096 --heads 16 --head-dim 128 --iters 10 || status=1
"$python" bench/attention_torch_sdpa.py --chunk 4096 --heads 16 --head-dim 128 --iters 10 || status=1

# The GPU's preset for the planner, and the host memory the offload tier may take (80 % of what is free).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case $gpu in *H200*) hardware=H200-141GB ;; *H100*) hardware=H100-80GB ;; *) hardware=A100-80GB ;; esac
host_mem=$(awk '/MemAvailable/ {printf "%.0f", $2 * 1024 * 0.8}' /proc/meminfo)
longest=$("$build/fpdt" plan --model "$model" --hardware "$hardware" --host-mem "$host_mem" --sp 1 --zero 0 \
  --precision bf16 --offload ram --recompute layer --max-seq --json 2>/dev/null |
  python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["max_seq"]["seq_tokens"])' \
  2>/dev/null || echo 0)
long_seq=$(( longest > 0 && longest < cap ? longest : cap ))
echo "{\"bench\": \"plan_max_seq\", \"hardware\": \"$hardware\", \"host_mem\": $host_mem," \
     "\"planned_longest\": $longest, \"measured_at\": $long_seq}"

for seq in 65536 "$long_seq"; do
  out=$work/step-$seq steps=$([ "$seq" = 65536 ] && echo 3 || echo 2)
  # The plan's chunk for this length (the smallest whose prefetch hides), as a training run would take it.
  chunk=$("$build/fpdt" plan --model "$model" --hardware "$hardware" --host-mem "$host_mem" --seq "$seq" --sp 1 \
    --zero 0 --precision bf16 --offload ram --recompute layer --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["config"]["chunk_tokens"])' 2>/dev/null || echo 16384)
  if "$build/fpdt" train --model "$model" --data "$data" --out "$out" --overwrite --backend cuda --precision bf16 \
       --seq "$seq" --chunk-tokens "$chunk" --offload ram --recompute layer --batch 1 --steps 100 \
       --stop-after "$steps" --save-every 1000 --eval-every 0 --eval-batches 0 --seed 47 >"$out.log" 2>&1; then
    python3 - "$out/metrics.jsonl" "$seq" "$chunk" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
last = rows[-1]
print(json.dumps({"bench": "llama1b_step", "seq": int(sys.argv[2]), "chunk": int(sys.argv[3]), "step": last["step"],
                  "step_seconds": round(last["step_seconds"], 3), "tokens_per_second": round(last["tokens_per_second"]),
                  "mfu": round(last["mfu"], 4), "peak_gflops": last["peak_gflops"],
                  "compute_peak_gib": round(last["compute_peak_bytes"] / 2**30, 2),
                  "offload_peak_gib": round(last["offload_peak_bytes"] / 2**30, 2)}))
PY
  else
    why=$(tail -1 "$out.log" | tr -d '"\\' | cut -c1-200)
    echo "{\"bench\": \"llama1b_step\", \"seq\": $seq, \"chunk\": $chunk, \"error\": \"fpdt train failed: $why\"}"
    status=1
  fi
  rm -rf "$out"
done
exit $status
