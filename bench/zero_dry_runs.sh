#!/usr/bin/env bash
# Dry runs of the paper's models (issue 15): `fpdt train --model M --sp 4 --zero 3 --seq S --dry-run`
# in one process (it lays out rank 0 of 4), its wall time and peak RSS (/usr/bin/time -v), and its
# per-rank tier peaks minus `fpdt plan`'s for the same configuration, in bytes. Two configurations: the train
# defaults (one chunk, nothing offloaded, no recompute, --batch 8) and FPDT's (64K chunks offloaded to
# RAM, --recompute layer, --batch 1). Usage: bench/zero_dry_runs.sh [BUILD_DIR] [SEQ]
set -euo pipefail
cd "$(dirname "$0")/.."
fpdt=${1:-build}/fpdt
seq=${2:-2M}
configs=("--batch 8 --chunk-tokens $seq --offload none --recompute none"
         "--batch 1 --chunk-tokens 64K --offload ram --recompute layer")
printf '%-11s %-6s %8s %9s %14s %14s %10s %10s\n' model config wall_s rss_MiB compute_peak offload_peak dry-plan_c dry-plan_o
for model in gpt-2.7b gpt-6.7b gpt-13b gpt-30b llama3-8b llama3-70b; do
  for i in 0 1; do
    # shellcheck disable=SC2086
    /usr/bin/time -v "$fpdt" train --model "$model" --sp 4 --zero 3 --seq "$seq" ${configs[$i]} --dry-run \
      > /tmp/zero_dry.$$ 2>&1
    # shellcheck disable=SC2086
    "$fpdt" plan --model "$model" --sp 4 --zero 3 --seq "$seq" ${configs[$i]} --precision fp32 --hardware cpu --json \
      > /tmp/zero_plan.$$
    python3 - "$model" "$i" /tmp/zero_dry.$$ /tmp/zero_plan.$$ <<'PY'
import json, re, sys
model, config, dry_path, plan_path = sys.argv[1:]
text = open(dry_path).read()
dry = json.loads([l for l in text.splitlines() if l.startswith("{")][-1])
wall = re.search(r"Elapsed \(wall clock\) time .*: (?:(\d+):)?(\d+):([\d.]+)", text).groups()
seconds = int(wall[0] or 0) * 3600 + int(wall[1]) * 60 + float(wall[2])
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
plan = json.load(open(plan_path))["memory"]
def off(measured, predicted):  # the dry run's peak minus the plan's, in bytes
    return "%+d" % (measured - predicted)
print("%-11s %-6s %8.2f %9.1f %14d %14d %10s %10s" % (model, ["default", "fpdt"][int(config)], seconds, rss,
      dry["compute_peak_bytes"], dry["offload_peak_bytes"], off(dry["compute_peak_bytes"], plan["compute"]["peak_bytes"]),
      off(dry["offload_peak_bytes"], plan["offload"]["peak_bytes"])))
PY
  done
done
rm -f /tmp/zero_dry.$$ /tmp/zero_plan.$$
