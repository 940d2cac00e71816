"""``hacrl train``'s last lines name the held-out number by what it is, without a model: "greedy accuracy", or
"mean greedy reward" once rewards fell outside [0, 1] in training or in the held-out evaluations."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from hacrl.cli.train import _measure


def trainer(saw_outside_unit: bool) -> SimpleNamespace:
    return SimpleNamespace(phases=SimpleNamespace(warnings=SimpleNamespace(saw_outside_unit=saw_outside_unit)))


@pytest.mark.parametrize(("in_training", "held_out", "benchmark", "word"), [
    (False, [1.0, 0.0], [], "greedy accuracy"),
    (True, [1.0, 0.0], [], "mean greedy reward"),
    (False, [1.5, 0.0], [], "mean greedy reward"),
    (False, [1.0, -0.5], [], "mean greedy reward"),
    (False, [1.0, 0.0], [3.0], "greedy accuracy"),  # a benchmark's rewards (scored with math) say nothing of the task's
])
def test_the_held_out_number_is_named_by_its_rewards(tmp_path, in_training, held_out, benchmark, word):
    records = [{"step": 0, "agent": "a", "task": "t", "ids": ["p0", "p1"], "reward": held_out}]
    records += [{"step": 0, "agent": "a", "benchmark": "b", "ids": ["q0"], "reward": benchmark}] if benchmark else []
    (tmp_path / "eval_problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert _measure(trainer(in_training), tmp_path) == word


def test_a_run_without_problem_records_reads_as_accuracy(tmp_path):
    assert _measure(trainer(False), tmp_path) == "greedy accuracy"
