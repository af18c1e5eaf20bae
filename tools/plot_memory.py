"""Plots bench/results/fpdt_memory.json: compute-tier peak per rank against sequence length.

usage: /usr/bin/python3 tools/plot_memory.py RESULTS.json OUT.png   (needs python3-matplotlib)
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(results_path, out_path):
    results = json.load(open(results_path))
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for kind, marker, style in (("dry", "o", "-"), ("real", "x", "")):
        for mode, color in (("fpdt", "tab:blue"), ("ulysses", "tab:red")):
            points = sorted((r["seq"], r["result"]["compute_peak_bytes"] / 2**20)
                            for r in results[kind] if r["mode"] == mode)
            if not points:
                continue
            xs, ys = zip(*points)
            axis.plot(xs, ys, style, marker=marker, color=color, label=f"{mode} ({kind} run)",
                      markersize=8 if kind == "real" else 5)
    axis.axhline(2048, color="gray", linestyle=":", label="--compute-mem 2GiB")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("sequence length S (tokens, P = 2 ranks)")
    axis.set_ylabel("compute-tier peak per rank (MiB)")
    longest = results["longest"]
    axis.set_title(f"longest S under 2GiB: ulysses {longest['ulysses']:,}, fpdt {longest['fpdt']:,}")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out_path, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
