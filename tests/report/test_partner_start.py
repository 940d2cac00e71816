"""The partner's starting accuracy as a reference: a dashed line in each agent's curve, and a sentence of the
reading wherever an agent ended below it (issue #43: "ends below its partner's start" visible where it happens)."""

from __future__ import annotations

import pytest

from hacrl.report.reading import below_partner_start, partner_starts


def _summary() -> dict:
    curve = {"steps": [0, 30], "answers": [0, 480], "mean": [0.1, 0.4], "sd": [0.0, 0.05]}
    return {"algorithms": ["hacpo", "gspo"], "agents": ["weak", "strong"], "results": {
        "weak": {"hacpo": {"start": 0.1, "curve": curve, "final": {"mean": 0.4, "by_seed": {"0": 0.45, "1": 0.35}}},
                 "gspo": {"start": 0.1, "curve": curve, "final": {"mean": 0.6, "by_seed": {"0": 0.6, "1": 0.6}}}},
        "strong": {"hacpo": {"start": 0.5, "curve": curve, "final": {"mean": 0.55, "by_seed": {"0": 0.6, "1": 0.5}}},
                   "gspo": {"start": 0.5, "curve": curve, "final": {"mean": 0.52, "by_seed": {"0": 0.52, "1": 0.52}}}},
    }}


def test_below_the_partners_start_per_algorithm_with_its_seeds():
    s = _summary()
    assert partner_starts(s, "weak") == {"strong": 0.5} and partner_starts(s, "strong") == {"weak": 0.1}
    # weak: hacpo 0.400 < 0.5 in both seeds; gspo 0.600 is above; strong never below weak's 0.1
    assert below_partner_start(s) == ["weak under hacpo ended at 0.400, below strong's start 0.500 (2 of 2 seeds)"]


def test_the_curve_draws_the_partners_start():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hacrl.report.plots import draw_curves

    s = _summary()
    fig, ax = plt.subplots()
    draw_curves(ax, s["results"]["weak"], s["algorithms"], {"hacpo": "C0", "gspo": "C1"},
                references={"strong's start": 0.5})
    flat = [line for line in ax.get_lines() if line.get_label() == "strong's start"]
    assert len(flat) == 1 and list(flat[0].get_ydata()) == [0.5, 0.5] and flat[0].get_linestyle() == "--"
    plt.close(fig)
