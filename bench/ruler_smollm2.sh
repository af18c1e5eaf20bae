#!/usr/bin/env bash
# RULER on the real model (issue 43): SmolLM2-135M-Instruct (a Hugging Face folder, e.g. the one `make run`
# converts into runs/extend/model) answers RULER's 11 synthetic tasks through fpdt's KV-cache generation at
# each length — as it is up to its trained 8K, with YaRN x2 at 16K — in bf16, chunks of 2K offloaded to RAM;
# then the heat map, and transformers' fp32 greedy answers to the first K prompts of each task at the first
# length (tools/ruler_reference_answers.py, the reference venv) beside fpdt's: correct/incorrect per sample.
#   bench/ruler_smollm2.sh BUILD MODEL_DIR DATA_DIR OUT [LENGTHS] [SAMPLES] [K]
#   e.g. bench/ruler_smollm2.sh build runs/extend/model data/kjv-smollm2 runs/ruler "4096 8192 16384" 20 2
# Time on 2 cores (AMD EPYC, bf16): ~8 s a 4K prompt, so 220 prompts a length take ~30 min at 4K and hours
# at 16K. Each length's results: OUT/L/ruler.json (every sample), OUT/ruler_L.png; OUT/reference_L.json; all the
# lengths' results (this run's and any earlier one's in OUT) in one heat map: OUT/ruler.png.
# A length whose OUT/L/ruler.json exists is not evaluated again (delete it to redo it).
set -euo pipefail
build=$1 model=$2 data=$3 out=$4
lengths=${5:-4096 8192 16384}
samples=${6:-20}
check=${7:-2}
trained_length=8192  # SmolLM2's max_position_embeddings
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mkdir -p "$out"
first=""
for length in $lengths; do
  rope=()
  if [ "$length" -gt "$trained_length" ]; then  # YaRN over the trained length, factor S / 8K
    factor=$(python3 -c "print(f'{$length / $trained_length:g}')")
    rope=(--rope-scaling "{\"rope_type\": \"yarn\", \"factor\": $factor, \"original_max_position_embeddings\": $trained_length}")
  fi
  [ -s "$out/$length/ruler.json" ] || "$build/fpdt" eval --checkpoint "$model" --data "$data" --seq "$length" --sequences 1 --passkey-lengths none \
    --ruler --ruler-lengths "$length" --ruler-samples "$samples" --ruler-template smollm2-chat \
    --chunk-tokens 2048 --offload ram --precision bf16 --threads "$(nproc)" "${rope[@]}" --out "$out/$length" \
    | tee "$out/$length.log" | grep -E '^(ruler [0-9]+/[0-9]+: .* sample 1/|RULER|task|[a-z_0-9]+ +[0-9.]+$|average|effective)'
  /usr/bin/python3 tools/plot_eval.py ruler "$out/ruler_$length.png" "$out/$length/ruler.json"
  first=${first:-$length}
done
/usr/bin/python3 tools/plot_eval.py ruler "$out/ruler.png" "$out"/*/ruler.json  # any order: the map sorts the lengths

# transformers' answers to the first `check` prompts of each task at the first length, fp32 greedy.
python=$(bash tools/reference_env.sh)
/usr/bin/python3 - "$out/$first/ruler.json" "$check" "$out/prompts_$first.json" <<'PROMPTS'
import json, sys
ruler, check, path = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
tokens = {cell["task"]: cell["tokens_to_generate"] for cell in ruler["cells"]}
samples = [{"id": f"{s['task']}/{s['length']}/{s['index']}", "prompt_ids": s["prompt_ids"],
            "max_new_tokens": tokens[s["task"]]} for s in ruler["samples"] if s["index"] < check]
json.dump({"samples": samples}, open(path, "w"))
PROMPTS
"$python" tools/ruler_reference_answers.py --model "$model" --prompts "$out/prompts_$first.json" \
  --out "$out/reference_$first.json"
"$python" - "$out/$first/ruler.json" "$out/reference_$first.json" "$model" <<'COMPARE'
import json, sys
from transformers import AutoTokenizer
ruler, reference = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
tokenizer = AutoTokenizer.from_pretrained(sys.argv[3])
ours = {f"{s['task']}/{s['length']}/{s['index']}": s for s in ruler["samples"]}
def score(text, references):  # RULER's string_match_all on its postprocessed prediction
    text = "".join("\n" if ord(c) < 32 else c for c in text.strip()).strip().lower()
    return sum(r.lower() in text for r in references) / len(references)
same_verdict = same_tokens = 0
for answer in reference["samples"]:
    s = ours[answer["id"]]
    theirs = score(tokenizer.decode(answer["generated_ids"]), s["references"])
    same_verdict += theirs == s["score"]
    same_tokens += answer["generated_ids"] == s["generated_ids"]
    print(f"{answer['id']:28s} fpdt {s['score']:.2f} transformers {theirs:.2f} "
          f"{'same tokens' if answer['generated_ids'] == s['generated_ids'] else 'tokens differ'}")
n = len(reference["samples"])
print(f"same score: {same_verdict}/{n}; same tokens: {same_tokens}/{n} (fpdt bf16, transformers fp32)")
COMPARE
