#!/usr/bin/env bash
# `fpdt eval` of the demo model that `make run` extends (issue 17) at growing S, chunks of 4K offloaded to
# disk: the compute peak must be the same at every length (the forward keeps nothing of length S in the
# compute tier), the offload tier grows with S. Then `fpdt eval --dry-run` at DRY lengths (up to 1M): the
# layout of the forward, its peaks without its arithmetic (at 1M, ~2e15 FLOP of attention: hours on 2 cores).
# One sequence from train.bin (the KJV's val.bin holds 83K bytes).
#   usage: bench/eval_long.sh [BUILD_DIR] [CHECKPOINT] [LENGTHS...]
#          defaults: build runs/demo/long 16384 32768 65536; DRY="16384 262144 1048576" from the environment
# Writes bench/results/eval_long.json (one line per run: the eval's summary line, wall and CPU time, load)
# and each run's folder (JSON, log; the disk store's file is unlinked at creation) under CHECKPOINT/eval_S.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
checkpoint=${2:-runs/demo/long}
shift $(($# < 2 ? $# : 2))
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(16384 32768 65536)
read -r -a dry <<< "${DRY:-16384 262144 1048576}"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mkdir -p bench/results
out=bench/results/eval_long.json
: > "$out.partial"
eval_at() {  # S, then "" or "--dry-run"
  local seq=$1 dir=$checkpoint/eval_$1${2:+_dry} load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  echo "eval S = $seq ${2:-}, load $load" >&2
  mkdir -p "$dir"
  local line
  line=$(/usr/bin/time -f '{"wall_seconds": %e, "user_seconds": %U, "system_seconds": %S}' -o "$dir/time.json" \
    "$build/fpdt" eval --checkpoint "$checkpoint" --data data/kjv --split train --seq "$seq" --sequences 1 \
    --chunk-tokens 4096 --offload "disk:$dir" --passkey-trials 0 --out "$dir" ${2:-} 2>&1 | tee "$dir/log" | grep '^{' | tail -n 1)
  echo "{\"seq\": $seq, \"load_before\": \"$load\", \"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"time\": $(cat "$dir/time.json"), \"eval\": $line}" >> "$out.partial"
}
for seq in "${lengths[@]}"; do eval_at "$seq" ""; done
for seq in "${dry[@]}"; do eval_at "$seq" --dry-run; done
mv "$out.partial" "$out"
cat "$out"
