"""Draws and summarises what `fpdt eval` wrote: the loss by context position of one or more models,
and the passkey-retrieval heat map.

usage: /usr/bin/python3 tools/plot_eval.py loss OUT.png LABEL=loss_by_position.json ... [--mark=POS=TEXT ...]
       /usr/bin/python3 tools/plot_eval.py passkey OUT.png passkey.json
       /usr/bin/python3 tools/plot_eval.py range FIRST LAST LABEL=loss_by_position.json ...
`loss` and `passkey` need Debian's python3-matplotlib; `range` prints, per model, the mean loss over the
context positions FIRST..LAST (token-weighted over the buckets inside that range) and needs nothing.
"""
import json
import sys


def load_labelled(args):
    runs = []
    for arg in args:
        label, _, path = arg.partition("=")
        runs.append((label, json.load(open(path))))
    return runs


def range_mean(result, first, last):
    """Token-weighted mean loss of the buckets lying inside context positions [first, last]."""
    buckets = [b for b in result["buckets"] if b["first"] >= first and b["last"] <= last]
    tokens = sum(b["tokens"] for b in buckets)
    if tokens == 0:
        raise SystemExit(f"no bucket of {result['checkpoint']} lies inside positions {first}..{last}")
    return sum(b["loss_sum"] for b in buckets) / tokens


def command_range(first, last, args):
    for label, result in load_labelled(args):
        print(f"{label}: {range_mean(result, int(first), int(last)):.4f}")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def command_loss(out_path, args):
    marks = [a[len("--mark="):] for a in args if a.startswith("--mark=")]
    runs = load_labelled([a for a in args if not a.startswith("--mark=")])
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7.5, 4.5))
    for label, result in runs:
        buckets = [b for b in result["buckets"] if b["tokens"] > 0]
        xs = [(b["first"] * b["last"]) ** 0.5 for b in buckets]  # the bucket's middle on a log axis
        ys = [b["mean_loss"] for b in buckets]
        axis.plot(xs, ys, marker="o", markersize=4, label=f"{label} (mean {result['mean_loss']:.3f})")
    for mark in marks:
        position, _, text = mark.partition("=")
        axis.axvline(float(position), color="gray", linestyle=":")
        axis.annotate(text, (float(position), 1), xycoords=("data", "axes fraction"), rotation=90,
                      va="top", ha="right", fontsize=8, color="gray")
    seq = max(result["seq"] for _, result in runs)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("context position (tokens seen; power-of-two buckets)")
    axis.set_ylabel("held-out loss (nats/token)")
    sequences = runs[0][1]["sequences"]
    axis.set_title(f"loss by context position: {sequences} held-out sequences of {seq:,} tokens")
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out_path, dpi=120)


def command_passkey(out_path, path):
    result = json.load(open(path))
    cells = result["cells"]
    lengths = sorted({c["length"] for c in cells})
    depths = sorted({c["depth"] for c in cells})
    grid = [[None] * len(lengths) for _ in depths]
    for c in cells:
        grid[depths.index(c["depth"])][lengths.index(c["length"])] = c
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(1.2 * len(lengths) + 2.5, 0.6 * len(depths) + 2))
    image = axis.imshow([[c["accuracy"] for c in row] for row in grid], vmin=0, vmax=1, cmap="RdYlGn",
                        aspect="auto")
    for i, row in enumerate(grid):
        for j, c in enumerate(row):
            axis.text(j, i, f"{c['correct']}/{c['trials']}\n{c['answer_loss']:.2f}", ha="center", va="center",
                      fontsize=7)
    axis.set_xticks(range(len(lengths)), [f"{n:,}" for n in lengths])
    axis.set_yticks(range(len(depths)), [f"{d:.2f}" for d in depths])
    axis.set_xlabel("prompt length (tokens)")
    axis.set_ylabel("depth of the number")
    axis.set_title("passkey retrieval: greedy answers right / prompts\n(answer loss, nats/token)", fontsize=9)
    figure.colorbar(image, label="accuracy")
    figure.tight_layout()
    figure.savefig(out_path, dpi=120)


def main(argv):
    if len(argv) >= 3 and argv[0] == "loss":
        command_loss(argv[1], argv[2:])
    elif len(argv) == 3 and argv[0] == "passkey":
        command_passkey(argv[1], argv[2])
    elif len(argv) >= 4 and argv[0] == "range":
        command_range(argv[1], argv[2], argv[3:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
