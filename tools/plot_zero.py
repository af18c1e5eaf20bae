"""Plots bench/results/zero_speed.json (bench/zero_speed.sh): rank 0's compute-tier peak (dry runs) and
the step time (mpirun runs; the median over the rounds) against the number of ranks W, one line per ZeRO
stage. Given several result files (extra rounds of the same grid), it pools their runs; the dry runs and
the titles are the first file's.

usage: python3 tools/plot_zero.py RESULTS.json [MORE.json ...] OUT.png   (matplotlib: PY=$(tools/reference_env.sh))
"""
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def by_rank(rows, stage, value):
    ranks = sorted({r["W"] for r in rows if r["zero"] == stage})
    return ranks, [value([r for r in rows if r["zero"] == stage and r["W"] == w]) for w in ranks]


def main(results_paths, out_path):
    results = json.load(open(results_paths[0]))
    for path in results_paths[1:]:
        results["runs"] += json.load(open(path))["runs"]
    figure, (memory, time) = plt.subplots(1, 2, figsize=(11, 4.5))
    for stage, color in zip(range(4), ("tab:red", "tab:orange", "tab:green", "tab:blue")):
        ranks, peaks = by_rank(results["dry_runs"], stage, lambda rs: rs[0]["result"]["compute_peak_bytes"] / 2**20)
        memory.plot(ranks, peaks, "-o", color=color, label=f"ZeRO {stage}")
        ranks, seconds = by_rank(results["runs"], stage, lambda rs: statistics.median(r["step_seconds"] for r in rs))
        time.plot(ranks, seconds, "-o", color=color, label=f"ZeRO {stage}")
    for axis in (memory, time):
        axis.set_xscale("log", base=2)
        axis.set_xticks([1, 2, 4], ["1", "2", "4"])
        axis.set_xlabel("ranks W (sequence-parallel)")
        axis.legend(fontsize=8)
    memory.set_ylabel("compute-tier peak of rank 0 (MiB)")
    time.set_ylabel("step time (s; 2 cores shared with other jobs)")
    memory.set_title(f"100M Llama, S = {results['seq_memory'] // 1024}K: compute peak (dry run)")
    time.set_title(f"S = {results['seq_time'] // 1024}K: step time (median of the rounds)")
    figure.tight_layout()
    figure.savefig(out_path, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1:-1], sys.argv[-1])
