#!/usr/bin/env python3
"""Loss curves of training runs side by side, as an SVG drawn with the standard library only (no
matplotlib on a bare machine): per run, the training loss as a thin line and the validation loss as a
bold line with markers; then a summary of the final validation losses against the first run's.
The right panel repeats the later steps on a scale of their own, where the curves are close.
Reads the CSVs bench/precision_curves.sh writes (step,loss,val_loss,step_seconds,load_average).
  usage: bench/plot_curves.py OUT.svg TITLE LABEL=RUN.csv [LABEL=RUN.csv ...]"""
import csv
import math
import statistics
import sys
from xml.sax.saxutils import escape

PANEL_W, PANEL_H = 420, 360                 # each of the two panels' plot area
LEFT, GAP, TOP, BOTTOM = 60, 70, 60, 50    # margins: left of each panel, between them, above, below
WIDTH, HEIGHT = 2 * (LEFT + PANEL_W) + GAP + 20, TOP + PANEL_H + BOTTOM
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
ZOOM_FROM = 0.25  # the right panel: the steps from this fraction of the run on, on a scale of their own


def read_run(path):
    """(training points, validation points, step seconds, load averages) of one run's CSV."""
    train, val, seconds, loads = [], [], [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = int(row["step"])
            if row["loss"]:
                train.append((step, float(row["loss"])))
                seconds.append(float(row["step_seconds"]))
                loads.append(float(row["load_average"]))
            if row["val_loss"]:
                val.append((step, float(row["val_loss"])))
    if not val:
        sys.exit(f"[plot_curves] {path} has no validation loss; hint: run with --eval-batches > 0")
    return train, val, seconds, loads


def nice_ticks(low, high, count=6):
    """Round tick values covering [low, high]: steps of 1, 2 or 5 times a power of ten."""
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    return [first + i * step for i in range(int(math.ceil((high - first) / step)) + 1)]


def panel(out, left, runs, first_step, caption):
    """One panel at x = left: every run's points from first_step on, axes scaled to them."""
    runs = [(label, [p for p in train if p[0] >= first_step], [p for p in val if p[0] >= first_step])
            for label, train, val in runs]
    points = [p for _, train, val in runs for p in train + val]
    x_ticks = nice_ticks(first_step, max(s for s, _ in points))
    y_ticks = nice_ticks(min(v for _, v in points), max(v for _, v in points))
    x_min, x_max, y_min, y_max = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def at(step, value):
        return left + PANEL_W * (step - x_min) / (x_max - x_min), TOP + PANEL_H * (y_max - value) / (y_max - y_min)

    def polyline(pts, colour, width, opacity):
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in (at(s, v) for s, v in pts))
        return (f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="{width}" '
                f'stroke-opacity="{opacity}"/>')

    out.append(f'<text x="{left + PANEL_W / 2}" y="{TOP - 10}" text-anchor="middle">{escape(caption)}</text>')
    for tick in x_ticks:  # vertical grid lines and step labels
        x, _ = at(tick, y_min)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + PANEL_H}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + PANEL_H + 18}" text-anchor="middle">{tick:g}</text>')
    for tick in y_ticks:  # horizontal grid lines and loss labels
        _, y = at(x_min, tick)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + PANEL_W}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
    out.append(f'<rect x="{left}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="black"/>')
    out.append(f'<text x="{left + PANEL_W / 2}" y="{HEIGHT - 12}" text-anchor="middle">optimizer step</text>')
    out.append(f'<text transform="translate({left - 42} {TOP + PANEL_H / 2}) rotate(-90)" text-anchor="middle">'
               f'loss (nats/token)</text>')
    for i, (label, train, val) in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        out.append(polyline(train, colour, 1, 0.35))
        out.append(polyline(val, colour, 2.5, 1))
        out.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>'
                   for x, y in (at(s, v) for s, v in val))


def svg(title, runs):
    """The SVG text: runs is [(label, training points, validation points)]; the whole run on the left,
    its later part on the right (where the curves are close), and one legend."""
    last = max(s for _, train, val in runs for s, _ in train + val)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>']
    panel(out, LEFT, runs, 0, "every step")
    zoom_from = round(last * ZOOM_FROM)
    panel(out, 2 * LEFT + PANEL_W + GAP, runs, zoom_from, f"from step {zoom_from}")
    for i, (label, _, _) in enumerate(runs):  # the legend, in the left panel's top right corner
        colour = COLOURS[i % len(COLOURS)]
        for j, (kind, width, opacity) in enumerate((("validation", 2.5, 1), ("training", 1, 0.35))):
            y = TOP + 16 + (2 * i + j) * 18
            x = LEFT + PANEL_W - 170
            out.append(f'<line x1="{x}" y1="{y}" x2="{x + 28}" y2="{y}" stroke="{colour}" '
                       f'stroke-width="{width}" stroke-opacity="{opacity}"/>')
            out.append(f'<text x="{x + 36}" y="{y + 4}">{escape(label)} {kind}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 4 or any("=" not in arg for arg in sys.argv[3:]):
        sys.exit(__doc__)
    out_path, title = sys.argv[1], sys.argv[2]
    runs = []
    for arg in sys.argv[3:]:
        label, path = arg.split("=", 1)
        runs.append((label, *read_run(path)))
    with open(out_path, "w") as f:
        f.write(svg(title, [(label, train, val) for label, train, val, _, _ in runs]))
    base = runs[0][2][-1]
    for label, _, val, seconds, loads in runs:
        step, final = val[-1]
        print(f"{label}: final validation loss {final:.4f} at step {step}, "
              f"|{label} - {runs[0][0]}| / {runs[0][0]} = {abs(final - base[1]) / base[1]:.4%}; "
              f"median step {statistics.median(seconds):.3f} s, load {min(loads):.1f}-{max(loads):.1f}")
    print(f"plot: {out_path}")


if __name__ == "__main__":
    main()
