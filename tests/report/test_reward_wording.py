"""``hacrl compare``'s report names the held-out number by what it is: "accuracy" for rewards in [0, 1], "mean
greedy reward" once a run's held-out rewards fall outside [0, 1] (its answer table, reading, section, curves), on
the constructed run directories of test_report_records (no training)."""

from __future__ import annotations

import pytest
from test_report_records import GREEDY, ZERO, _summary

from hacrl.report.render import answer_table, render_report


@pytest.fixture
def doubled(monkeypatch):
    """hacpo's llama-bpe paid 2 for its one right answer at the end: a reward outside [0, 1]."""
    monkeypatch.setitem(GREEDY, ("hacpo", "llama-bpe"), {0: ZERO, 1: ZERO, 2: [2, 0, 0, 0]})


def test_rewards_outside_0_1_are_named_rewards(tmp_path, doubled):
    s = _summary(tmp_path)
    text = render_report({**s, "plots": ["plots/curve-qwen-char.png"]})
    assert answer_table(s)[0].startswith("Final held-out mean greedy reward at step 2, each algorithm minus")
    assert "\n## Held-out mean greedy reward\n" in text and "## Held-out accuracy" not in text
    assert "qwen-char: held-out mean greedy reward, mean over 2 seeds" in text
    assert s["reading"][-1].startswith("Final mean greedy reward against gspo and gspo2x, paired by seed")


def test_rewards_in_0_1_stay_accuracies(tmp_path):
    s = _summary(tmp_path)
    text = render_report({**s, "plots": ["plots/curve-qwen-char.png"]})
    assert answer_table(s)[0].startswith("Final held-out accuracy at step 2")
    assert "\n## Held-out accuracy\n" in text and "qwen-char: held-out greedy accuracy, mean over 2 seeds" in text
    assert s["reading"][-1].startswith("Final accuracy against gspo and gspo2x")
