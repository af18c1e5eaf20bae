#!/usr/bin/env bash
# The main job's recipe run longer (issue 44): recipes/smollm2-16k.yaml with STEPS steps per stage instead of
# one (--resume accepts an edit of a stage not yet started: a run may be cut shorter on the way), gated on
# SEQUENCES held-out sequences instead of one, and RULER's two single-needle tasks at 12K and 16K with SAMPLES
# prompts each — then the same RULER prompts answered by the base model with YaRN x2 alone (no
# training), and what the training bought over YaRN alone, sequence by sequence (mean and spread):
#   the change of the loss at positions 8K..16K beside its change at 4K..8K (adapting to the corpus moves both),
#   and RULER's score beyond 8K.
#   bench/extend_long.sh BUILD OUT [STEPS] [SEQUENCES] [SAMPLES]     (STEPS: N, or N12K,N16K per stage)
#   e.g. bench/extend_long.sh build runs/extend-long 12,6 6 4
# Needs what `make run` leaves: data/kjv.txt and the GGUF in ~/.cache/fpdt/smollm2. The held-out split here is
# 10 % of the corpus (data/kjv-smollm2-long: ~100K tokens, six 16K sequences; `make run`'s 2 % holds one).
# Time on 2 quiet cores (bf16): ~1 min a 12K step, ~1.7 min a 16K one, ~45 s a RULER prompt at 16K.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1 out=$2
steps=${3:-12} sequences=${4:-6} samples=${5:-8}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
gguf=${FPDT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fpdt}/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$gguf" ] && [ -s data/kjv.txt ] || { echo "run make run first (it leaves $gguf and data/kjv.txt)" >&2; exit 1; }
data=data/kjv-smollm2-long
[ -s "$data/val.bin" ] ||
  "$build/fpdt" tokenize --tokenizer "$gguf" --val-fraction 0.1 --out "$data" data/kjv.txt > /dev/null
mkdir -p "$out"
tasks=niah_single_1,niah_single_2
# The recipe, its steps, gate sequences and RULER lengths raised; everything else as `make run` runs it.
sed -e "s|^model: .*|model: $gguf|" -e "s|^data: .*|data: $data|" -e "s|^out: .*|out: $out/extend|" \
    -e "0,/^    steps: 1$/s//    steps: ${steps%,*}/" -e "s|^    steps: 1$|    steps: ${steps#*,}|" -e "s|^  save-every: 1$|  save-every: 4|" -e "s|sequences: 1,|sequences: $sequences,|" \
    -e "s|ruler: {tasks: niah_single_1, samples: 1, lengths: 12K,|ruler: {tasks: \"$tasks\", samples: $samples, lengths: \"12K,16K\",|" \
    recipes/smollm2-16k.yaml > "$out/recipe.yaml"
grep -q "steps: ${steps#*,}" "$out/recipe.yaml" && grep -q "samples: $samples" "$out/recipe.yaml" ||
  { echo "recipes/smollm2-16k.yaml changed shape: update this script's edits" >&2; exit 1; }
"$build/fpdt" extend "$out/recipe.yaml" --resume 2>&1 | tee -a "$out/extend.log" |
  grep --line-buffered -E '^(stage |gate |base model)|^step +[0-9]+/[0-9]+ .*\] loss'

# The same RULER prompts (same seed, lengths and template) through the base model with YaRN x2 alone.
yarn='{"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 8192}'
[ -s "$out/base_yarn_ruler/ruler.json" ] ||
  "$build/fpdt" eval --checkpoint "$out/extend/base" --data "$data" --seq 16384 --sequences 1 --passkey-lengths none \
    --ruler --tasks "$tasks" --ruler-lengths 12288,16384 --ruler-samples "$samples" --ruler-template smollm2-chat \
    --chunk-tokens 8192 --offload ram --precision bf16 --rope-scaling "$yarn" --out "$out/base_yarn_ruler" \
    > "$out/base_yarn_ruler.log" 2>&1
/usr/bin/python3 tools/plot_extend.py "$out/extend/report.json" "$out/report.png" > /dev/null

/usr/bin/python3 - "$out" <<'SUMMARY'
import json, statistics, sys
out = sys.argv[1]
report = json.load(open(f"{out}/extend/report.json"))
last = report["stages"][-1]
gates = {g["gate"]: g for g in json.load(open(f"{out}/extend/stage{len(report['stages'])}-{last['name']}/gates.json"))["gates"]}
position = gates["position_loss"]["details"]
def spread(values):
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{statistics.mean(values):+.4f} ± {sd:.4f} (n {len(values)}, min {min(values):+.4f}, max {max(values):+.4f})"
for stage in report["stages"]:
    losses = [loss for _, loss in stage["loss_by_step"]]
    print(f"stage {stage['name']}: S {stage['seq']:,}, {stage['steps']} steps, {stage['tokens']:,} tokens; "
          f"training loss {losses[0]:.4f} -> {losses[-1]:.4f} (first and last step)")
for key, name in (("far", "8K..16K"), ("near", "4K..8K")):
    trained = position[f"{key}_by_sequence"]
    alone = position["base_with_rope"][f"{key}_by_sequence"]
    base = position["base"][f"{key}_by_sequence"]
    print(f"loss at positions {name}, mean of the sequences: base {statistics.mean(base):.4f}, YaRN alone "
          f"{statistics.mean(alone):.4f}, trained {statistics.mean(trained):.4f}; trained - YaRN alone per sequence "
          f"{spread([t - a for t, a in zip(trained, alone)])}")
diff_far = [t - a for t, a in zip(position["far_by_sequence"], position["base_with_rope"]["far_by_sequence"])]
diff_near = [t - a for t, a in zip(position["near_by_sequence"], position["base_with_rope"]["near_by_sequence"])]
print(f"beyond 8K minus under 8K (what is specific to the long positions): "
      f"{spread([f - n for f, n in zip(diff_far, diff_near)])}")
trained_ruler = json.load(open(f"{out}/extend/stage{len(report['stages'])}-{last['name']}/gate_ruler/ruler.json"))
alone_ruler = json.load(open(f"{out}/base_yarn_ruler/ruler.json"))
for run, name in ((alone_ruler, "YaRN alone"), (trained_ruler, "trained")):
    cells = ", ".join(f"{c['task']} {c['length']:,}: {c['score']:.0f}" for c in run["cells"])
    right = sum(s["score"] >= 1.0 for s in run["samples"])
    print(f"RULER {name}: {cells} ({right}/{len(run['samples'])} prompts right)")
pairs = {(s["task"], s["length"], s["index"]): s["score"] for s in alone_ruler["samples"]}
changed = [(k, pairs[k], s["score"]) for s in trained_ruler["samples"]
           if (k := (s["task"], s["length"], s["index"])) in pairs and pairs[k] != s["score"]]
print(f"RULER prompts whose verdict training changed: {len(changed)} of {len(pairs)}"
      + "".join(f"; {t} {l} #{i}: {a:.0%} -> {b:.0%}" for (t, l, i), a, b in changed))
SUMMARY
