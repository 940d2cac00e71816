"""Misbehaving (and one good) reward functions for the scorer tests.

Importable by worker processes as ``bad_rewards:<name>`` (this directory is on ``sys.path`` under
pytest) or by file path, ``tests/rewards/bad_rewards.py:<name>``. Each reads ``sample["answer"]`` and
misbehaves when the answer asks it to, so one function can mix good and bad answers in one batch.
"""

from __future__ import annotations

import os
import time

NOT_CALLABLE = 42


def mixed(completion: str, sample: dict) -> float | None:
    """Good unless the answer says otherwise: 'sleep' (forever), 'spin' (a busy loop forever), 'raise',
    'nan', 'inf', 'none', 'str', 'exit' (the worker dies), 'print' (writes to stdout, which must not
    disturb the pipe protocol)."""
    mode = sample["answer"]
    if mode == "sleep":
        while True:
            time.sleep(60)
    if mode == "spin":  # busy loop in pure Python
        while True:
            pass
    if mode == "raise":
        raise ZeroDivisionError("bad reward")
    if mode == "nan":
        return float("nan")
    if mode == "inf":
        return float("-inf")
    if mode == "none":
        return None
    if mode == "str":
        return "1.0"  # type: ignore[return-value]
    if mode == "exit":
        os._exit(3)
    if mode == "print":
        print("noise from a reward", flush=True)
    return 1.0 if completion.strip() == mode else 0.0


def sleep_forever(completion: str, sample: dict) -> float | None:
    while True:
        time.sleep(60)


def always_raises(completion: str, sample: dict) -> float | None:
    raise RuntimeError("always")


def returns_nan(completion: str, sample: dict) -> float | None:
    return float("nan")


def returns_none(completion: str, sample: dict) -> float | None:
    return None
