#!/usr/bin/env bash
# The GPU check of issue 8, one script for one GPU machine (budget: under 8 minutes on one H200):
# configure with the CUDA backend for sm_90, build, run the `cuda` tests (the cuda rows of the
# conformance table: every CudaBackend op against the reference), then the CUDA benchmarks
# (bench/bench_cuda.cpp), and print a table.
#   bash scripts/gpu_check.sh [BUILD_DIR]        (default build-gpu; CUDA_ARCH=90 to change the arch)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
ARCH=${CUDA_ARCH:-90}
JOBS=$(nproc)
start=$(date +%s)

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || {
  echo "gpu_check: nvidia-smi failed: no GPU visible" >&2; exit 1; }

echo "== configure (FPDT_CUDA=ON, sm_${ARCH})"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DFPDT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >/dev/null
echo "== build"
cmake --build "$BUILD" -j "$JOBS" --target kernels_backend_ops_cuda_test bench_cuda 2>&1 | tail -3
echo "   build done after $(( $(date +%s) - start )) s"

echo "== ctest -L cuda"
test_status=0
(cd "$BUILD" && ctest -L cuda --output-on-failure --timeout 300) || test_status=$?

echo "== benchmarks"
bench_log="$BUILD/bench_cuda.jsonl"
"$BUILD/bench/bench_cuda" --gemm 8192 --chunk 4096 --heads 16 --head-dim 128 --iters 10 | tee "$bench_log"

echo
echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F))"
python3 - "$bench_log" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
by = {(r["bench"], r["dtype"]): r for r in rows}
print(f"{'measurement':34s} {'TFLOP/s':>9s}")
for r in rows:
    name = r["bench"] + " " + r["dtype"] + (f" n={r['n']}" if "n" in r else f" C={r['chunk']} H={r['heads']} D={r['head_dim']}")
    print(f"{name:34s} {r['tflops']:9.2f}")
bf16 = by.get(("gemm", "bf16"), {}).get("tflops")
for kind, target in (("attention_chunk_fwd", 0.50), ("attention_chunk_bwd", 0.35)):
    r = by.get((kind, "fp32"))
    if r and bf16:
        print(f"{kind} / bf16 GEMM = {r['tflops'] / bf16:.3f}   (issue 8 target >= {target}; kernels are fp32 for now)")
PY
echo "training step of the ~1B Llama (h=2048, L=16, Hq=16, Hkv=8, f=5632) at S = 64K / 256K / max:"
echo "  NOT RUN — the FPDT pipeline does not run on the CUDA backend yet (pinned-host offload tier,"
echo "  CUDA copy engine and NCCL communicator are still to be built), so there is no step to time."
echo "== total $(( $(date +%s) - start )) s; cuda tests: $([ $test_status -eq 0 ] && echo PASSED || echo FAILED)"
exit $test_status
