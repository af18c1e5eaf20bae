#!/usr/bin/env bash
# The byte-level job (`make demo`): a model trained at a short context, its context extended with FPDT, and
# what that bought, on the bytes of the King James Bible.
#   1. short  the demo Llama trained on sequences of SHORT_SEQ bytes (RoPE base 10^4)
#   2. long   from that checkpoint, the RoPE base raised to LONG_THETA and LONG_STEPS steps on sequences of
#             LONG_SEQ bytes, cut into chunks of LONG_CHUNK offloaded to RAM; then the memory line: this
#             step's compute peak, the same step's under --mode ulysses (a dry run), their ratio
#   3. eval   both models' loss by context position on held-out sequences of LONG_SEQ bytes (fpdt eval),
#             plotted into RUN_DIR/loss_by_position.png, the verdict in numbers, a sample of the long model
# usage: scripts/long_context_demo.sh FPDT_BINARY RUN_DIR   (settings below, overridable from the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
fpdt=$1
run=$2
: "${SHORT_STEPS:=150}" "${SHORT_SEQ:=256}" "${LONG_STEPS:=8}" "${LONG_SEQ:=16384}" "${LONG_CHUNK:=4096}"
: "${LONG_THETA:=1e6}" "${EVAL_SEQUENCES:=2}" "${SAMPLE_TOKENS:=200}"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}  # the machine may be shared: no spinning threads
python=/usr/bin/python3
started=$(date +%s)
say() { printf '\n== %s (%ds)\n' "$1" $(($(date +%s) - started)); }
last_json() { grep '^{' | tail -n 1; }  # the summary line fpdt prints last
field() { $python -c "import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
mib() { $python -c "import sys; print(f'{int(sys.argv[1]) / 2**20:.0f} MiB')" "$1"; }

mkdir -p "$run"
say "1/3 short context: the demo Llama on $SHORT_SEQ-byte sequences, $SHORT_STEPS steps"
"$fpdt" train --model llama-demo --data data/kjv --out "$run/short" --steps "$SHORT_STEPS" --batch 8 \
  --seq "$SHORT_SEQ" --lr 3e-3 --min-lr 3e-4 --warmup 20 --eval-every 50 --eval-batches 8 --save-every 0 \
  --overwrite | tee "$run/short.log" | sed '/^[|+]/d'
short=$(cat "$run/short/latest")

say "2/3 context extension: RoPE base $LONG_THETA, $LONG_STEPS steps on $LONG_SEQ-byte sequences in chunks of $LONG_CHUNK offloaded to RAM"
long_options=(--init-from "$run/short/$short" --rope-theta "$LONG_THETA" --data data/kjv --batch 1 --seq "$LONG_SEQ")
"$fpdt" train "${long_options[@]}" --out "$run/long" --steps "$LONG_STEPS" --chunk-tokens "$LONG_CHUNK" \
  --offload ram --lr 1e-3 --min-lr 3e-4 --warmup 2 --eval-batches 0 --save-every 0 --overwrite \
  | tee "$run/long.log" | sed '/^[|+]/d'
fpdt_peak=$(field "$(last_json < "$run/long.log")" compute_peak_bytes)
ulysses_peak=$(field "$("$fpdt" train "${long_options[@]}" --out "$run/dry" --mode ulysses --dry-run 2>/dev/null | last_json)" \
  compute_peak_bytes)
echo "memory of one $LONG_SEQ-token step: FPDT $(mib "$fpdt_peak") compute peak (chunks of $LONG_CHUNK, offloaded);" \
  "Ulysses $(mib "$ulysses_peak") (one chunk, resident; dry run): $($python -c "print(f'{$ulysses_peak / $fpdt_peak:.1f}')")x"

say "3/3 evaluation: loss by context position on $EVAL_SEQUENCES held-out sequences of $LONG_SEQ bytes"
for model in short long; do
  "$fpdt" eval --checkpoint "$run/$model" --data data/kjv --seq "$LONG_SEQ" --chunk-tokens "$LONG_CHUNK" \
    --offload ram --sequences "$EVAL_SEQUENCES" --passkey-trials 0 --out "$run/$model/eval" \
    | tee "$run/$model.eval.log" | sed '/^{/d'
done
curves=("short (trained at $SHORT_SEQ)=$run/short/eval/loss_by_position.json"
        "extended (base $LONG_THETA, $LONG_STEPS steps at $LONG_SEQ)=$run/long/eval/loss_by_position.json")
$python tools/plot_eval.py loss "$run/loss_by_position.png" "${curves[@]}" --mark="$SHORT_SEQ=short training length"
far=$($python tools/plot_eval.py range 4096 "$LONG_SEQ" "${curves[@]}" | sed 's/^[^:]*: //' | paste -sd ' ')
near=$($python tools/plot_eval.py range 1 63 "${curves[1]}" | sed 's/^[^:]*: //')
validation=$(field "$(last_json < "$run/long.eval.log")" mean_loss)
$python - $far "$near" "$validation" <<'VERDICT'
import sys
far_short, far_long, near_long, validation = map(float, sys.argv[1:])
def verdict(holds): return "yes" if holds else "NO"
print(f"loss at context positions >= 4096: extended model {far_long:.4f} < short model {far_short:.4f} nats/byte: "
      f"{verdict(far_long < far_short)}")
print(f"extended model at positions >= 4096 {far_long:.4f} < its own loss at positions < 64 {near_long:.4f}: "
      f"{verdict(far_long < near_long)}")
print(f"validation loss of the extended model (all positions) {validation:.4f} <= 2.0 nats/byte: "
      f"{verdict(validation <= 2.0)}")
VERDICT
echo "plot: $run/loss_by_position.png"

say "sample of the extended model"
"$fpdt" sample --checkpoint "$run/long" --prompt "And God said" --tokens "$SAMPLE_TOKENS"
say "done"
