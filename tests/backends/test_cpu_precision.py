"""A CPU agent given bfloat16 / float16 on a CPU where those matmuls are slow gets one warning line naming the
fields and the fix (an AVX2 CPU ran bf16 matmuls ~50x slower than float32); nowhere else."""

from __future__ import annotations

import logging

import pytest

from hacrl.backends import devices
from hacrl.config import load_config


def _spec(*overrides: str):
    return load_config("tiny-test", overrides=list(overrides)).agents[0]


@pytest.mark.parametrize("overrides, fields", [
    (["agents.qwen-char.autocast=bfloat16"], "agents.qwen-char.autocast=bfloat16"),
    (["agents.qwen-char.dtype=bfloat16"], "agents.qwen-char.dtype=bfloat16"),
    (["agents.qwen-char.dtype=float16", "agents.qwen-char.autocast=bfloat16"],
     "agents.qwen-char.dtype=float16 and agents.qwen-char.autocast=bfloat16"),
])
def test_slow_low_precision_on_cpu_is_one_warning_naming_the_fields_and_the_fix(monkeypatch, caplog, overrides,
                                                                                 fields):
    monkeypatch.setattr(devices, "cpu_matmul_slowdown", lambda dtype: 54.5)
    with caplog.at_level(logging.WARNING, logger="hacrl.backends.devices"):
        line = devices.warn_slow_cpu_precision(_spec(*overrides))
    assert line is not None and "\n" not in line
    assert line.startswith(f"{fields}: ") and "54x slower than float32" in line
    assert "use dtype=float32 and autocast=null" in line
    assert [r.getMessage() for r in caplog.records] == [line]


def test_no_warning_for_float32_a_fast_dtype_or_another_device(monkeypatch, caplog):
    calls: list[str] = []
    monkeypatch.setattr(devices, "cpu_matmul_slowdown", lambda dtype: calls.append(dtype) or 1.2)
    with caplog.at_level(logging.WARNING):
        assert devices.warn_slow_cpu_precision(_spec()) is None  # float32: nothing measured
        assert calls == []
        assert devices.warn_slow_cpu_precision(_spec("agents.qwen-char.autocast=bfloat16")) is None  # fast here
        assert calls == ["bfloat16"]
        # a GPU agent: the CPU's speed does not matter (the spec is not checked against the devices here)
        spec = _spec("agents.qwen-char.autocast=bfloat16").model_copy(update={"device": "cuda"})
        assert devices.warn_slow_cpu_precision(spec) is None
    assert caplog.records == []


def test_the_slowdown_is_measured_once_per_dtype_and_restores_the_thread_count():
    import math

    import torch

    threads = torch.get_num_threads()
    devices.cpu_matmul_slowdown.cache_clear()
    first = devices.cpu_matmul_slowdown("bfloat16")
    assert math.isfinite(first) and first > 0
    assert devices.cpu_matmul_slowdown("bfloat16") == first  # cached: measured once per process
    assert torch.get_num_threads() == threads
