"""One agent loader: ``hacrl eval`` loads an agent to answer exactly as training does (``load_answering_agent``
is the part of ``load_worker_agent`` that renders and generates), so an evaluation of a run's checkpoint sees
the prompts, limits and precision the run trained with — every field, not a hand-picked few."""

from __future__ import annotations

import argparse

import pytest
import torch

from hacrl.backends.loading import load_answering_agent, load_worker_agent
from hacrl.backends.resolve import resolve_model_path
from hacrl.config import load_config

pytestmark = pytest.mark.model

SETTINGS = ["agents.qwen-char.max_prompt_tokens=7", "agents.qwen-char.system_prompt=Add.",
            "agents.qwen-char.max_answer_tokens=3", "agents.qwen-char.autocast=bfloat16"]


def test_eval_and_training_load_an_agent_to_answer_alike():
    cfg = load_config("tiny-test", overrides=SETTINGS)
    spec = cfg.agents[0]
    trained = load_worker_agent(cfg, 0, None)
    answering = load_answering_agent(spec, 0, resolve_model_path(spec.model), max_new_tokens=cfg.rollout.max_new_tokens)
    for field in ("id", "index", "use_chat", "system_prompt", "chat_template_kwargs", "max_prompt_tokens",
                  "max_answer_tokens", "autocast_dtype", "source"):
        assert getattr(answering, field) == getattr(trained, field), field
    assert answering.autocast_dtype == torch.bfloat16 and answering.max_prompt_tokens == 7
    assert answering.render_prompt("12+34=") == trained.render_prompt("12+34=")
    assert answering.optimizer is None and trained.optimizer is not None  # eval loads no optimizer


def test_hacrl_eval_takes_every_field_of_a_runs_agents(tmp_path, monkeypatch):
    from hacrl.cli import main
    from hacrl.cli.eval import _eval_models

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    overrides = [x for s in [*SETTINGS, "trainer.steps=1", "trainer.eval_size=4"] for x in ("--set", s)]
    assert main(["train", "--preset", "tiny-test", *overrides, "--output", str(run), "--quiet"]) == 0
    args = argparse.Namespace(run=str(run), model=[], chat_template_kwargs=None, device="cpu", dtype="float32")
    models, _ = _eval_models(args)
    (agent_id, path, spec), _ = models
    assert agent_id == "qwen-char" and path == run / "checkpoints" / "step-000001" / "agents" / "qwen-char"
    assert spec == load_config("tiny-test", overrides=[*SETTINGS, "trainer.steps=1"]).agents[0]  # every field
    assert (spec.max_prompt_tokens, spec.autocast, spec.system_prompt) == (7, "bfloat16", "Add.")
