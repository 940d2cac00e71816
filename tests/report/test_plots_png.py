"""The plots are written as palette PNGs: a third of the size, the same picture, and re-encoding is a no-op."""

from __future__ import annotations

import io

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


def _figure():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    x = np.arange(31)
    for k in range(8):  # as many curves and bands as a comparison of eight arms draws
        y = 0.3 + 0.02 * k + 0.01 * x
        ax.plot(x, y, marker="o", ms=3, label=f"arm {k}")
        ax.fill_between(x, y - 0.05, y + 0.05, alpha=0.2, linewidth=0)
    ax.legend()
    return fig


def test_a_plot_is_a_palette_png_of_the_same_picture(tmp_path):
    from PIL import Image

    from hacrl.report.plots import save_figure

    raw = io.BytesIO()
    fig = _figure()
    fig.tight_layout()
    fig.savefig(raw, format="png", dpi=100, facecolor="white")
    path = save_figure(_figure(), tmp_path / "curve.png")

    written, original = Image.open(path), Image.open(io.BytesIO(raw.getvalue()))
    assert written.mode == "P" and written.size == original.size
    assert path.stat().st_size < 0.6 * len(raw.getvalue())
    diff = np.abs(np.asarray(written.convert("RGB"), dtype=int) - np.asarray(original.convert("RGB"), dtype=int))
    assert diff.mean() < 0.5 and np.percentile(diff.max(axis=2), 99.9) <= 32  # 64 colours: 0.93 and 46


def test_re_encoding_a_written_plot_changes_nothing(tmp_path):
    from hacrl.report.plots import palette_png, save_figure

    data = save_figure(_figure(), tmp_path / "curve.png").read_bytes()
    assert palette_png(data) == data


def _curve_figures(summary, monkeypatch, tmp_path):
    """The curve figures ``write_plots`` draws for ``summary``, drawn and kept open."""
    import matplotlib.pyplot as plt

    from hacrl.report import plots

    figures = []

    def keep(fig, path):
        fig.tight_layout()  # as save_figure lays it out
        fig.canvas.draw()
        figures.append(fig)
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    plots.write_plots(summary, tmp_path / "plots")
    for fig in figures[len(summary["results"]):]:  # omega, cross-window
        plt.close(fig)
    return figures[:len(summary["results"])]  # curve-<agent>, drawn first


def test_a_long_legend_goes_beside_the_curves_and_a_short_one_stays_inside(monkeypatch, tmp_path):
    # eight arms and a partner's start over the left panel hid its curves (results/trust/p1-rho0.5's curve-f.png
    # before): a legend of more than LEGEND_INSIDE_MAX entries sits right of both panels, clear of them
    import json
    from pathlib import Path

    import matplotlib.pyplot as plt

    from hacrl.report.plots import LEGEND_INSIDE_MAX

    summary = json.loads((Path(__file__).parents[2] / "results/trust/p1-rho0.5/summary.json").read_text())
    assert len(summary["algorithms"]) + 1 > LEGEND_INSIDE_MAX  # eight arms, one partner's start
    widths = {}  # the left panel's width in pixels: the wider figure keeps the panels' size
    for fig in _curve_figures(summary, monkeypatch, tmp_path):
        widths.setdefault("long", fig.axes[0].get_window_extent().width)
        left, right = fig.axes
        assert left.get_legend() is None and right.get_legend() is not None
        box = right.get_legend().get_window_extent()
        assert box.x0 > right.get_window_extent().x1  # wholly right of the right panel
        assert box.x1 <= fig.bbox.x1  # and inside the figure
        plt.close(fig)

    few = {**summary, "algorithms": summary["algorithms"][:3], "diagnostics": {}}
    for fig in _curve_figures(few, monkeypatch, tmp_path):
        left, right = fig.axes
        assert right.get_legend() is None and left.get_legend() is not None
        assert left.bbox.contains(*left.get_legend().get_window_extent().p0)
        assert fig.get_size_inches()[0] == 10
        widths.setdefault("short", left.get_window_extent().width)
        plt.close(fig)
    assert widths["long"] > 0.95 * widths["short"]


def test_no_two_arms_of_a_comparison_look_alike(monkeypatch, tmp_path):
    # results/trust/p1-rho1 compares thirteen arms; matplotlib's ten colours repeat after ten, so the eleventh
    # onwards are drawn dashed: every arm's (colour, line style) is its own
    import json
    from pathlib import Path

    import matplotlib.pyplot as plt

    summary = json.loads((Path(__file__).parents[2] / "results/trust/p1-rho1/summary.json").read_text())
    assert len(summary["algorithms"]) > 10
    for fig in _curve_figures(summary, monkeypatch, tmp_path):
        for ax in fig.axes:
            lines = [line for line in ax.get_lines() if line.get_label() in summary["algorithms"]]
            assert len(lines) == len(summary["algorithms"])
            looks = {(line.get_color(), line.get_linestyle()) for line in lines}
            assert len(looks) == len(lines)
        plt.close(fig)
