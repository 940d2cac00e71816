"""Fixtures shared by every test directory."""

import pytest
import torch


@pytest.fixture
def one_thread():
    """One torch CPU thread for the test (fast and deterministic on a shared machine), restored after it."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
