"""What a TRL or verl user types first: their key names answered with hacrl's, agent ids with dots addressable,
a YAML error with its file and line, ``hacrl --version``, and a preset list that reads."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hacrl.cli import preset_summary
from hacrl.config import ConfigError, load_config, preset_names, preset_text


@pytest.mark.parametrize(("key", "hacrl_key"), [
    ("trainer.learning_rate=0.1", "agents.<id>.lr"),
    ("rollout.num_generations=4", "rollout.rollouts_per_prompt"),
    ("algorithm.beta=0.1", "agents.<id>.kl_coef"),  # a TRL name beats a close spelling (not algorithm.delta)
    ("algorithm.epsilon=0.2", "algorithm.clip_low"),
    ("rollout.max_completion_length=9", "rollout.max_new_tokens"),
    ("algorithm.loss_type=grpo", "algorithm.name"),
    ("trainer.report_to=wandb", "run.loggers"),
    ("trainer.gradient_accumulation_steps=4", "trainer.micro_batch_size"),
])
def test_trl_and_verl_names_are_answered_with_the_hacrl_key(key, hacrl_key):
    with pytest.raises(ConfigError) as err:
        load_config(preset="tiny-test", overrides=[key])
    assert f"in hacrl that is {hacrl_key}" in str(err.value)
    assert "\n" not in str(err.value)


def test_the_same_field_in_another_section_still_wins():
    with pytest.raises(ConfigError, match=r"did you mean 'run.seed'"):
        load_config(preset="tiny-test", overrides=["trainer.seed=3"])


def test_an_agent_id_with_dots_is_addressable_on_the_paper_preset():
    """docs/real-models.md's own command: the paper presets' ids hold dots (qwen3-1.7b-base)."""
    cfg = load_config(preset="paper-size-qwen3-1.7b-4b", overrides=[
        "agents.qwen3-1.7b-base.model=/models/qwen3-1.7b", "agents.1.lr=0.002"])
    assert [(a.id, a.model) for a in cfg.agents][0] == ("qwen3-1.7b-base", "/models/qwen3-1.7b")
    assert cfg.agents[1].lr == 0.002
    with pytest.raises(ConfigError, match=r"no agent with id 'qwen3'; ids: qwen3-1.7b-base \(agents.0\)"):
        load_config(preset="paper-size-qwen3-1.7b-4b", overrides=["agents.qwen3.lr=0.1"])


def test_a_yaml_error_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("trainer:\n  steps: 3\n  batch_size: [4\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"mine.yaml:4:1: not valid YAML: "):
        load_config(path=path)


def test_version_and_a_preset_list_that_reads():
    out = subprocess.run([sys.executable, "-m", "hacrl.cli", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("hacrl 0.")
    for name in preset_names():
        summary = preset_summary(preset_text(name))
        assert summary.endswith((".", ")")) and len(summary) < 200, (name, summary)
