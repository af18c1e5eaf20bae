#!/usr/bin/env bash
# FPDT speed benchmark (issues 6, 12, 16), one rank, 2 threads:
#   overlap:    step time at S = 32K on configs/memory_llama.json with --offload none, ram and disk,
#               alternated, best of 2 each; ratios ram/none and disk/none; and from a --trace of the ram
#               run, the share of copy time that ran while compute ran (copies hidden behind compute).
#   batch:      `make run`'s shape (llama-demo, 8 sequences of 256 tokens), tokens/s: the median step
#               of steps 2-6, best of 2 runs.
#   throughput: MFU of one step at S = 64K, --recompute none, against the FMA peak (and the ratio to
#               the sgemm rate) measured in the same run, with the load average.
# With BASELINE (the fpdt binary of another build, e.g. main before a change), every overlap and batch
# run is made with both binaries back to back, so both see the same load, and the ratios this
# build / baseline are reported.
# Writes bench/results/fpdt_speed.json. Usage: bench/fpdt_speed.sh [BUILD_DIR [BASELINE]]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fpdt=$build/fpdt
baseline=${2:-}
work=$(mktemp -d /tmp/fpdt_speed.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p bench/results
bash scripts/get_corpus.sh "$fpdt" data >/dev/null
common=(train --model bench/configs/memory_llama.json --data data/kjv --batch 1 --steps 1 --eval-batches 0
        --save-every 0 --threads 2 --chunk-tokens 8192 --recompute none)
batch=(train --model llama-demo --data data/kjv --batch 8 --seq 256 --steps 6 --eval-batches 0 --save-every 0
       --threads 2 --peak-gflops 1)
binaries=(new)
[ -n "$baseline" ] && binaries=(baseline new)
binary() { if [ "$1" = baseline ]; then echo "$baseline"; else echo "$fpdt"; fi; }

step_seconds() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['step_seconds'])" "$1"; }
batch_tokens_per_second() {  # the median over steps 2..6 (step 1 warms up)
  python3 -c "
import json, statistics, sys
steps = [json.loads(line) for line in open(sys.argv[1]) if '\"tokens_per_second\"' in line][1:]
print(statistics.median(s['tokens_per_second'] for s in steps))" "$1"
}
smaller() { python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$1" "$2"; }

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
declare -A best
for round in 1 2; do
  for offload in none ram disk; do
    for which in "${binaries[@]}"; do
      target=$offload; [ $offload = disk ] && target="disk:$work"
      out="$work/$which-$offload$round"
      "$(binary "$which")" "${common[@]}" --seq 32768 --offload "$target" --out "$out" --peak-gflops 1 > "$out.log" 2>&1
      seconds=$(step_seconds "$out/metrics.jsonl")
      echo "S=32K offload $offload round $round $which: $seconds s (load $(cut -d' ' -f1 /proc/loadavg))" >&2
      key="$which-$offload"
      if [ -z "${best[$key]:-}" ] || smaller "$seconds" "${best[$key]}"; then best[$key]=$seconds; fi
    done
  done
  for which in "${binaries[@]}"; do
    out="$work/$which-batch$round"
    "$(binary "$which")" "${batch[@]}" --out "$out" > "$out.log" 2>&1
    tps=$(batch_tokens_per_second "$out/metrics.jsonl")
    echo "batch 8 x 256 round $round $which: $tps tokens/s (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    key="$which-batch"
    if [ -z "${best[$key]:-}" ] || smaller "${best[$key]}" "$tps"; then best[$key]=$tps; fi
  done
done

"$fpdt" "${common[@]}" --seq 32768 --offload ram --out "$work/traced" --peak-gflops 1 --trace "$work/trace.json" \
  > "$work/traced.log" 2>&1
overlap=$(python3 - "$work/trace.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
compute = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] == "compute")
copies = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] == "copy"]
merged = []
for begin, end in compute:
    if merged and begin <= merged[-1][1]:
        merged[-1][1] = max(merged[-1][1], end)
    else:
        merged.append([begin, end])
import bisect
starts = [m[0] for m in merged]
def covered(begin, end):
    total, i = 0, max(bisect.bisect_right(starts, begin) - 1, 0)
    while i < len(merged) and merged[i][0] < end:
        total += max(0, min(end, merged[i][1]) - max(begin, merged[i][0]))
        i += 1
    return total
copy_time = sum(e - b for b, e in copies)
print(round(sum(covered(b, e) for b, e in copies) / copy_time, 3) if copy_time else 0.0)
PY
)
cp "$work/trace.json" bench/results/fpdt_trace_32k_ram.json 2>/dev/null || true

"$fpdt" "${common[@]}" --seq 65536 --offload ram --out "$work/mfu" > "$work/mfu.log" 2>&1
mfu_line=$(head -n 1 "$work/mfu/metrics.jsonl")
echo "S=64K: $mfu_line" >&2

python3 - "$mfu_line" "$overlap" "$(for k in "${!best[@]}"; do echo "$k=${best[$k]}"; done)" \
  <<'PY' > bench/results/fpdt_speed.json
import json, sys
mfu_line, overlap, pairs = sys.argv[1:]
best = dict(pair.split("=") for pair in pairs.split())
best = {key: float(value) for key, value in best.items()}
mfu = json.loads(mfu_line)
result = {
    "overlap_seq": 32768, "chunk_tokens": 8192, "threads": 2,
    "step_seconds": {tier: best[f"new-{tier}"] for tier in ("none", "ram", "disk")},
    "ram_over_none": round(best["new-ram"] / best["new-none"], 3),
    "disk_over_none": round(best["new-disk"] / best["new-none"], 3),
    "copy_time_overlapped_by_compute": float(overlap),
    "batch_8x256_tokens_per_second": best["new-batch"],
    "throughput_seq": 65536, "throughput_step_seconds": mfu["step_seconds"],
    "throughput_gflops": mfu["gflops"], "mfu": mfu["mfu"], "sgemm_ratio": mfu.get("sgemm_ratio"),
    "throughput_load_average": mfu.get("load_average"),
}
if "baseline-none" in best:
    result["baseline"] = {
        "step_seconds": {tier: best[f"baseline-{tier}"] for tier in ("none", "ram", "disk")},
        "batch_8x256_tokens_per_second": best["baseline-batch"],
    }
    result["over_baseline"] = {
        "step_seconds": {tier: round(best[f"new-{tier}"] / best[f"baseline-{tier}"], 3) for tier in ("none", "ram", "disk")},
        "batch_8x256_tokens_per_second": round(best["new-batch"] / best["baseline-batch"], 3),
    }
print(json.dumps(result, indent=2))
PY
cat bench/results/fpdt_speed.json
