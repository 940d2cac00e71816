"""Reward functions that misbehave on some answers (loaded by the fault tests as file.py:function specs)."""

import time


def _exact(completion, sample):
    return float(completion.strip() == sample["answer"])


def hangs_on_ones(completion, sample):
    if completion.startswith("1"):
        time.sleep(3600)
    return _exact(completion, sample)


def raises_on_ones(completion, sample):
    if completion.startswith("1"):
        raise RuntimeError("cannot grade this")
    return _exact(completion, sample)


def nan_on_ones(completion, sample):
    return float("nan") if completion.startswith("1") else _exact(completion, sample)


def always_raises(completion, sample):
    raise ValueError("broken grader")
