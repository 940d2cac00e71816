"""Fixtures shared by every test directory."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One torch CPU thread for every test (fast and deterministic on a shared machine, and the same whichever
    tests ran before), restored after it: a test, or the Trainer it builds (``trainer.threads``), may set
    another count without it leaking into the next test. Spawned ranks set their own."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
