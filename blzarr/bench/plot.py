"""A picture of a benchmark report: one horizontal bar per operation and peer, the peer/blzarr ratio
on a log scale with 1.0 marked, in one panel per group (in memory, on disk, object storage, queries).

matplotlib is optional: it is imported only here, when a plot is asked for.
"""

import math
import os

from blzarr.bench import harness

# which panel an operation's row goes to; an op not listed (a future one) goes to its dataset's panel
GROUPS = (
    ("in memory", ("create", "read_all", "scalars", "slices", "fancy", "sum", "iter", "ct_create",
                   "ct_todataframe")),
    ("on disk", harness.DISK_OPS),
    ("object storage (local S3 server)", harness.S3_OPS),
    ("queries", ("where", "select", "eval_sum", "ct_where", "ct_fetchwhere")),
)
FORMATS = (".png", ".svg")
# one colour per peer, the same in every plot (matplotlib's tab10 colours)
COLOURS = {"bcolz": "#1f77b4", "blosc2": "#ff7f0e", "zarr": "#2ca02c", "numpy": "#d62728"}
SPARE = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


class PlotError(Exception):
    """A plot cannot be made: matplotlib is missing, the file name or the report is unusable."""


def require_matplotlib():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotError("--plot needs matplotlib, which is not installed: "
                        "pip install matplotlib (or pip install \"blzarr[plot]\")") from None
    return Figure


def check_path(path):
    """Raise PlotError unless `path` ends in a format the plot is written in and its folder exists."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise PlotError(f"--plot {path!r}: the file name must end in .png or .svg")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise PlotError(f"--plot {path!r}: the folder {folder!r} does not exist")


def panels(report):
    """[(title, [(row label, {peer: ratio})...])...] of the groups that have a ratio to draw."""
    out = []
    placed = {op for _, ops in GROUPS for op in ops}
    for title, ops in GROUPS:
        rows = []
        for r in report.get("results", ()):
            if r["op"] in ops or (title == "in memory" and r["op"] not in placed):
                ratios = {p: q for p, q in (r.get("ratios") or {}).items()
                          if q is not None and math.isfinite(q) and q > 0}
                if ratios:
                    label = r["label"] if r["dataset"] == "table" else f"{r['dataset']}: {r['label']}"
                    rows.append((label, ratios))
        if rows:
            out.append((title, rows))
    return out


def draw(report, path):
    """Write the plot of `report` (a dict as ``--json`` writes it) to `path` (.png or .svg); return
    the matplotlib Figure."""
    check_path(path)
    Figure = require_matplotlib()
    groups = panels(report)
    if not groups:
        raise PlotError("the report has no peer/blzarr ratio to plot (was only blzarr run?)")
    peers = [p for p in report.get("peers", ()) if p != "blzarr"]
    for _, rows in groups:
        peers += [p for _, ratios in rows for p in ratios if p not in peers]
    colours = dict(COLOURS)
    spare = iter(SPARE * 4)
    for p in peers:
        colours.setdefault(p, next(spare, "#17becf"))
    heights = [len(rows) * (0.09 * len(peers) + 0.1) + 0.5 for _, rows in groups]
    total = sum(heights) + 0.9
    fig = Figure(figsize=(9.0, total))
    axes = fig.subplots(len(groups), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    lo = min(q for _, rows in groups for _, r in rows for q in r.values())
    hi = max(q for _, rows in groups for _, r in rows for q in r.values())
    lo, hi = min(lo, 1.0) / 1.6, max(hi, 1.0) * 1.6
    bar = 0.8 / len(peers)
    for ax, (title, rows) in zip(axes, groups):
        for k, peer in enumerate(peers):
            ys = [i + (k - (len(peers) - 1) / 2) * bar for i, (_, r) in enumerate(rows) if peer in r]
            xs = [r[peer] for _, r in rows if peer in r]
            if ys:
                ax.barh(ys, xs, height=bar * 0.9, color=colours[peer], label=peer, left=0)
        ax.axvline(1.0, color="black", linewidth=1.0)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([label for label, _ in rows], fontsize=7.5)
        ax.set_ylim(len(rows) - 0.5, -0.5)          # the first row on top, as in the table
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(axis="x", which="major", linewidth=0.4, alpha=0.6)
        ax.tick_params(axis="x", labelsize=8)
    axes[-1].set_xlabel("peer time / blzarr time (log scale; right of the 1.0 line: blzarr is faster)",
                        fontsize=9)
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="upper right", bbox_to_anchor=(1.0, 1.0 - 0.25 / total),
               ncol=len(labels), fontsize=8, frameon=False)
    s = report.get("settings", {})
    m = report.get("machine", {})
    fig.suptitle(f"blzarr vs its peers: n={s.get('n', 0):,} float64, medians of up to "
                 f"{s.get('repeats', '?')} runs, {m.get('nproc', '?')} cpus"
                 + (f", commit {m['commit']}" if m.get("commit") else ""), fontsize=10, x=0.02,
                 y=1.0 - 0.1 / total, ha="left", va="top")
    fig.tight_layout(rect=(0, 0, 1, 1.0 - 0.55 / total))
    fig.savefig(path, dpi=110)
    return fig


def main(argv=None):
    """``python -m blzarr.bench.plot REPORT.json OUT.png``: the plot of a saved ``--json`` report."""
    import argparse
    import json
    import sys
    ap = argparse.ArgumentParser(prog="python -m blzarr.bench.plot",
                                 description="Draw a saved `blzarr bench --json` report.")
    ap.add_argument("report", help="a JSON report written by `blzarr bench --json`")
    ap.add_argument("out", help="the image to write (.png or .svg)")
    args = ap.parse_args(argv)
    try:
        with open(args.report, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError) as exc:
        ap.exit(1, f"python -m blzarr.bench.plot: cannot read the report {args.report!r}: {exc}\n")
    try:
        draw(report, args.out)
    except PlotError as exc:
        ap.exit(1, f"python -m blzarr.bench.plot: {exc}\n")
    print(f"plot: {args.out}", file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
