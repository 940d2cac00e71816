"""A reasoning-gym task's size per epoch (``num_train``, read by ``trainer.num_train_epochs``): the problems of
one pass of its endless training stream, held-out questions left out."""

from __future__ import annotations

import itertools

import pytest

from hacrl.data.gym import reasoning_gym_task


def test_a_reasoning_gym_epoch_is_one_pass_of_its_training_stream():
    pytest.importorskip("reasoning_gym", reason="reasoning-gym not installed (pip install 'hacrl[gym]')")
    # one-digit sums: a small question space, so some training items repeat a held-out question
    task = reasoning_gym_task("basic_arithmetic", seed=0, size=60, test_size=20,
                              config={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
    skipped = dict(task.skipped)
    n = task.num_train
    assert 0 < n < 60 and dict(task.skipped) == skipped  # held-out repeats left out; skips not counted twice
    ids = [p.id for p in itertools.islice(task.train_problems(0), 2 * n)]
    assert len(set(ids[:n])) == n and set(ids[n:]) == set(ids[:n])  # the next pass: the same problems reshuffled
