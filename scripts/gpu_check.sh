#!/usr/bin/env bash
# The GPU check (issues 8 and 29), one script for one call on a GPU machine that has nvcc, its host
# compiler, CMake and ninja but no other packages: the libraries come from the carried folder
# (scripts/prepare_gpu_carry.sh). Unpacks them, configures with the CUDA backend, builds only the
# `cuda` tests and bench_cuda, runs `ctest -L cuda` (per-test timeouts, JUnit XML), reruns failures
# with CUDA_LAUNCH_BLOCKING=1, optionally compute-sanitizer over the attention rows (never fatal),
# then the CUDA benchmark. Every stage ends by a deadline well inside the call's 10 minutes; each one's
# log lands in $OUT (8 files, the most a call brings back), and a one-screen summary is printed last,
# whatever failed.
#   bash scripts/gpu_check.sh [BUILD_DIR]        (default build-gpu)
# Environment: OUT (logs; default BUILD_DIR/out), FPDT_GPU_CARRY (default .gpu-carry), CUDA_ARCH (90),
# GPU_CHECK_BUDGET_S (total seconds, default 480), GPU_CHECK_CONFIGURE_S and GPU_CHECK_BUILD_S (those
# stages' shares, default 180 and 300: a 16-core GPU machine; a loaded 2-core one needs far more),
# GPU_CHECK_SANITIZER=0 to skip the sanitizer pass.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
OUT=${OUT:-$BUILD/out}
CARRY=${FPDT_GPU_CARRY:-.gpu-carry}
ARCH=${CUDA_ARCH:-90}
BUDGET=${GPU_CHECK_BUDGET_S:-480}
SANITIZER=${GPU_CHECK_SANITIZER:-1}
TEST_TIMEOUT_S=90  # one test case (one process); the slowest cuda row takes a few seconds on an H200
mkdir -p "$OUT" "$BUILD"
OUT=$(cd "$OUT" && pwd)
BUILD=$(cd "$BUILD" && pwd)
start=$(date +%s)
deadline=$((start + BUDGET))
summary=()  # one line per stage
overall=0

# stage NAME CAP_S LOG COMMAND...: runs COMMAND with its output appended to LOG, stopped after CAP_S
# seconds or at the deadline (keeping 15 s for the summary); records the outcome. Returns its status.
stage() {
  local name=$1 cap=$2 log=$3
  shift 3
  local left=$((deadline - $(date +%s) - 15))
  local limit=$((cap < left ? cap : left))
  if [ "$limit" -le 0 ]; then
    summary+=("$(printf '%-12s SKIPPED  (no time left in the %d s budget)' "$name" "$BUDGET")")
    return 124
  fi
  local t0=$(date +%s) status
  echo "== $name (at most ${limit} s; log: $log)"
  { echo "== $name: $*"; } >>"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  status=$?
  local verdict=ok
  [ $status -ne 0 ] && verdict="FAILED (exit $status)"
  [ $status -eq 124 ] && verdict="TIMED OUT after ${limit} s"
  summary+=("$(printf '%-12s %-26s %4d s   %s' "$name" "$verdict" $(( $(date +%s) - t0 )) "$(basename "$log")")")
  return $status
}

print_summary() {
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  {
    echo
    echo "================ gpu_check summary ($(date -u '+%F %T UTC'), $(( $(date +%s) - start )) s of $BUDGET)"
    echo "GPU:   ${gpu:-none visible (nvidia-smi failed)}"
    echo "nvcc:  $(nvcc --version 2>/dev/null | tail -1)   cmake: $(cmake --version | head -1 | cut -d' ' -f3)   arch: sm_$ARCH"
    echo "deps:  ${deps_text:-system only}"
    grep -E '^-- (OpenBLAS|oneDNN|GEMM libraries|Oniguruma|OpenMP|NCCL|GoogleTest|CUDA backend|cuDNN attention):' "$OUT/configure.log" 2>/dev/null | sed 's/^-- /       /'
    echo "cudnn: ${FPDT_CUDNN_LIBRARY:-libcudnn.so.9 by the dynamic loader (FPDT_CUDNN_LIBRARY unset)}"
    printf '%s\n' "${summary[@]}"
    if [ -f "$OUT/tests.log" ]; then
      grep -E "tests passed|Total Test time" "$OUT/tests.log" | tail -2
      sed -n '/The following tests FAILED/,$p' "$OUT/tests.log" | grep -E ' - ' | head -12 | sed 's/^\s*/  failed: /'
    fi
    [ -f "$OUT/bench.log" ] && python3 - "$OUT/bench.log" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
by = {(r["bench"], r["dtype"]): r for r in rows}
for r in rows:
    name = r["bench"] + " " + r["dtype"] + (f" n={r['n']}" if "n" in r else f" C={r['chunk']} H={r['heads']} D={r['head_dim']} {r.get('kernel', '')}")
    print(f"bench: {name:38s} {r['tflops']:9.2f} TFLOP/s")
bf16 = by.get(("gemm", "bf16"), {}).get("tflops")
for kind, target in (("attention_chunk_fwd", 0.50), ("attention_chunk_bwd", 0.35)):
    for dtype in ("fp32", "bf16"):
        r = by.get((kind, dtype))
        if r and bf16:
            print(f"bench: {kind} {dtype} / bf16 GEMM = {r['tflops'] / bf16:.3f} (issue 8 target >= {target} in bf16; "
                  f"kernel: {r.get('kernel', '?')})")
PY
    echo "logs:  $OUT ($(ls "$OUT" | tr '\n' ' '))"
    echo "result: $([ $overall -eq 0 ] && echo PASSED || echo FAILED)"
  } | tee -a "$OUT/summary.txt"
}
trap print_summary EXIT
# A signal (the device tool's time limit, ^C) ends the check FAILED, and the summary still prints.
trap 'overall=143; summary+=("interrupted  by a signal: the stage running then and the ones after it did not finish"); exit 143' TERM INT
: >"$OUT/summary.txt"
for log in configure build tests rerun sanitizer bench; do : >"$OUT/$log.log"; done

# 1. The carried libraries, unpacked into BUILD/deps (dpkg -x, or ar + tar where dpkg is missing).
prefix_flag=()
if compgen -G "$CARRY/*.deb" >/dev/null; then
  deps="$BUILD/deps"
  unpack_script='
    set -e
    carry=$1 deps=$2
    rm -rf "$deps" && mkdir -p "$deps"
    (cd "$carry" && sha256sum -c --quiet MANIFEST.sha256)
    for deb in "$carry"/*.deb; do
      if command -v dpkg >/dev/null; then
        dpkg -x "$deb" "$deps"
      else
        data=$(ar t "$deb" | grep "^data\.tar")
        case $data in *.xz) z=-J ;; *.zst) z=--zstd ;; *.gz) z=-z ;; *) z= ;; esac
        ar p "$deb" "$data" | tar -x $z -C "$deps" -f -
      fi
      echo "unpacked $(basename "$deb")"
    done'
  stage unpack 60 "$OUT/configure.log" bash -c "$unpack_script" unpack "$CARRY" "$deps" || overall=1
  prefix_flag=(-DFPDT_DEPS_PREFIX="$deps")
  # libopenblas.so.0 loads libgfortran.so.5, which the executables' run path does not name.
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu/openblas-pthread:$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  deps_text="$(ls "$CARRY"/*.deb | wc -l) packages from $CARRY, unpacked in $deps"
else
  deps_text="system only (no $CARRY/*.deb: run scripts/prepare_gpu_carry.sh where apt-get works)"
fi

# cuDNN's fused attention: the carried headers (prepare_gpu_carry.sh), and at run time PyTorch's libcudnn
# (pip's nvidia-cudnn), which nothing links: cudnn_sdpa.cpp opens the library FPDT_CUDNN_LIBRARY names.
if [ -f "$CARRY/cudnn/include/cudnn.h" ] && [ -f "$CARRY/cudnn-frontend/include/cudnn_frontend.h" ]; then
  prefix_flag+=(-DFPDT_CUDNN_INCLUDE_DIR="$(cd "$CARRY/cudnn/include" && pwd)"
                -DFPDT_CUDNN_FRONTEND_INCLUDE_DIR="$(cd "$CARRY/cudnn-frontend/include" && pwd)")
fi
if [ -z "${FPDT_CUDNN_LIBRARY:-}" ]; then
  cudnn_lib=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib", "libcudnn.so.9"))' 2>/dev/null || true)
  [ -n "$cudnn_lib" ] && [ -f "$cudnn_lib" ] && export FPDT_CUDNN_LIBRARY="$cudnn_lib"
fi

# NCCL for comm/nccl where the toolkit has none beside nvcc: PyTorch's (pip's nvidia-nccl) will do.
if [ ! -e "$(dirname "$(dirname "$(command -v nvcc)")")/include/nccl.h" ]; then
  nccl_root=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  [ -n "$nccl_root" ] && prefix_flag+=(-DFPDT_NCCL_ROOT="$nccl_root")
fi

# 2. Configure and build: the cuda test programs (tests/**/*_cuda_test.cpp) and bench_cuda, nothing else.
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cuda_targets=()
for source in tests/*/*_cuda_test.cpp; do
  cuda_targets+=("$(basename "$(dirname "$source")")_$(basename "$source" .cpp)")
done
if stage configure "${GPU_CHECK_CONFIGURE_S:-180}" "$OUT/configure.log" cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
     -DFPDT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${prefix_flag[@]}" &&
   stage build "${GPU_CHECK_BUILD_S:-300}" "$OUT/build.log" cmake --build "$BUILD" -j "$(nproc)" --target "${cuda_targets[@]}" bench_cuda; then
  # 3. Tests, one process per case; failures again with synchronous launches (the failing kernel named).
  if ! stage tests 200 "$OUT/tests.log" ctest --test-dir "$BUILD" -L cuda -j 4 -V --timeout "$TEST_TIMEOUT_S" \
         --output-junit "$OUT/junit.xml"; then
    overall=1
    stage rerun 90 "$OUT/rerun.log" env CUDA_LAUNCH_BLOCKING=1 ctest --test-dir "$BUILD" --rerun-failed \
      --output-on-failure --timeout "$TEST_TIMEOUT_S"
  fi
  # 4. compute-sanitizer's memcheck over the attention rows: a report to read, never the verdict.
  if [ "$SANITIZER" = 1 ] && command -v compute-sanitizer >/dev/null; then
    stage sanitizer 90 "$OUT/sanitizer.log" compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$BUILD/kernels_backend_ops_cuda_test" --gtest_filter='*cuda_attention*' ||
      summary[-1]="${summary[-1]}   (not fatal)"
  else
    summary+=("$(printf '%-12s SKIPPED  (%s)' sanitizer \
      "$([ "$SANITIZER" = 1 ] && echo "no compute-sanitizer on PATH" || echo GPU_CHECK_SANITIZER=0)")")
  fi
  # 5. The benchmark (bench/bench_cuda.cpp): JSON lines.
  stage bench 90 "$OUT/bench.log" "$BUILD/bench/bench_cuda" --gemm 8192 --chunk 4096 --heads 16 --head-dim 128 \
    --iters 10 || overall=1
else
  overall=1
  tail -25 "$OUT/build.log" "$OUT/configure.log" 2>/dev/null | grep -v '^$' | tail -25
fi
exit $overall
