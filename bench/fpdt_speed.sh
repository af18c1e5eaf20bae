#!/usr/bin/env bash
# FPDT speed benchmark (issue 6), one rank, 2 threads, on configs/memory_llama.json:
#   overlap:    step time at S = 32K with --offload none, ram and disk, alternated, best of 2 each;
#               ratios ram/none and disk/none; and from a --trace of the ram run, the share of copy
#               time that ran while compute ran (copies hidden behind compute).
#   throughput: MFU of one step at S = 64K, --recompute none, the FMA peak measured in the same run.
# Writes bench/results/fpdt_speed.json. Usage: bench/fpdt_speed.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fpdt=$build/fpdt
work=$(mktemp -d /tmp/fpdt_speed.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p bench/results
bash scripts/get_corpus.sh "$fpdt" data >/dev/null
common=(train --model bench/configs/memory_llama.json --data data/kjv --batch 1 --steps 1 --eval-batches 0
        --save-every 0 --threads 2 --chunk-tokens 8192 --recompute none)

step_seconds() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['step_seconds'])" "$1"; }

declare -A best
for round in 1 2; do
  for offload in none ram disk; do
    target=$offload; [ $offload = disk ] && target="disk:$work"
    out="$work/$offload$round"
    "$fpdt" "${common[@]}" --seq 32768 --offload "$target" --out "$out" --peak-gflops 1 > "$out.log" 2>&1
    seconds=$(step_seconds "$out/metrics.jsonl")
    echo "S=32K offload $offload round $round: $seconds s" >&2
    if [ -z "${best[$offload]:-}" ] || python3 -c "import sys; sys.exit(0 if $seconds < ${best[$offload]} else 1)"; then
      best[$offload]=$seconds
    fi
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

python3 - "$work" "${best[none]}" "${best[ram]}" "${best[disk]}" "$overlap" "$mfu_line" <<'PY' > bench/results/fpdt_speed.json
import json, sys
work, none, ram, disk, overlap, mfu_line = sys.argv[1:]
none, ram, disk = float(none), float(ram), float(disk)
mfu = json.loads(mfu_line)
print(json.dumps({
    "overlap_seq": 32768, "chunk_tokens": 8192, "threads": 2,
    "step_seconds": {"none": none, "ram": ram, "disk": disk},
    "ram_over_none": round(ram / none, 3), "disk_over_none": round(disk / none, 3),
    "copy_time_overlapped_by_compute": float(overlap),
    "throughput_seq": 65536, "throughput_step_seconds": mfu["step_seconds"],
    "throughput_gflops": mfu["gflops"], "mfu": mfu["mfu"],
}, indent=2))
PY
cat bench/results/fpdt_speed.json
