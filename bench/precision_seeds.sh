#!/usr/bin/env bash
# bf16 beside fp32 over many seeds, with the two controls a single pair lacks (issue 28's "final validation
# loss within 1 %"): for each seed, 200 steps of one shape (bench/precision_curves.sh's command line,
# validated once at the end on the same held-out batches) as
#   fpdt-fp32      --precision fp32
#   fpdt-bf16      --precision bf16
#   fpdt-fp32-alt  --precision fp32 under OPENBLAS_CORETYPE=$ALT_CORETYPE: other fp32 GEMM kernels, so
#                  other rounding and nothing else — how far fp32 moves from fp32 under a perturbation of
#                  its own, the noise floor a precision's gap is read against
#   torch-fp32, torch-bf16  the same run in PyTorch (bench/precision_torch.py): fp32 and the standard
#                  autocast recipe, the gap the tool users already have shows at this shape
#   torch-bf16-residual  autocast with the residual stream rounded to bf16 as fpdt's bf16 rounds it: what
#                  that one difference between the two recipes costs
#   torch-bf16-residual-sr  the same values rounded stochastically (unbiased): not run unless RUNS names it
# and then, for each comparison, the paired gap of the final validation losses (b / a − 1 per seed): mean,
# standard error, how many seeds have b above a. The losses are deterministic for a build, a CPU's
# kernels and the thread count (2 here), so runs may share the machine; step times are not recorded.
#   shapes: demo    `make demo`'s first stage: llama-demo, 8 × 256, 8 validation batches (all five runs)
#           peer8k  the peer model (configs/peer_llama.json) at T = 8K, batch 1, one chunk resident, 4
#                   validation batches (fpdt-fp32 and fpdt-bf16: 5–25 min a run)
# Each run's result stays in runs/precision_seeds/SHAPE/RUN_SEED.json and is not run again (delete to redo);
# the table goes to bench/results/precision_seeds_SHAPE.csv, or to TABLE (a table of other runs or another
# machine's beside it, not over it).
#   usage: bench/precision_seeds.sh [BUILD_DIR]    SHAPE=demo SEEDS="1234 ... 1243" ALT_CORETYPE=Haswell
#          RUNS="fpdt-fp32 fpdt-bf16 fpdt-fp32-alt torch-fp32 torch-bf16 torch-bf16-residual" TABLE=... override
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fpdt=$build/fpdt
shape=${SHAPE:-demo}
seeds=${SEEDS:-$(seq -s ' ' 1234 1243)}
alt_coretype=${ALT_CORETYPE:-Haswell}
case $shape in
  demo) config=bench/configs/llama_demo.json fpdt_model=llama-demo batch=8 seq=256 eval_batches=8
        default_runs="fpdt-fp32 fpdt-bf16 fpdt-fp32-alt torch-fp32 torch-bf16 torch-bf16-residual" ;;
  peer8k) config=bench/configs/peer_llama.json fpdt_model=$config batch=1 seq=8192 eval_batches=4
          default_runs="fpdt-fp32 fpdt-bf16" ;;
  *) echo "[precision_seeds] unknown SHAPE '$shape'; hint: demo or peer8k" >&2; exit 1 ;;
esac
selected=${RUNS:-$default_runs}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}  # the machine may be shared: no spinning threads
bash scripts/get_corpus.sh "$fpdt" data >/dev/null
runs=runs/precision_seeds/$shape
mkdir -p "$runs" bench/results
python=python3
case " $selected " in *" torch-"*) python=$(tools/reference_env.sh) ;; esac

# fpdt_run NAME SEED PRECISION [ENV=VALUE ...]: one fpdt run; its final validation loss into NAME_SEED.json.
fpdt_run() {
  local name=$1 seed=$2 precision=$3 out=$runs/$1_$2
  shift 3
  [ -s "$out.json" ] && return 0
  echo "== $name seed $seed ($(date -u +%H:%M:%S) UTC)" >&2
  rm -rf "$out"
  env "$@" "$fpdt" train --model "$fpdt_model" --batch "$batch" --seq "$seq" --data data/kjv --steps 200 --lr 3e-3 --min-lr 3e-4 \
    --warmup 20 --eval-every 200 --eval-batches "$eval_batches" --save-every 0 --threads 2 --seed "$seed" --precision "$precision" \
    --out "$out" > "$out.log" 2>&1 || { tail -n 20 "$out.log" >&2; exit 1; }
  python3 - "$out" "$name" "$seed" > "$out.json" <<'PY'
import json, sys
run, name, seed = sys.argv[1:]
last = [json.loads(line) for line in open(run + "/metrics.jsonl")][-1]
print(json.dumps({"run": name, "seed": int(seed), "step": last["step"], "val_loss": last["val_loss"]}))
PY
  rm -rf "$out"
}

torch_run() {
  local name=$1 seed=$2 precision=$3 out=$runs/$1_$2
  [ -s "$out.json" ] && return 0
  echo "== $name seed $seed ($(date -u +%H:%M:%S) UTC)" >&2
  "$python" bench/precision_torch.py --config "$config" --batch "$batch" --seq "$seq" --eval-batches "$eval_batches" \
    --data data/kjv --seed "$seed" --precision "$precision" --threads 2 > "$out.log" 2>&1 || { tail -n 20 "$out.log" >&2; exit 1; }
  tail -n 1 "$out.log" | "$python" -c 'import json, sys; r = json.loads(sys.stdin.read()); print(json.dumps(
      {"run": sys.argv[1], "seed": r["seed"], "step": r["steps"], "val_loss": r["val_loss"]}))' "$name" > "$out.json"
}

for seed in $seeds; do
  for run in $selected; do
    case $run in
      fpdt-fp32) fpdt_run "$run" "$seed" fp32 ;;
      fpdt-bf16) fpdt_run "$run" "$seed" bf16 ;;
      fpdt-fp32-alt) fpdt_run "$run" "$seed" fp32 OPENBLAS_CORETYPE="$alt_coretype" ;;
      torch-fp32) torch_run "$run" "$seed" fp32 ;;
      torch-bf16) torch_run "$run" "$seed" bf16 ;;
      torch-bf16-residual) torch_run "$run" "$seed" bf16-residual ;;
      torch-bf16-residual-sr) torch_run "$run" "$seed" bf16-residual-sr ;;
      *) echo "[precision_seeds] unknown run '$run' in RUNS" >&2; exit 1 ;;
    esac
  done
done

python3 - "$runs" "${TABLE:-bench/results/precision_seeds_$shape.csv}" "$alt_coretype" $seeds <<'PY'
import json, math, os, sys
runs, csv_path, alt = sys.argv[1:4]
seeds = [int(s) for s in sys.argv[4:]]
names = ["fpdt-fp32", "fpdt-bf16", "fpdt-fp32-alt", "torch-fp32", "torch-bf16", "torch-bf16-residual",
         "torch-bf16-residual-sr"]
loss = {}
for name in names:
    for seed in seeds:
        path = f"{runs}/{name}_{seed}.json"
        if os.path.exists(path):
            loss[name, seed] = json.load(open(path))["val_loss"]
present = [n for n in names if all((n, s) in loss for s in seeds)]
with open(csv_path, "w") as out:
    out.write("seed," + ",".join(present) + "\n")
    for seed in seeds:
        out.write(f"{seed}," + ",".join(f"{loss[n, seed]:.6f}" for n in present) + "\n")
print("| seed | " + " | ".join(present) + " |")
print("|---|" + "---|" * len(present))
for seed in seeds:
    print(f"| {seed} | " + " | ".join(f"{loss[n, seed]:.4f}" for n in present) + " |")
def mean_sd(xs):
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
print("| mean (sd) | " + " | ".join("%.4f (%.3f)" % mean_sd([loss[n, s] for s in seeds]) for n in present) + " |")
print()
comparisons = [("fpdt-bf16", "fpdt-fp32", "fpdt bf16 against fp32"),
               ("fpdt-fp32-alt", "fpdt-fp32", f"fpdt fp32 with OPENBLAS_CORETYPE={alt} against fp32 (the noise floor)"),
               ("torch-bf16", "torch-fp32", "torch autocast bf16 against torch fp32"),
               ("torch-bf16-residual", "torch-fp32", "torch autocast bf16, residual stream rounded, against torch fp32"),
               ("torch-bf16-residual", "torch-bf16", "torch: the residual stream rounded against autocast alone"),
               ("torch-bf16-residual-sr", "torch-fp32", "torch autocast bf16, residual stream rounded stochastically, against torch fp32"),
               ("torch-fp32", "fpdt-fp32", "torch fp32 against fpdt fp32 (another implementation's streams)")]
for b, a, words in comparisons:
    if b not in present or a not in present:
        continue
    gaps = [loss[b, s] / loss[a, s] - 1 for s in seeds]
    m, sd = mean_sd(gaps)
    identical = sum(loss[b, s] == loss[a, s] for s in seeds)
    note = f"; {identical} seeds bitwise equal" if identical else ""
    print(f"{words}: paired gap {100 * m:+.2f} % ± {100 * sd / math.sqrt(len(gaps)):.2f} % (standard error), "
          f"|gap| mean {100 * sum(map(abs, gaps)) / len(gaps):.2f} %, higher in {sum(g > 0 for g in gaps)} of "
          f"{len(gaps)}{note}")
PY
