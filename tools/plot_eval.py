"""Draws and summarises what `fpdt eval` wrote: the loss by context position of one or more models,
the passkey-retrieval heat map, and RULER's scores (task x length).

usage: /usr/bin/python3 tools/plot_eval.py loss OUT.png LABEL=loss_by_position.json ... [--mark=POS=TEXT ...]
       /usr/bin/python3 tools/plot_eval.py passkey OUT.png passkey.json
       /usr/bin/python3 tools/plot_eval.py report OUT.png LABEL=EVAL_DIR ... [--mark=POS=TEXT ...]
       /usr/bin/python3 tools/plot_eval.py ruler OUT.png ruler.json ...
       /usr/bin/python3 tools/plot_eval.py range FIRST LAST LABEL=loss_by_position.json ...
`report` draws one figure of several evaluations (each EVAL_DIR an `fpdt eval --out` folder): their loss
by position on top, their passkey grids below. `ruler` draws RULER's scores as a heat map (a row per task and
the average, a column per length) titled with the effective length; several ruler.json files (lengths run
apart, e.g. with another RoPE scaling at each) make one map, their effective length taken over them all.
`loss`, `passkey`, `report` and `ruler` need Debian's python3-matplotlib; `range` prints, per model, the mean
loss over the context positions FIRST..LAST (token-weighted over the buckets inside that range) and needs
nothing.
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


def split_marks(args):
    """(--mark=POS=TEXT values, the other arguments)."""
    return [a[len("--mark="):] for a in args if a.startswith("--mark=")], [a for a in args if not a.startswith("--mark=")]


def draw_loss(axis, runs, marks, first_position=1):
    """The loss by position of runs [(label, loss_by_position.json)] on one log-x axis, from the bucket
    that begins at first_position on (the first few positions' loss, a few tokens each, is mostly noise)."""
    for label, result in runs:
        buckets = [b for b in result["buckets"] if b["tokens"] > 0 and b["first"] >= first_position]
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
    axis.set_title(f"loss by context position: {sequences} held-out sequence{'s' if sequences > 1 else ''} "
                   f"of {seq:,} tokens" + (f" (positions from {first_position:,})" if first_position > 1 else ""),
                   fontsize=10)
    axis.grid(True, which="major", alpha=0.3)
    axis.legend(fontsize=8)


def command_loss(out_path, args):
    marks, labelled = split_marks(args)
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7.5, 4.5))
    draw_loss(axis, load_labelled(labelled), marks)
    figure.tight_layout()
    figure.savefig(out_path, dpi=120)


def passkey_grid(result):
    """(prompt lengths, depths, cells[depth][length]) of a passkey.json."""
    cells = result["cells"]
    lengths = sorted({c["length"] for c in cells})
    depths = sorted({c["depth"] for c in cells})
    grid = [[None] * len(lengths) for _ in depths]
    for c in cells:
        grid[depths.index(c["depth"])][lengths.index(c["length"])] = c
    return lengths, depths, grid


def draw_passkey(axis, result, title):
    """A passkey grid as a heat map of accuracy, each cell's right/prompts and answer loss written in it."""
    lengths, depths, grid = passkey_grid(result)
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
    axis.set_title(title, fontsize=9)
    return image


def command_passkey(out_path, path):
    result = json.load(open(path))
    lengths, depths, _ = passkey_grid(result)
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(1.2 * len(lengths) + 2.5, 0.6 * len(depths) + 2))
    image = draw_passkey(axis, result, "passkey retrieval: greedy answers right / prompts\n(answer loss, nats/token)")
    figure.colorbar(image, label="accuracy")
    figure.tight_layout()
    figure.savefig(out_path, dpi=120)


def command_report(out_path, args):
    """Loss by position of every evaluation across the top, one passkey grid per evaluation below."""
    marks, labelled = split_marks(args)
    runs = []
    for arg in labelled:
        label, _, folder = arg.partition("=")
        runs.append((label, json.load(open(f"{folder}/loss_by_position.json")),
                     json.load(open(f"{folder}/passkey.json"))))
    plt = pyplot()
    figure = plt.figure(figsize=(max(7.5, 3.2 * len(runs)), 7.2))
    grid = figure.add_gridspec(2, len(runs), height_ratios=[1.6, 1])
    draw_loss(figure.add_subplot(grid[0, :]), [(label, loss) for label, loss, _ in runs], marks, first_position=64)
    for n, (label, _, passkey) in enumerate(runs):
        axis = figure.add_subplot(grid[1, n])
        draw_passkey(axis, passkey, f"passkey: {label}\nright/prompts, answer loss")
        if n > 0:
            axis.set_ylabel("")
    figure.tight_layout()
    figure.savefig(out_path, dpi=100)


def merged_ruler(paths):
    """One ruler.json's fields over several runs of the same tasks at different lengths: their cells and
    averages side by side, and the effective lengths over them all (RULER's: the longest length such that
    the average is at least the threshold there and at every shorter length; 0 when the first falls short)."""
    results = [json.load(open(path)) for path in paths]
    tasks = results[0]["tasks"]
    for path, result in zip(paths, results):
        if result["tasks"] != tasks:
            sys.exit(f"plot_eval.py: {path} has the tasks {result['tasks']}, {paths[0]} {tasks}: "
                     "one map needs the same")
    lengths = sorted(length for result in results for length in result["lengths"])
    if len(set(lengths)) != len(lengths):
        sys.exit(f"plot_eval.py: a length is in more than one of {', '.join(paths)}")
    averages = sorted((a for result in results for a in result["averages"]), key=lambda a: a["length"])

    def effective(threshold):
        length = 0
        for entry in averages:
            if entry["average"] < threshold:
                break
            length = entry["length"]
        return {"threshold": threshold, "length": length}

    samples = sorted({result["samples_per_cell"] for result in results})
    return {"tasks": tasks, "lengths": lengths, "cells": [c for result in results for c in result["cells"]],
            "averages": averages, "samples_per_cell": "-".join(str(n) for n in samples),
            "effective_length": effective(results[0]["effective_length"]["threshold"]),
            "effective_length_at_threshold": effective(results[0]["effective_length_at_threshold"]["threshold"])}


def ruler_grid(result):
    """(tasks + ["average"], lengths, scores[row][column]) of a ruler.json."""
    tasks, lengths = result["tasks"], result["lengths"]
    scores = {(c["task"], c["length"]): c["score"] for c in result["cells"]}
    rows = [[scores[(task, length)] for length in lengths] for task in tasks]
    rows.append([a["average"] for a in result["averages"]])
    return tasks + ["average"], lengths, rows


def effective_text(entry, lengths):
    length = entry["length"]
    return f"{length:,}" if length > 0 else f"below {lengths[0]:,}"


def command_ruler(out_path, paths):
    result = merged_ruler(paths)
    rows, lengths, scores = ruler_grid(result)
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(1.1 * len(lengths) + 3.5, 0.38 * len(rows) + 2))
    image = axis.imshow(scores, vmin=0, vmax=100, cmap="RdYlGn", aspect="auto")
    for i, row in enumerate(scores):
        for j, score in enumerate(row):
            axis.text(j, i, f"{score:.1f}", ha="center", va="center", fontsize=8,
                      fontweight="bold" if rows[i] == "average" else "normal")
    axis.axhline(len(rows) - 1.5, color="black", linewidth=1)
    axis.set_xticks(range(len(lengths)), [f"{n:,}" for n in lengths])
    axis.set_yticks(range(len(rows)), rows)
    axis.set_xlabel("target length (prompt + answer tokens)")
    effective = result["effective_length"]
    title = (f"RULER: {result['samples_per_cell']} prompts per cell, string_match_all x 100\n"
             f"effective length (average >= {effective['threshold']}): {effective_text(effective, lengths)}")
    other = result["effective_length_at_threshold"]
    if other["threshold"] != effective["threshold"]:
        title += f"; at {other['threshold']}: {effective_text(other, lengths)}"
    axis.set_title(title, fontsize=9)
    figure.colorbar(image, label="score")
    figure.tight_layout()
    figure.savefig(out_path, dpi=120)


def main(argv):
    if len(argv) >= 3 and argv[0] == "loss":
        command_loss(argv[1], argv[2:])
    elif len(argv) == 3 and argv[0] == "passkey":
        command_passkey(argv[1], argv[2])
    elif len(argv) >= 3 and argv[0] == "report":
        command_report(argv[1], argv[2:])
    elif len(argv) >= 3 and argv[0] == "ruler":
        command_ruler(argv[1], argv[2:])
    elif len(argv) >= 4 and argv[0] == "range":
        command_range(argv[1], argv[2], argv[3:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
