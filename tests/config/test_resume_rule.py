"""One rule decides whether a run may continue under a config: ``hacrl train --resume`` (the Trainer) and
``hacrl compare`` (plan_run: reuse or resume) accept and refuse the same changes, with the same words."""

from __future__ import annotations

import pytest
import yaml

from hacrl.config import ConfigError, load_config, resume_conflict, training_differences
from hacrl.report.runs import plan_run
from hacrl.trainer.trainer import Trainer

BASE = ["trainer.steps=1", "trainer.eval_size=5", "trainer.log_samples=0", "run.loggers=[jsonl]"]


def test_differences_pass_over_neutral_keys_and_compare_agents_by_id():
    old = load_config("tiny-test").model_dump(mode="json")
    new = load_config("tiny-test", overrides=[
        "trainer.steps=7", "trainer.eval_every=2", "trainer.checkpoint_every=3", "trainer.threads=2",
        "trainer.micro_batch_size=8", "trainer.eval_benchmarks.math500=m.jsonl", "run.loggers=[jsonl]",
        "task.reward_timeout_s=30", "backend.name=ray", "agents.qwen-char.num_gpus=0.5"]).model_dump(mode="json")
    assert training_differences(old, new) == []
    assert resume_conflict(old, new) is None
    changed = load_config("tiny-test", overrides=[
        "agents.llama-bpe.lr=0.5", "rollout.engine_options.x=1", "trainer.eval_size=7"]).model_dump(mode="json")
    assert [k for k, _, _ in training_differences(old, changed)] == [
        "agents.llama-bpe.lr", "rollout.engine_options", "trainer.eval_size"]  # a free-form dict as a whole
    other_agents = {**old, "agents": old["agents"][::-1]}
    assert [k for k, _, _ in training_differences(old, other_agents)] == ["agents"]
    del new["algorithm"]["alpha"]  # a field only one side has (another hacrl version) is passed over
    assert training_differences(old, new) == []


@pytest.mark.model
def test_train_resume_and_compare_accept_and_refuse_the_same_changes(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    Trainer(load_config("tiny-test", overrides=BASE), run).train()
    ckpt = run / "checkpoints" / "step-000001"

    # only neutral keys differ: both continue the run
    neutral = load_config("tiny-test", overrides=[*BASE, "trainer.steps=2", "trainer.eval_every=1",
                                                  "trainer.checkpoint_every=1", "agents.qwen-char.num_cpus=2"])
    trainer = Trainer(neutral, run, resume_from=ckpt)
    assert trainer.step_idx == 1
    trainer.close()
    assert plan_run(neutral, run).action == "resume"

    # a learning rate differs: both refuse, naming the field in the same words
    changed = load_config("tiny-test", overrides=[*BASE, "trainer.steps=2", "agents.qwen-char.lr=0.01"])
    conflict = resume_conflict(yaml.safe_load((run / "config.yaml").read_text()), changed.model_dump(mode="json"))
    assert conflict is not None and conflict.startswith("agents.qwen-char.lr=0.0003, now 0.01;")
    with pytest.raises(ConfigError) as by_train:
        Trainer(changed, run, resume_from=ckpt)
    with pytest.raises(ConfigError) as by_compare:
        plan_run(changed, run)
    for exc in (by_train.value, by_compare.value):
        assert f"{run} was trained with {conflict}" in str(exc)


def test_a_run_made_before_the_fixed_held_out_set_never_continues():
    """A reasoning-gym or dataset run whose config.yaml has no task.test_seed had a held-out split that moved
    with run.seed: no test_seed reproduces it, so resume (and compare's reuse) refuse it; a builtin task's
    split never depended on it, so its old runs still continue."""
    from hacrl.config import HELD_OUT_SEED, resume_conflict

    for kind in ("reasoning-gym", "dataset"):
        msg = resume_conflict({"task": {"kind": kind, "name": "t"}},
                              {"task": {"kind": kind, "name": "t", "test_seed": HELD_OUT_SEED}})
        assert msg is not None and msg.startswith("task.test_seed='none (its held-out split moved with run.seed")
    assert resume_conflict({"task": {"kind": "builtin", "name": "add2"}},
                           {"task": {"kind": "builtin", "name": "add2", "test_seed": HELD_OUT_SEED}}) is None
    # a run that recorded its test_seed compares as any setting does
    assert resume_conflict({"task": {"kind": "reasoning-gym", "test_seed": 7}},
                           {"task": {"kind": "reasoning-gym", "test_seed": 7}}) is None


@pytest.mark.model
def test_resume_refuses_a_checkpoint_of_other_agents_or_of_another_algorithm(tmp_path):
    """The checkpoint's manifest guards a resume on its own: into a new run directory there is no config.yaml
    to compare with, and the agents (by id and model, in order) and the algorithm must still be the saved ones."""
    run = tmp_path / "run"
    run.mkdir()
    Trainer(load_config("tiny-test", overrides=BASE), run).train()
    ckpt = run / "checkpoints" / "step-000001"
    saved = "[{'id': 'qwen-char', 'model': 'builtin:qwen2-char'}, {'id': 'llama-bpe', 'model': 'builtin:llama-bpe'}]"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    swapped = load_config("tiny-test", overrides=[*BASE, "agents.llama-bpe.model=builtin:qwen2-char"])
    with pytest.raises(ConfigError) as exc:
        Trainer(swapped, elsewhere, resume_from=ckpt)
    assert str(exc.value) == (
        f"--resume: the checkpoint was made with agents {saved}, the config has [{{'id': 'qwen-char', 'model': "
        "'builtin:qwen2-char'}, {'id': 'llama-bpe', 'model': 'builtin:qwen2-char'}]; resume with the original config")

    for algo in ("gspo", "naive"):
        other = load_config("tiny-test", overrides=[*BASE, f"algorithm.name={algo}"])
        with pytest.raises(ConfigError) as exc:
            Trainer(other, elsewhere, resume_from=ckpt)
        assert str(exc.value) == f"--resume: the checkpoint used algorithm 'hacpo', the config has '{algo}'"
    assert not any(elsewhere.iterdir())  # refused before anything was written

    # the saved agents and algorithm resume there (the manifest is all it has to go by)
    trainer = Trainer(load_config("tiny-test", overrides=[*BASE, "trainer.steps=2"]), elsewhere, resume_from=ckpt)
    assert trainer.step_idx == 1
    trainer.close()
