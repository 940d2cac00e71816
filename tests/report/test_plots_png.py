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
