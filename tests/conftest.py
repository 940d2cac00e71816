"""Fixtures shared by every test directory."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch CPU thread for every test (fast and deterministic on a shared machine, and the same whichever
    tests ran before), restored after it: a test, or the Trainer it builds (``trainer.threads``), may set
    another count without it leaking into the next test. Spawned ranks set their own."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def transformers_rates():
    """``transformers_rates(schedule, n, lr=..., **kwargs)``: the learning rate at each of ``n`` steps of
    transformers' schedule ``schedule(optimizer, **kwargs)`` on a dummy AdamW at ``lr``, stepped once per step as
    TRL steps it (the reference hacrl's schedules are held to)."""
    import torch

    def rates(schedule, n: int, *, lr: float, **kwargs) -> list[float]:
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=lr)
        scheduler = schedule(optimizer, **kwargs)
        out = []
        for _ in range(n):
            out.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return out

    return rates


@pytest.fixture(scope="session")
def load_script():
    """``load_script("bench/mechanism.py", "bench_mechanism")``: a repository script that is not in a package
    (bench/, scripts/) imported by its path under ``name``, registered in sys.modules first (its dataclasses look
    their module up)."""
    def load(path: str, name: str):
        spec = importlib.util.spec_from_file_location(name, ROOT / path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session")
def metric_lines():
    """``metric_lines(run_dir, drop=("timing/",))``: a run's metrics.jsonl, one dict a line, without the keys that
    start with ``drop`` (the timings by default: what an exact resume must reproduce, since wall time differs)."""
    def read(run_dir: Path, drop: tuple[str, ...] = ("timing/",)) -> list[dict]:
        lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in rec.items() if not k.startswith(drop)} for rec in lines]

    return read
