"""Shared set-up for the hacrl.core tests: one CPU thread, so the suite is fast and deterministic."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
