#!/usr/bin/env bash
# Packed documents (issue 14): a Llama (configs/doc_llama.json: h 512, 8 heads of 64, 2 layers) trained
# with --doc-mask on rows of 64 documents of S/64 tokens (each ends with, and includes, the byte
# tokenizer's <|eod|>), at S = 4K and S = 64K, chunks of 4K offloaded to RAM, one rank, 2 threads.
# Per run: step seconds per token of the second of two steps, and the offload traffic per token; the
# two lengths alternate (which goes first too) for ROUNDS rounds, and the medians are compared. With
# the (q, kv) chunk pairs that share no document skipped (schedule) and such tiles too (kernels), a
# token should cost at 64K what it costs at 4K, plus its own document's longer attention.
# Writes bench/results/doc_mask_speed.json. Usage: bench/doc_mask_speed.sh [BUILD_DIR] [ROUNDS] [S_SMALL S_LARGE]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
small=${3:-4096}
large=${4:-65536}
fpdt=$build/fpdt
work=$(mktemp -d /tmp/fpdt_docs.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p bench/results

# 4·S tokens of text from the repository in documents of S/64 − 1 bytes (+ <|eod|> between them);
# the last 40 % is the validation shard (which must hold a sequence too).
make_data() {
  local S=$1 dir="$work/text$1"
  mkdir -p "$dir"
  python3 - "$dir" "$S" docs/*.md src/fpdt/*/*.h src/fpdt/*/*.cpp <<'PY'
import sys
out, S, sources = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
text = b"".join(open(p, "rb").read() for p in sources)
size = S // 64 - 1
for d in range(4 * 64):
    start = (d * size) % (len(text) - size)
    open(f"{out}/doc{d:04d}.txt", "wb").write(text[start:start + size])
PY
  "$fpdt" tokenize --out "$work/data$S" --val-fraction 0.4 "$dir"/doc*.txt >/dev/null
}
make_data "$small"
make_data "$large"

common=(train --model bench/configs/doc_llama.json --batch 1 --steps 2 --eval-batches 0 --save-every 0
        --threads 2 --offload ram --doc-mask --peak-gflops 1 --warmup 1)
run() {
  local S=$1 round=$2
  local out="$work/run$S.$round"
  local load=$(cut -d' ' -f1 /proc/loadavg)
  "$fpdt" "${common[@]}" --seq "$S" --chunk-tokens $((S < 4096 ? S : 4096)) --data "$work/data$S" --out "$out" \
    > "$out.log" 2>&1 || { tail -3 "$out.log" >&2; exit 1; }
  python3 - "$out/metrics.jsonl" "$S" "$load" <<'PY' | tee -a "$work/runs"
import json, sys
step = [json.loads(line) for line in open(sys.argv[1])][-1]
S = int(sys.argv[2])
print(S, step["step_seconds"] / S, (step["offload_read_bytes"] + step["offload_written_bytes"]) / S, sys.argv[3])
PY
}
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then run "$small" "$round"; run "$large" "$round"; else run "$large" "$round"; run "$small" "$round"; fi
done
python3 - "$work/runs" "$small" "$large" <<'PY' | tee bench/results/doc_mask_speed.json
import json, statistics, sys
runs = [line.split() for line in open(sys.argv[1])]
small, large = sys.argv[2], sys.argv[3]
per_token = {S: [float(r[1]) for r in runs if r[0] == S] for S in (small, large)}
traffic = {S: [float(r[2]) for r in runs if r[0] == S][-1] for S in (small, large)}
median = {S: statistics.median(v) for S, v in per_token.items()}
print(json.dumps({"documents_per_row": 64, "seconds_per_token_median": median, "seconds_per_token_runs": per_token,
                  "offload_bytes_per_token": traffic, "loads": [float(r[3]) for r in runs],
                  "ratio_large_to_small": round(median[large] / median[small], 3)}, indent=2))
PY
