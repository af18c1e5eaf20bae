#!/usr/bin/env bash
# The GPU check (issues 8, 29 and 47), one script for one call on a GPU machine that has nvcc, its host
# compiler, CMake, ninja and PyTorch but no other packages: the libraries come from the carried folder
# (scripts/prepare_gpu_carry.sh). In order, each stage capped and the whole by a deadline inside the call's
# 10 minutes:
#   1. unpack the carried libraries, configure with the CUDA backend, build the `cuda` tests, bench_cuda
#      and fpdt;
#   2. `ctest -L cuda` (per-test timeouts, JUnit XML);
#   3. `fpdt train` on cpu and on cuda, llama-tiny chunked and offloaded, 20 steps in fp32 and in bf16:
#      losses step by step within stated bounds (scripts/gpu_check_train.sh);
#   4. speed (scripts/gpu_check_speed.sh): attention TFLOP/s beside PyTorch's SDPA on the same shapes, and
#      a 1B Llama's training step at 64K and at the longest planned S (capped): tokens/s and MFU;
#   5. the failed tests again with CUDA_LAUNCH_BLOCKING=1 (the failing kernel named);
#   6. compute-sanitizer: memcheck over the attention rows, initcheck and racecheck over one training step
#      (reports to read, never the verdict).
# The logs land in $OUT in 8 files, the most a call brings back (configure, build, tests + rerun, junit.xml,
# train, speed, sanitizer, summary), and a one-screen summary is printed last, whatever failed.
#   bash scripts/gpu_check.sh [BUILD_DIR]        (default build-gpu)
# Environment: OUT (logs; default BUILD_DIR/out), FPDT_GPU_CARRY (default .gpu-carry), CUDA_ARCH (90),
# GPU_CHECK_BUDGET_S (total seconds, default 540), GPU_CHECK_CONFIGURE_S and GPU_CHECK_BUILD_S (those
# stages' shares, default 180 and 300: a 16-core GPU machine; a loaded 2-core one needs far more),
# GPU_CHECK_SANITIZER=0 to skip the sanitizer pass, LONG_SEQ_CAP (gpu_check_speed.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
OUT=${OUT:-$BUILD/out}
CARRY=${FPDT_GPU_CARRY:-.gpu-carry}
ARCH=${CUDA_ARCH:-90}
BUDGET=${GPU_CHECK_BUDGET_S:-540}
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
    if [ -s "$OUT/tests.log" ]; then
      grep -E "tests passed|Total Test time" "$OUT/tests.log" | head -2
      sed -n '/The following tests FAILED/,$p' "$OUT/tests.log" | grep -E ' - ' | sort -u | head -12 |
        sed 's/^\s*/  failed: /'
    fi
    grep -E '^train( fp32| bf16)?:' "$OUT/train.log" 2>/dev/null
    [ -s "$OUT/speed.log" ] && python3 - "$OUT/speed.log" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
by = {(r["bench"], r.get("dtype")): r for r in rows}
for r in rows:
    if "error" in r:
        print(f"speed: {r['bench']}" + (f" S={r['seq']}" if 'seq' in r else '') + f": {r['error']}")
gemm = by.get(("gemm", "bf16"), {}).get("tflops")
for direction in ("fwd", "bwd"):  # issue 47's goal: >= 0.5 of torch's rate in bf16
    for dtype in ("fp32", "bf16"):
        ours, torch = by.get((f"attention_chunk_{direction}", dtype)), by.get((f"torch_sdpa_{direction}", dtype))
        if not ours:
            continue
        line = f"speed: attention {direction} {dtype} C={ours['chunk']} H={ours['heads']} D={ours['head_dim']}: " \
               f"ours {ours['tflops']:.1f} TFLOP/s ({ours['kernel']})"
        if torch:
            line += f", torch SDPA {torch['tflops']:.1f}: ratio {ours['tflops'] / torch['tflops']:.2f}" + \
                    (" (goal >= 0.5)" if dtype == "bf16" else "")
        if gemm:
            line += f"; / bf16 GEMM {ours['tflops'] / gemm:.2f}"
        print(line)
plan = by.get(("plan_max_seq", None))
if plan:
    print(f"speed: 1B Llama, longest S planned on {plan['hardware']} with {plan['host_mem'] / 2**30:.0f} GiB of host "
          f"memory: {plan['planned_longest']} tokens; measured at {plan['measured_at']}")
for r in rows:
    if r["bench"] == "llama1b_step" and "mfu" in r:
        goal = " (goal >= 0.40)" if r["seq"] == 65536 else ""
        print(f"speed: 1B Llama step at S={r['seq']} (chunks of {r['chunk']}): {r['step_seconds']:.2f} s, "
              f"{r['tokens_per_second']} tokens/s, MFU {r['mfu']:.3f}{goal}; compute peak {r['compute_peak_gib']} GiB, "
              f"offload {r['offload_peak_gib']} GiB")
PY
    grep -E '^sanitizer ' "$OUT/sanitizer.log" 2>/dev/null
    echo "logs:  $OUT ($(ls "$OUT" | tr '\n' ' '))"
    echo "result: $([ $overall -eq 0 ] && echo PASSED || echo FAILED)"
  } | tee -a "$OUT/summary.txt"
}
trap print_summary EXIT
# A signal (the device tool's time limit, ^C) ends the check FAILED, and the summary still prints.
trap 'overall=143; summary+=("interrupted  by a signal: the stage running then and the ones after it did not finish"); exit 143' TERM INT
: >"$OUT/summary.txt"
for log in configure build tests train speed sanitizer; do : >"$OUT/$log.log"; done

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

# 2. Configure and build: the cuda test programs (tests/**/*_cuda_test.cpp), bench_cuda and fpdt.
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cuda_targets=()
for source in tests/*/*_cuda_test.cpp; do
  cuda_targets+=("$(basename "$(dirname "$source")")_$(basename "$source" .cpp)")
done
if stage configure "${GPU_CHECK_CONFIGURE_S:-180}" "$OUT/configure.log" cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
     -DFPDT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${prefix_flag[@]}" &&
   stage build "${GPU_CHECK_BUILD_S:-300}" "$OUT/build.log" cmake --build "$BUILD" -j "$(nproc)" \
     --target "${cuda_targets[@]}" bench_cuda fpdt; then
  # 3. Tests, one process per case.
  tests_ok=1
  stage tests 150 "$OUT/tests.log" ctest --test-dir "$BUILD" -L cuda -j 4 -V --timeout "$TEST_TIMEOUT_S" \
    --output-junit "$OUT/junit.xml" || { tests_ok=0; overall=1; }
  # 4. cpu against cuda in training, on this repository's text as bytes (~480K tokens).
  work=$BUILD/check-work
  data=$work/data
  mkdir -p "$work"
  stage data 30 "$OUT/train.log" "$BUILD/fpdt" tokenize --tokenizer bytes --out "$data" --overwrite \
    README.md docs/*.md src/fpdt/*/*.h || overall=1
  stage train 120 "$OUT/train.log" bash scripts/gpu_check_train.sh "$BUILD" "$data" "$work" cuda || overall=1
  # 5. Speed: JSON lines.
  stage speed 150 "$OUT/speed.log" bash scripts/gpu_check_speed.sh "$BUILD" "$data" "$work" || overall=1
  # 6. Failures again with synchronous launches.
  if [ $tests_ok = 0 ]; then
    stage rerun 60 "$OUT/tests.log" env CUDA_LAUNCH_BLOCKING=1 ctest --test-dir "$BUILD" --rerun-failed \
      --output-on-failure --timeout "$TEST_TIMEOUT_S"
  fi
  # 7. compute-sanitizer: memcheck over the attention rows; initcheck (reads of device memory nothing wrote)
  # and racecheck (shared-memory races) over one bf16 training step of llama-tiny, chunked and offloaded.
  # Each tool's verdict is a line of the log; a report to read, never the check's verdict.
  if [ "$SANITIZER" = 1 ] && command -v compute-sanitizer >/dev/null; then
    sanitize_script='
      build=$1 data=$2 work=$3
      step=("$build/fpdt" train --model llama-tiny --data "$data" --out "$work/sanitize" --overwrite --backend cuda
            --precision bf16 --seq 512 --chunk-tokens 128 --offload ram --batch 1 --steps 1 --eval-batches 0)
      sanitize() {
        local tool=$1; shift
        compute-sanitizer --tool "$tool" --error-exitcode 3 "$@"
        local status=$?
        local verdict="exit $status (3: errors reported above)"
        [ $status = 0 ] && verdict=clean
        echo "sanitizer $tool: $verdict on ${*:1:3}"
      }
      sanitize memcheck "$build/kernels_backend_ops_cuda_test" --gtest_filter="*cuda_attention*"
      sanitize initcheck "${step[@]}"
      sanitize racecheck "${step[@]}"'
    stage sanitizer 90 "$OUT/sanitizer.log" bash -c "$sanitize_script" sanitize "$BUILD" "$data" "$work" ||
      summary[-1]="${summary[-1]}   (not fatal)"
  else
    summary+=("$(printf '%-12s SKIPPED  (%s)' sanitizer \
      "$([ "$SANITIZER" = 1 ] && echo "no compute-sanitizer on PATH" || echo GPU_CHECK_SANITIZER=0)")")
  fi
else
  overall=1
  tail -25 "$OUT/build.log" "$OUT/configure.log" 2>/dev/null | grep -v '^$' | tail -25
fi
exit $overall
