#!/usr/bin/env bash
# FPDT memory benchmark (issue 6): compute-tier peak per rank against sequence length for
# --mode fpdt and --mode ulysses, P = 2 ranks under mpirun, on the Llama of configs/memory_llama.json
# (h 256, L 2, Hq = Hkv = 4, D 64, f 704, V 257: the byte tokenizer's 256 bytes + end-of-document).
#   real runs: one training step at S = 8K..64K (fpdt, offload to disk) and 8K..16K (ulysses),
#              with each rank's compute peak and the process's peak RSS;
#   dry runs:  the same layouts counted without compute, S = 8K..4M;
#   longest S: binary search with dry runs under --compute-mem 2GiB for both modes (fpdt's offload
#              tier bounded by --offload-mem 20GiB, what this machine's RAM could hold).
# Writes bench/results/fpdt_memory.json and .png. Usage: bench/fpdt_memory.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fpdt=$build/fpdt
config=bench/configs/memory_llama.json
chunk=4096
results=bench/results
work=$(mktemp -d /tmp/fpdt_memory.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$results"
bash scripts/get_corpus.sh "$fpdt" data >/dev/null
source bench/mpirun.sh
common=(train --model "$config" --data data/kjv --out "$work/run" --overwrite --sp 2 --batch 1 --steps 1 --eval-batches 0
        --save-every 0 --threads 1 --peak-gflops 40)
fpdt_opts=(--mode fpdt --chunk-tokens $chunk --offload "disk:$work")
ulysses_opts=(--mode ulysses)

# The last JSON line rank 0 printed.
json_of() { grep '^{' | tail -n 1; }

echo '{"config": "'$config'", "ranks": 2, "chunk_tokens": '$chunk', "real": [' > "$work/out.json"
first=1
real() {  # mode S options...
  local mode=$1 seq=$2; shift 2
  local line
  line=$(bench_mpirun 2 "$fpdt" "${common[@]}" --seq "$seq" "$@" 2>&1 | json_of)
  [ $first -eq 1 ] || echo ',' >> "$work/out.json"
  first=0
  echo "{\"mode\": \"$mode\", \"seq\": $seq, \"result\": $line}" >> "$work/out.json"
  echo "real $mode S=$seq: $line" >&2
}
for seq in 8192 16384 32768 65536; do real fpdt $seq "${fpdt_opts[@]}"; done
for seq in 8192 16384; do real ulysses $seq "${ulysses_opts[@]}"; done
echo '], "dry": [' >> "$work/out.json"
first=1
# Dry runs under mpirun like the real ones: rank 0's line is reported (every rank lays out the same sizes).
dry_rank0() {  # S options...
  local seq=$1; shift
  bench_mpirun 2 "$fpdt" "${common[@]}" --seq "$seq" --dry-run "$@" 2>/dev/null | json_of || true
}
for seq in 8192 16384 32768 65536 131072 262144 524288 1048576 2097152 4194304; do
  for mode in fpdt ulysses; do
    if [ $mode = fpdt ]; then opts=("${fpdt_opts[@]}"); else opts=("${ulysses_opts[@]}"); fi
    line=$(dry_rank0 $seq "${opts[@]}")
    [ -n "$line" ] || continue
    [ $first -eq 1 ] || echo ',' >> "$work/out.json"
    first=0
    echo "{\"mode\": \"$mode\", \"seq\": $seq, \"result\": $line}" >> "$work/out.json"
    echo "dry $mode S=$seq: $line" >&2
  done
done
echo '], "longest": {' >> "$work/out.json"
longest() {  # mode options... → the longest S (a multiple of the chunk) whose dry run fits
  local lo=$chunk hi=$((1 << 26))
  while [ $((hi - lo)) -gt $chunk ]; do
    local mid=$(( (lo + hi) / 2 / chunk * chunk ))
    if [ -n "$(dry_rank0 $mid --compute-mem 2GiB "$@")" ]; then lo=$mid; else hi=$mid; fi
  done
  echo $lo
}
ulysses_max=$(longest "${ulysses_opts[@]}")
fpdt_max=$(longest --mode fpdt --chunk-tokens $chunk --offload ram --offload-mem 20GiB)
echo "\"ulysses\": $ulysses_max, \"fpdt\": $fpdt_max, \"compute_mem\": \"2GiB\", \"fpdt_offload_mem\": \"20GiB\"" >> "$work/out.json"
echo '}}' >> "$work/out.json"
python3 -m json.tool "$work/out.json" > "$results/fpdt_memory.json"
echo "longest S under 2GiB: ulysses $ulysses_max, fpdt $fpdt_max (ratio $(python3 -c "print(round($fpdt_max/$ulysses_max,1))"))" >&2
bash scripts/install_deps.sh python3-matplotlib >/dev/null
/usr/bin/python3 tools/plot_memory.py "$results/fpdt_memory.json" "$results/fpdt_memory.png"
