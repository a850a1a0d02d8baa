"""Draws the benchmark page's figure from a committed ``blzarr bench --json`` report when the docs are
built, so the figure and the table it shows come from the same run and no image is committed."""

import json
import os

from sphinx.errors import ExtensionError


def draw_reports(app):
    from blzarr.bench import plot
    for src, dst in app.config.benchplot_reports.items():
        src_path = os.path.join(app.srcdir, src)
        dst_path = os.path.join(app.srcdir, dst)
        if os.path.exists(dst_path) and os.path.getmtime(dst_path) >= os.path.getmtime(src_path):
            continue
        os.makedirs(os.path.dirname(dst_path), exist_ok=True)
        try:
            with open(src_path, encoding="utf-8") as f:
                report = json.load(f)
            plot.draw(report, dst_path)
        except (OSError, ValueError, plot.PlotError) as exc:
            raise ExtensionError(f"cannot draw {dst} from {src}: {exc}") from exc


def setup(app):
    app.add_config_value("benchplot_reports", {}, "env")
    app.connect("builder-inited", draw_reports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
