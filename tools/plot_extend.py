"""Draws the report of `fpdt extend` (its run folder's report.json) as one PNG: the training loss of every
stage, step by step; the loss by context position of every stage's last checkpoint at its S beside the base
model's on the same held-out sequences (as it is and with the stage's RoPE, when the position gate compared
them); the gates' figures against their thresholds; and the memory of each stage (compute and offload peaks).

usage: /usr/bin/python3 tools/plot_extend.py RUN_DIR/report.json OUT.png
Needs Debian's python3-matplotlib.
"""
import json
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from plot_eval import pyplot  # noqa: E402


def gate(stage, name):
    return next((g for g in stage.get("gates", []) if g["gate"] == name), None)


def draw_position(axis, stages, base_seq):
    for index, stage in enumerate(stages):
        position = gate(stage, "position_loss")
        if position is None:
            continue
        colour = f"C{index}"  # the stage's colour in the training panel
        details = position["details"]
        series = [(f"stage {stage['name']} (trained)", details, "-")]
        if "base_with_rope" in details:
            series.append((f"base + stage {stage['name']}'s RoPE, untrained", details["base_with_rope"], "--"))
        if "base" in details and index == len(stages) - 1:
            series.append(("base as it is", details["base"], ":"))
        for label, figures, style in series:
            buckets = [b for b in figures["buckets"] if b["tokens"] > 0 and b["first"] >= 16]
            xs = [(b["first"] * b["last"]) ** 0.5 for b in buckets]
            axis.plot(xs, [b["loss"] for b in buckets], style, marker="o", markersize=3, label=label,
                      color="tab:red" if label == "base as it is" else colour)
    axis.axvline(base_seq, color="grey", linewidth=0.8)
    axis.text(base_seq, axis.get_ylim()[1], " base context", va="top", fontsize=7, color="grey")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("context position (tokens)")
    axis.set_ylabel("loss (nats/token)")
    axis.set_title("loss by context position of held-out text")
    axis.legend(fontsize=6)


def main(report_path, out_path):
    report = json.load(open(report_path))
    stages = report["stages"]
    base_seq = report["recipe"]["base_seq"]
    plt = pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    # Training loss, the stages one after another.
    axis, offset = axes[0][0], 0
    for stage in stages:
        steps = stage.get("loss_by_step", [])
        if steps:
            axis.plot([offset + s for s, _ in steps], [loss for _, loss in steps], marker=".",
                      label=f"{stage['name']}: S {stage['seq']:,}")
        offset += stage["steps"]
    axis.set_xlabel("optimizer step (stages in order)")
    axis.set_ylabel("training loss")
    axis.set_title("training")
    axis.legend(fontsize=7)
    draw_position(axes[0][1], stages, base_seq)
    # The gates' figures, each beside its threshold's side.
    axis = axes[1][0]
    rows = []
    for stage in stages:
        for g in stage.get("gates", []):
            figure_text = "n/a" if g["figure"] is None else f"{g['figure']:.3f}"
            rows.append([stage["name"], g["gate"], figure_text, g["threshold"],
                         "passed" if g["passed"] else "FAILED", g["policy"]])
    axis.axis("off")
    if rows:
        table = axis.table(cellText=rows, colLabels=["stage", "gate", "figure", "threshold", "verdict", "policy"],
                           loc="center", cellLoc="left")
        table.auto_set_font_size(False)
        table.set_fontsize(7)
        table.scale(1, 1.3)
    axis.set_title("gates")
    # Memory per stage.
    axis = axes[1][1]
    names = [s["name"] for s in stages]
    mib = 2.0 ** 20
    xs = range(len(stages))
    axis.bar([x - 0.2 for x in xs], [s["compute_peak_bytes"] / mib for s in stages], width=0.4, label="compute peak")
    axis.bar([x + 0.2 for x in xs], [s["offload_peak_bytes"] / mib for s in stages], width=0.4, label="offload peak")
    axis.set_xticks(list(xs))
    axis.set_xticklabels([f"{n}\n" + s["layout"].replace(", ", "\n") for n, s in zip(names, stages)], fontsize=6)
    axis.set_ylabel("MiB per rank")
    axis.set_title("memory of a training step")
    axis.legend(fontsize=7)
    figure.suptitle(f"fpdt extend {report['recipe']['recipe']}: {report['recipe']['model']} "
                    f"(context {base_seq:,})", fontsize=9)
    figure.tight_layout()
    figure.savefig(out_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
