"""TRL's GRPOConfig names given to the Python trainer (``HACRLTrainer(args={...})``) become hacrl's keys: the
schedule and warm-up on every agent, epochs or max_steps as TRL counts them, per_device_train_batch_size as TRL's
completions per step, and every other TRL name answered with hacrl's key in one line."""

from __future__ import annotations

import pytest

from hacrl.api import HACRLTrainer
from hacrl.config import ConfigError

MODELS = ["builtin:qwen2-char", "builtin:llama-bpe"]


def rows(n: int = 40) -> list[dict]:
    return [{"prompt": f"{i:02d}+{i:02d}=", "solution": str(2 * i)} for i in range(n)]


def build(tmp_path, args, **kwargs):
    kwargs.setdefault("output_dir", tmp_path / "run")
    return HACRLTrainer(MODELS, "exact", train_dataset=rows(), preset="tiny-test", args=args, **kwargs)


def test_trl_names_become_hacrl_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run directory from run_name: runs/mine here
    trainer = build(tmp_path, {
        "learning_rate": 1e-4, "lr_scheduler_type": "cosine", "warmup_ratio": 0.1, "weight_decay": 0.01,
        "max_grad_norm": 0.5, "beta": 0.04, "num_train_epochs": 2, "num_generations": 4,
        "per_device_train_batch_size": 8, "gradient_accumulation_steps": 2, "max_completion_length": 6,
        "temperature": 0.9, "logging_steps": 1, "save_steps": 2, "save_total_limit": 3, "report_to": "none",
        "seed": 3, "run_name": "mine"}, output_dir=None)
    cfg = trainer.config
    for agent in cfg.agents:  # TRL's one model's settings, on every agent
        assert (agent.lr, agent.lr_schedule, agent.warmup_ratio, agent.weight_decay, agent.grad_clip,
                agent.kl_coef) == (1e-4, "cosine", 0.1, 0.01, 0.5, 0.04)
    t = cfg.trainer
    # TRL's batch counts completions: 8 per device × 2 accumulated / 4 per prompt = 4 prompts a step
    assert (t.batch_size, t.num_train_epochs, t.steps_known, t.checkpoint_every, t.keep_last) == (4, 2, False, 2, 3)
    assert (cfg.rollout.rollouts_per_prompt, cfg.rollout.max_new_tokens, cfg.rollout.temperature) == (4, 6, 0.9)
    assert (cfg.run.seed, cfg.run.name, cfg.run.loggers) == (3, "mine", ["jsonl"])
    assert trainer.run_dir.name == "mine"


def test_trl_counting_rules(tmp_path):
    # max_steps > 0 wins over num_train_epochs (TRL's rule); its -1 default leaves the count to the epochs
    cfg = build(tmp_path, {"max_steps": 5, "num_train_epochs": 3}).config
    assert (cfg.trainer.steps, cfg.trainer.num_train_epochs) == (5, None)
    cfg = build(tmp_path, {"max_steps": -1, "num_train_epochs": 1}).config
    assert (cfg.trainer.num_train_epochs, cfg.trainer.steps_known) == (1, False)
    # warmup_steps: a count, or below 1 a share of the run (transformers' rule since warmup_ratio's deprecation)
    cfg = build(tmp_path, {"lr_scheduler_type": "linear", "warmup_steps": 0.25}).config
    assert (cfg.agents[0].warmup_steps, cfg.agents[0].warmup_ratio) == (0, 0.25)
    cfg = build(tmp_path, {"lr_scheduler_type": "linear", "warmup_steps": 1}).config
    assert (cfg.agents[1].warmup_steps, cfg.agents[1].warmup_ratio) == (1, 0.0)


def test_what_a_caller_names_wins_over_args(tmp_path):
    trainer = HACRLTrainer([{"id": "q", "model": MODELS[0], "lr": 2e-4}, MODELS[1]], "exact", train_dataset=rows(),
                           preset="tiny-test", args={"learning_rate": 1e-4, "output_dir": str(tmp_path / "a")},
                           overrides={"agents.llama-bpe.lr": 3e-4})
    assert [a.lr for a in trainer.config.agents] == [2e-4, 3e-4]  # the agent's own field, then overrides
    assert trainer.run_dir == tmp_path / "a"  # TRL's output_dir is the run directory


def test_args_need_a_models_list_only_for_models(tmp_path):
    """Without ``models`` the preset's agents get the settings."""
    cfg = HACRLTrainer(None, "exact", train_dataset=rows(), preset="tiny-test", args={"learning_rate": 5e-5},
                       output_dir=tmp_path / "r").config
    assert {a.lr for a in cfg.agents} == {5e-5} and len(cfg.agents) == 2


@pytest.mark.parametrize(("args", "message"), [
    ({"bf16": True}, "args: `bf16` is TRL's name: hacrl's key is agents.<id>.autocast"),
    ({"epsilon": 0.2}, "args: `epsilon` is TRL's name: hacrl's key is algorithm.clip_low"),
    ({"learning_rat": 1e-4}, "args: unknown name 'learning_rat'; did you mean 'learning_rate'?"),
    ({"lr_scheduler_type": "cosine_with_restarts"},
     ("args: lr_scheduler_type='cosine_with_restarts' is not one of hacrl's: constant, linear, cosine, "
     "constant_with_warmup")),
    ({"per_device_train_batch_size": 6, "num_generations": 4},
     ("args: per_device_train_batch_size=6 × gradient_accumulation_steps=1 completions are not whole groups of "
     "num_generations=4")),
    ({"gradient_accumulation_steps": 2}, "args: gradient_accumulation_steps needs per_device_train_batch_size"),
    ({"report_to": "mlflow"}, "args: report_to='mlflow'"),
    ({"reward_weights": [1.0]}, "reward_weights is given twice"),
])
def test_a_bad_arg_is_one_line(tmp_path, args, message):
    with pytest.raises(ConfigError) as err:
        build(tmp_path, args, reward_weights=[1.0] if "reward_weights" in args else None)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
    assert not (tmp_path / "run").exists()
