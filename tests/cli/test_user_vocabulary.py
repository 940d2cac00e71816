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
    assert f"hacrl's key is {hacrl_key}" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("key", "name", "hacrl_key"), [
    # TRL's TrainingArguments / GRPOConfig, flat as TRL writes them or inside a hacrl section
    ("lr_scheduler_type=cosine", "`lr_scheduler_type` is TRL's name", "agents.<id>.lr_schedule"),
    ("trainer.lr_scheduler_type=cosine", "`lr_scheduler_type` is TRL's name", "agents.<id>.lr_schedule"),
    ("warmup_ratio=0.1", "`warmup_ratio` is TRL's name", "agents.<id>.warmup_ratio"),
    ("warmup_steps=10", "`warmup_steps` is TRL's name", "agents.<id>.warmup_steps"),
    ("num_train_epochs=3", "`num_train_epochs` is TRL's name", "trainer.num_train_epochs"),
    ("trainer.save_steps=50", "`save_steps` is TRL's name", "trainer.checkpoint_every"),
    ("trainer.eval_steps=50", "`eval_steps` is TRL's name", "trainer.eval_every"),
    ("learning_rate=1.0e-6", "`learning_rate` is TRL's name", "agents.<id>.lr"),
    ("per_device_train_batch_size=8", "`per_device_train_batch_size` is TRL's name", "trainer.batch_size"),
    ("num_generations=8", "`num_generations` is TRL's name", "rollout.rollouts_per_prompt"),
    ("max_completion_length=256", "`max_completion_length` is TRL's name", "rollout.max_new_tokens"),
    ("beta=0.04", "`beta` is TRL's name", "agents.<id>.kl_coef"),
    # verl's Hydra paths, as `--set` (or a file's sections) give them
    ("actor_rollout_ref.actor.optim.lr=1.0e-6", "`actor_rollout_ref.actor.optim.lr` is verl's", "agents.<id>.lr"),
    ("data.train_batch_size=256", "`data.train_batch_size` is verl's", "trainer.batch_size"),
    ("actor_rollout_ref.rollout.n=8", "`actor_rollout_ref.rollout.n` is verl's", "rollout.rollouts_per_prompt"),
    ("trainer.total_training_steps=100", "`trainer.total_training_steps` is verl's", "trainer.steps"),
    ("algorithm.kl_ctrl.kl_coef=0.001", "`algorithm.kl_ctrl.kl_coef` is verl's", "agents.<id>.kl_coef"),
    ("data.max_response_length=512", "`data.max_response_length` is verl's", "rollout.max_new_tokens"),
    ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1",
     "`actor_rollout_ref.actor.optim.lr_warmup_steps_ratio` is verl's", "agents.<id>.warmup_ratio"),
    ("trainer.total_epochs=2", "`trainer.total_epochs` is verl's", "trainer.num_train_epochs"),
    ("trainer.save_freq=20", "`trainer.save_freq` is verl's", "trainer.checkpoint_every"),
    ("trainer.test_freq=5", "`trainer.test_freq` is verl's", "trainer.eval_every"),
])
def test_trl_and_verl_vocabulary_gets_hacrls_key_not_a_spelling_hint(key, name, hacrl_key):
    with pytest.raises(ConfigError) as err:
        load_config(preset="tiny-test", overrides=[key])
    text = str(err.value)
    assert f"unknown key '{key.split('=')[0]}'; {name}" in text and f"hacrl's key is {hacrl_key}" in text, text
    assert "check its spelling" not in text and "\n" not in text


def test_trls_logging_steps_is_answered_too():
    with pytest.raises(ConfigError) as err:
        load_config(preset="tiny-test", overrides=["trainer.logging_steps=10"])
    assert "`logging_steps` is TRL's name; hacrl has no key for it: every step is logged" in str(err.value)


def test_a_verl_section_in_a_file_names_each_of_its_keys(tmp_path):
    from hacrl.config import config_problems

    path = tmp_path / "verl.yaml"
    path.write_text("data: {train_batch_size: 64, max_response_length: 512}\n"
                    "actor_rollout_ref: {actor: {optim: {lr: 1.0e-6}}, rollout: {n: 4}}\n", encoding="utf-8")
    problems = config_problems("tiny-test", path)
    assert len(problems) == 2 and all("\n" not in p for p in problems), problems
    data = next(p for p in problems if "'data'" in p)
    assert "`data.train_batch_size` is verl's" in data and "hacrl's key is trainer.batch_size" in data
    assert "`data.max_response_length` is verl's" in data and "hacrl's key is rollout.max_new_tokens" in data
    actor = next(p for p in problems if "'actor_rollout_ref'" in p)
    assert "hacrl's key is agents.<id>.lr" in actor and "hacrl's key is rollout.rollouts_per_prompt" in actor


def test_every_key_the_vocabulary_names_is_hacrls():
    from hacrl.config import Config, config_fields
    from hacrl.config.load import _section_of
    from hacrl.config.vocabulary import NO_KEY, TRL_KEYS, VERL_KEYS

    def exists(key: str) -> bool:
        section = Config
        for part in key.replace("agents.<id>", "agents").split("."):
            fields = config_fields(section) if section is not None else {}
            if part not in fields:
                return False
            section = _section_of(fields[part].annotation)
        return True

    keys = {hint.split(" ")[0].rstrip(":") for hint in [*TRL_KEYS.values(), *VERL_KEYS.values()]
            if not hint.startswith((NO_KEY, "--"))}
    assert len(keys) > 30 and all(exists(k) for k in keys), sorted(k for k in keys if not exists(k))


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
