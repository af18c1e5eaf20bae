#!/usr/bin/env bash
# fpdt side by side with the peer a user would pick instead: PyTorch (PyPI wheel, tools/reference_env.sh)
# training Hugging Face LlamaForCausalLM with SDPA attention from the same config.json, with the same
# threads, in fp32 ("torch") and under torch.autocast bf16 ("torch-bf16", what a torch user trains with;
# TORCH_BF16=0 leaves it out) — one forward + backward + clipping + AdamW step (bench/peer_torch.py),
# alternated with `fpdt train` on the same shape (and, when this fpdt takes --precision, `fpdt train
# --precision bf16` as "fpdt-bf16"), RUNS times each; the step reported is each process's last: of 2 steps
# (the first pays for allocation and page faults), at 32K of 1 (a step of a minute or more, whose first
# touch of its memory is under 2 % of it: the runs that fit in the time a shared machine allows).
#   shapes:   T = 2K, 8K, 32K of a 2-layer Llama h 512, 8 heads, f 1376 (configs/peer_llama.json), batch
#             1, and `make run`'s shape, batch 8 x 256 of llama-demo (configs/llama_demo.json).
#   memory:   the longest T each fits in 16 GiB — torch from the slope of its peak RSS between 8K and
#             32K (with and without gradient checkpointing), fpdt --offload disk from dry runs.
# Both tools run with OMP_WAIT_POLICY=passive unless the caller sets it (they share libgomp, whose
# spinning threads otherwise steal the time slices of their own preempted team on a shared machine).
# Prints medians, ratios and the load range — of wall time, and of the process's CPU time over the step,
# which a shared machine moves less (both tools wait passively). bench/results/peer_torch.json keeps the
# shapes of earlier runs that this one did not run (each with its date); the table lists them all.
#   usage: bench/peer_torch.sh [BUILD_DIR]      RUNS=3 SHAPES="t2k t8k t32k demo" MEMORY=1 TORCH_BF16=1 override;
#          TOOLS="torch-bf16 fpdt-bf16" runs only those rows (of torch torch-bf16 fpdt fpdt-resident fpdt-bf16)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
fpdt=$build/fpdt
runs=${RUNS:-3}
shapes=${SHAPES:-"t2k t8k t32k demo"}
threads=2
torch_bf16=${TORCH_BF16:-1}
fpdt_bf16=0  # fpdt's own bf16 rows, once `fpdt train` has --precision (issue 28)
"$fpdt" train --help 2>&1 | grep -q -- '--precision' && fpdt_bf16=1
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
python=$(tools/reference_env.sh)
bash scripts/get_corpus.sh "$fpdt" data >/dev/null
work=$(mktemp -d /tmp/fpdt_peer.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p bench/results
results=$work/results.jsonl
: > "$results"

# shape → config, batch, seq, fpdt's pipeline options: one chunk, everything resident, up to 8K; at 32K,
# where the point is memory flat in T, chunks of 4K offloaded to a file (the page cache holds it if RAM
# allows, but it is not the process's: its RSS is the compute tier's). At 32K fpdt also runs a second
# way, "fpdt-resident": the same 4K chunks kept in RAM (--offload none), its fastest configuration —
# a row of its own, so the speed ratio and the RSS ratio each say which fpdt they are of.
shape_args() {
  case $1 in
    t2k) echo "bench/configs/peer_llama.json 1 2048" ;;
    t8k) echo "bench/configs/peer_llama.json 1 8192" ;;
    t32k) echo "bench/configs/peer_llama.json 1 32768 --chunk-tokens 4096 --offload disk:$work" ;;
    demo) echo "bench/configs/llama_demo.json 8 256" ;;
    *) echo "unknown shape $1" >&2; exit 1 ;;
  esac
}

steps_of() { if [ "$1" = t32k ]; then echo 1; else echo 2; fi; }

run_torch() {  # shape run precision [--checkpointing]
  local config batch seq
  read -r config batch seq _ <<< "$(shape_args "$1")"
  "$python" bench/peer_torch.py --config "$config" --batch "$batch" --seq "$seq" --threads $threads --steps "$(steps_of "$1")" \
    --precision "$3" ${4:-} 2> "$work/torch_$1_$2_$3.err" | tail -n 1 |
    python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d['shape']='$1'; d['run']=$2; print(json.dumps(d))" \
    >> "$results"
}

run_fpdt() {  # shape run [resident|bf16]
  local config batch seq extra out tool=fpdt
  read -r config batch seq extra <<< "$(shape_args "$1")"
  if [ "${3:-}" = resident ]; then extra=${extra/--offload disk:$work/--offload none}; tool=fpdt-resident; fi
  if [ "${3:-}" = bf16 ]; then extra="$extra --precision bf16"; tool=fpdt-bf16; fi
  out=$work/${tool}_$1_$2
  # shellcheck disable=SC2086
  "$fpdt" train --model "$config" --data data/kjv --batch "$batch" --seq "$seq" --steps "$(steps_of "$1")" \
    --threads $threads --eval-batches 0 --save-every 1000 --out "$out" $extra > "$out.log" 2>&1
  python3 - "$out" "$1" "$2" "$config" "$batch" "$seq" "$tool" >> "$results" <<'PY'
import json, sys
out, shape, run, config, batch, seq, tool = sys.argv[1:]
steps = [json.loads(line) for line in open(out + "/metrics.jsonl")]
final = json.loads(open(out + ".log").read().strip().splitlines()[-1])
last = steps[-1]
print(json.dumps({"tool": tool, "shape": shape, "run": int(run), "config": config, "batch": int(batch),
                  "seq": int(seq), "step_seconds": last["step_seconds"], "cpu_seconds": last["cpu_seconds"],
                  "steps_seconds": [s["step_seconds"] for s in steps], "tokens_per_second": last["tokens_per_second"],
                  "peak_rss_bytes": final["peak_rss_bytes"], "mfu": last["mfu"], "sgemm_ratio": last["sgemm_ratio"],
                  "loss": last["loss"], "load_average": last["load_average"]}))
PY
  rm -rf "$out"
}

for shape in $shapes; do
  for run in $(seq 1 "$runs"); do
    before=$(wc -l < "$results")
    # the runs of one round in a rotated order (each goes first once in every len(order) rounds)
    order=(torch fpdt); [ "$shape" = t32k ] && order+=(fpdt-resident)
    [ "$torch_bf16" = 1 ] && order+=(torch-bf16)
    [ "$fpdt_bf16" = 1 ] && order+=(fpdt-bf16)
    if [ -n "${TOOLS:-}" ]; then  # the caller's rows, in the caller's order, of those this shape has
      chosen=(); for tool in $TOOLS; do [[ " ${order[*]} " == *" $tool "* ]] && chosen+=("$tool"); done
      order=("${chosen[@]}")
    fi
    for i in $(seq 0 $((${#order[@]} - 1))); do
      case ${order[$(((i + run - 1) % ${#order[@]}))]} in
        torch) run_torch "$shape" "$run" fp32 ;;
        torch-bf16) run_torch "$shape" "$run" bf16 ;;
        fpdt) run_fpdt "$shape" "$run" ;;
        fpdt-resident) run_fpdt "$shape" "$run" resident ;;
        fpdt-bf16) run_fpdt "$shape" "$run" bf16 ;;
      esac
    done
    tail -n +$((before + 1)) "$results" | python3 -c "
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    print(f\"{d['shape']:5} run {d['run']} {d['tool']:13} step {d['step_seconds']:8.3f} s  {d['tokens_per_second']:9.0f} tok/s  \"
          f\"RSS {d['peak_rss_bytes'] / 2**20:7.0f} MiB  load {d['load_average']:.2f}\", file=sys.stderr)"
  done
done

# Memory: torch's peak RSS at 8K and 32K with and without checkpointing (one run each; the runs above
# give the 'without' points when they include t8k and t32k), fpdt dry runs with --offload disk.
if [ "${MEMORY:-1}" = 1 ]; then
  for shape in t8k t32k; do
    grep -q "\"tool\": \"torch\".*\"checkpointing\": false.*\"shape\": \"$shape\"" "$results" || run_torch "$shape" 0 fp32
    run_torch "$shape" 0 fp32 --checkpointing
  done
  for seq in 32768 1048576 4194304; do
    "$fpdt" train --model bench/configs/peer_llama.json --data data/kjv --batch 1 --seq $seq --threads $threads \
      --chunk-tokens 4096 --offload "disk:$work" --dry-run --out "$work/dry_$seq" > "$work/dry_$seq.log" 2>&1
    python3 - "$work/dry_$seq.log" $seq >> "$results" <<'PY'
import json, sys
final = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
final.update({"tool": "fpdt-dry", "seq": int(sys.argv[2])})
print(json.dumps(final))
PY
  done
fi

python3 - "$results" "$runs" "$OMP_WAIT_POLICY" <<'PY' | tee bench/results/peer_torch.txt
import datetime, json, os, shutil, statistics, sys, tempfile
rows = [json.loads(line) for line in open(sys.argv[1])]
runs, policy = int(sys.argv[2]), sys.argv[3]
timed = [r for r in rows if r.get("run", 0) > 0]
path = "bench/results/peer_torch.json"
summary = json.load(open(path)) if os.path.exists(path) else {}
summary.update({"omp_wait_policy": policy})
summary.setdefault("shapes", {})
summary.setdefault("memory", {})
today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
def med(shape, tool, key):
    values = [r[key] for r in timed if r["shape"] == shape and r["tool"] == tool and r.get(key) is not None]
    return statistics.median(values) if values else None
peers = ("torch", "torch-bf16")
for shape in dict.fromkeys(r["shape"] for r in timed):
    loads = [r["load_average"] for r in timed if r["shape"] == shape]
    t, tr = med(shape, "torch", "step_seconds"), med(shape, "torch", "peak_rss_bytes")
    tb = med(shape, "torch-bf16", "step_seconds")
    for tool in dict.fromkeys(r["tool"] for r in timed if r["shape"] == shape and r["tool"] not in peers):
        f, fr = med(shape, tool, "step_seconds"), med(shape, tool, "peak_rss_bytes")
        entry = {"fpdt": tool, "torch_step_seconds": t, "fpdt_step_seconds": f, "speedup": t / f if t else None,
                 "torch_tokens_per_second": med(shape, "torch", "tokens_per_second"),
                 "fpdt_tokens_per_second": med(shape, tool, "tokens_per_second"), "torch_peak_rss_bytes": tr,
                 "fpdt_peak_rss_bytes": fr, "fpdt_mfu": med(shape, tool, "mfu"),
                 "fpdt_sgemm_ratio": med(shape, tool, "sgemm_ratio"),
                 "torch_cpu_seconds": med(shape, "torch", "cpu_seconds"), "fpdt_cpu_seconds": med(shape, tool, "cpu_seconds"),
                 "torch_bf16_step_seconds": tb, "torch_bf16_over_fpdt": tb / f if tb else None,
                 "torch_bf16_cpu_seconds": med(shape, "torch-bf16", "cpu_seconds"),
                 "torch_bf16_peak_rss_bytes": med(shape, "torch-bf16", "peak_rss_bytes"),
                 "load_min": min(loads), "load_max": max(loads), "date": today, "medians_of": runs,
                 "runs": [r for r in timed if r["shape"] == shape and r["tool"] in peers + (tool,)]}
        # The plain shape's row is fpdt fp32 beside torch fp32; a run that left torch fp32 out (TOOLS) keeps
        # its fpdt row apart, so it does not replace an earlier full comparison.
        summary["shapes"][shape if tool == "fpdt" and t else f"{shape} ({tool})"] = entry
print(f"| shape | torch step s | torch bf16 step s | fpdt step s | torch / fpdt | torch bf16 / fpdt | torch tok/s | "
      f"fpdt tok/s | CPU s torch / fpdt | CPU s torch bf16 | torch RSS MiB | fpdt RSS MiB | RSS fpdt / torch | load | "
      f"runs | date |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for shape, e in summary["shapes"].items():
    t, f, tr, fr = e["torch_step_seconds"], e["fpdt_step_seconds"], e["torch_peak_rss_bytes"], e["fpdt_peak_rss_bytes"]
    tb, tb_cpu = e.get("torch_bf16_step_seconds"), e.get("torch_bf16_cpu_seconds")  # absent in earlier runs
    cpu = (f"{e['torch_cpu_seconds']:.2f} / {e['fpdt_cpu_seconds']:.2f} = {e['torch_cpu_seconds'] / e['fpdt_cpu_seconds']:.2f}"
           if e.get("fpdt_cpu_seconds") and e.get("torch_cpu_seconds") else "—")
    dash = lambda value, form: format(value, form) if value else "—"  # a row the run left out (TOOLS)
    print(f"| {shape} | {dash(t, '.3f')} | {dash(tb, '.3f')} | {f:.3f} | {dash(t and t / f, '.2f')} | {dash(tb and tb / f, '.2f')} | "
          f"{dash(e['torch_tokens_per_second'], '.0f')} | {e['fpdt_tokens_per_second']:.0f} | {cpu} | "
          f"{dash(tb_cpu, '.2f')} | {dash(tr and tr / 2**20, '.0f')} | {fr / 2**20:.0f} | {dash(tr and fr / tr, '.3f')} | "
          f"{e['load_min']:.1f}–{e['load_max']:.1f} | {e.get('medians_of', '?')} | {e.get('date', 'earlier')} |")

budget = 16 * 2**30
def longest(points):  # peak RSS = a + b·T through the 8K and 32K points; the T where it reaches 16 GiB
    (t0, r0), (t1, r1) = sorted(points)[0], sorted(points)[-1]
    slope = (r1 - r0) / (t1 - t0)
    return slope, r0 - slope * t0, int((budget - (r0 - slope * t0)) / slope)
for checkpointing in (False, True):
    points = {}
    for r in rows:
        if r["tool"] == "torch" and r.get("checkpointing") == checkpointing and r["seq"] in (8192, 32768):
            points.setdefault(r["seq"], []).append(r["peak_rss_bytes"])
    if len(points) == 2:
        slope, base, tokens = longest([(t, statistics.median(v)) for t, v in points.items()])
        name = "torch_checkpointing" if checkpointing else "torch"
        summary["memory"][name] = {"rss_bytes_per_token": slope, "rss_bytes_at_0": base, "longest_tokens_16GiB": tokens}
        print(f"{name}: peak RSS {slope / 1024:.1f} KiB per token + {base / 2**20:.0f} MiB "
              f"(8K and 32K runs) -> longest T in 16 GiB ≈ {tokens:,} tokens (extrapolated from peak RSS, not run)")
dry = sorted((r for r in rows if r["tool"] == "fpdt-dry"), key=lambda r: r["seq"])
if dry:
    per_token = dry[-1]["offload_peak_bytes"] / dry[-1]["seq"]
    free = shutil.disk_usage(tempfile.gettempdir()).free
    summary["memory"]["fpdt_offload_disk"] = {"dry_runs": dry, "disk_bytes_per_token": per_token,
                                              "disk_free_bytes": free, "longest_tokens_disk": int(free / per_token)}
    for r in dry:
        print(f"fpdt --offload disk, dry run at T = {r['seq']:,}: compute tier {r['compute_peak_bytes'] / 2**20:.0f} MiB, "
              f"offload file {r['offload_peak_bytes'] / 2**30:.1f} GiB")
    print(f"fpdt --offload disk: the compute tier is the same at every T, so 16 GiB of RAM is never the bound; "
          f"the disk is ({per_token / 1024:.1f} KiB per token, {free / 2**30:.0f} GiB free here -> "
          f"T <= {int(free / per_token):,} tokens; from dry runs)")
json.dump(summary, open(path, "w"), indent=1)
PY
