"""Learning-rate schedules and epochs in tiny end-to-end runs: each agent's logged rate (``agent/<id>/lr``) is
transformers' schedule function's on the same steps, the constant default leaves the rate as configured, a resumed
run trains at the uninterrupted run's rates, and ``trainer.num_train_epochs`` stops after its passes over a
data set."""

from __future__ import annotations

import json

import pytest
import yaml
from transformers import (
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_linear_schedule_with_warmup,
)

from hacrl.config import ConfigError, load_config
from hacrl.trainer.trainer import Trainer

pytestmark = pytest.mark.model

LR = 3.0e-4  # the tiny-test preset's, both agents
QUICK = ("trainer.eval_size=5", "trainer.log_samples=0")


def make_trainer(tmp_path, *overrides, name="run", resume_from=None):
    cfg = load_config("tiny-test", overrides=[*QUICK, *overrides])
    run_dir = tmp_path / name
    run_dir.mkdir(exist_ok=True)
    return Trainer(cfg, run_dir, resume_from=resume_from)


def logged_rates(lines: list[dict], agent_id: str) -> list[float]:
    """The rates an agent's steps logged, from a run's ``metric_lines``."""
    return [rec[f"agent/{agent_id}/lr"] for rec in lines if rec["step"] > 0]


def test_a_cosine_schedule_with_warmup_changes_the_rate_as_transformers_does(tmp_path, transformers_rates, metric_lines):
    trainer = make_trainer(tmp_path, "trainer.steps=4",
                           "agents.qwen-char.lr_schedule=cosine", "agents.qwen-char.warmup_steps=1",
                           "agents.llama-bpe.lr_schedule=constant_with_warmup", "agents.llama-bpe.warmup_ratio=0.5")
    trainer.train()
    # cosine, 1 warm-up step of 4: 0, then 3e-4·½(1 + cos(π·k/3)) for k = 0, 1, 2: 3e-4, 2.25e-4, 0.75e-4
    assert logged_rates(metric_lines(trainer.run_dir), "qwen-char") == transformers_rates(
        get_cosine_schedule_with_warmup, 4, lr=LR, num_warmup_steps=1, num_training_steps=4)
    assert logged_rates(metric_lines(trainer.run_dir), "llama-bpe") == transformers_rates(
        get_constant_schedule_with_warmup, 4, lr=LR, num_warmup_steps=2)  # ceil(0.5 × 4) = 2: 0, 1.5e-4, 3e-4, 3e-4


def test_the_constant_default_trains_at_the_configured_rate(tmp_path, metric_lines):
    trainer = make_trainer(tmp_path, "trainer.steps=2")
    trainer.train()
    for agent in trainer.agents:
        assert logged_rates(metric_lines(trainer.run_dir), agent.id) == [LR, LR]
        group = agent.optimizer.param_groups[0]
        assert group["lr"] == LR and "initial_lr" not in group  # no scheduler ever touched the optimizer
    assert not list((trainer.run_dir / "checkpoints").glob("*/agents/*/scheduler.pt"))


def test_a_resumed_run_trains_at_the_uninterrupted_runs_rates(tmp_path, transformers_rates, metric_lines):
    sets = ("trainer.steps=4", "trainer.checkpoint_every=2", "trainer.keep_last=3",
            "agents.qwen-char.lr_schedule=cosine", "agents.qwen-char.warmup_steps=1",
            "agents.llama-bpe.lr_schedule=linear", "agents.llama-bpe.warmup_ratio=0.25")
    straight = make_trainer(tmp_path, *sets)
    straight.train()
    uninterrupted = metric_lines(straight.run_dir)
    ckpt = straight.run_dir / "checkpoints" / "step-000002"
    resumed = make_trainer(tmp_path, *sets, resume_from=ckpt)  # steps 3 and 4 again, from the step-2 checkpoint
    assert resumed.step_idx == 2
    resumed.train()
    assert logged_rates(metric_lines(resumed.run_dir), "llama-bpe") == transformers_rates(
        get_linear_schedule_with_warmup, 4, lr=LR, num_warmup_steps=1, num_training_steps=4)
    assert metric_lines(resumed.run_dir) == uninterrupted  # the rates, and with them every metric
    # the schedule spans the run's 4 steps: it does not stretch to another count mid-run
    with pytest.raises(ConfigError, match=r"agents\.qwen-char\.lr_schedule: .*resume with trainer\.steps=4"):
        make_trainer(tmp_path, *sets, "trainer.steps=6", resume_from=ckpt)


def write_rows(path, pairs):
    path.write_text("".join(json.dumps({"question": f"{a:02d}+{b:02d}=", "answer": str(a + b)}) + "\n"
                            for a, b in pairs))


def test_epochs_stop_the_run_after_its_passes_over_the_data_set(tmp_path, transformers_rates, metric_lines):
    write_rows(tmp_path / "train.jsonl", [(i, 2 * i) for i in range(10)])
    write_rows(tmp_path / "test.jsonl", [(50 + i, i) for i in range(5)])
    trainer = make_trainer(
        tmp_path, "task.kind=dataset", f"task.train_path={tmp_path / 'train.jsonl'}",
        f"task.test_path={tmp_path / 'test.jsonl'}", "task.prompt_template='{question}'", "task.reward=exact",
        "trainer.steps=null", "trainer.num_train_epochs=1", "trainer.batch_size=4",  # ceil(10 / 4) = 3 steps
        "agents.llama-bpe.lr_schedule=linear")
    assert trainer.cfg.trainer.steps == 3
    trainer.train()
    assert [rec["step"] for rec in metric_lines(trainer.run_dir)] == [0, 1, 2, 3] and trainer.data.position == 12
    assert yaml.safe_load((trainer.run_dir / "config.yaml").read_text())["trainer"]["steps"] == 3
    # the schedule spans the counted steps: linear over 3, from lr down to lr/3 at the last
    assert logged_rates(metric_lines(trainer.run_dir), "llama-bpe") == transformers_rates(
        get_linear_schedule_with_warmup, 3, lr=LR, num_warmup_steps=0, num_training_steps=3)


def test_epochs_over_a_builtin_task_are_refused_before_a_model_loads(tmp_path):
    with pytest.raises(ConfigError, match=r"trainer\.num_train_epochs: task 'add2' draws new problems without end"):
        make_trainer(tmp_path, "trainer.steps=null", "trainer.num_train_epochs=1")


def test_sharding_rebuilds_the_optimizer_and_the_schedule_follows_it(tmp_path, transformers_rates):
    """FSDP sharding builds the agent's AdamW again over the sharded parameters (``shard_agent``): the scheduler is
    built again on it, and a sharded checkpoint's ``scheduler.pt`` puts the rate back (one gloo rank here; the
    Ray workers of test_sharded_ray.py call the same methods)."""
    import torch.distributed as dist

    from hacrl.agents.agent import load_agent
    from hacrl.agents.lr_schedule import LRSchedule
    from hacrl.agents.tiny import tiny_agent_path
    from hacrl.learner import sharding

    def sharded_agent():
        agent = load_agent("a", 0, tiny_agent_path("qwen2-char"))
        agent.lr_schedule = LRSchedule("cosine", warmup_steps=1, total_steps=4)
        agent.configure_optimizer(lr=LR)
        sharding.shard_agent(agent, dist.group.WORLD, offload=False, lr=LR, weight_decay=0.0)
        assert agent.scheduler.optimizer is agent.optimizer
        return agent

    def rates(agent, n):
        out = []
        for _ in range(n):
            out.append(agent.lr)
            agent.optimizer.step()  # no gradients: nothing moves, but the scheduler sees a stepped optimizer
            agent.step_lr()
        return out

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        first = sharded_agent()
        head = rates(first, 2)
        first.save_scheduler(tmp_path)
        resumed = sharded_agent()
        resumed.load_scheduler(tmp_path)
        assert head + rates(resumed, 2) == transformers_rates(get_cosine_schedule_with_warmup, 4, lr=LR,
                                                              num_warmup_steps=1, num_training_steps=4)
    finally:
        dist.destroy_process_group()


def test_a_finished_scheduled_run_is_not_told_to_resume_with_more_steps(tmp_path, capsys):
    """The hint after resuming a finished run ("to train further: --resume … trainer.steps=2N") would meet the
    schedule's one-line refusal: for a run with a schedule other than constant it says why and what works."""
    from hacrl.cli import main

    run = tmp_path / "run"
    sets = ["--set", "trainer.steps=1", *(x for s in QUICK for x in ("--set", s)),
            "--set", "agents.llama-bpe.lr_schedule=cosine"]
    assert main(["train", "--preset", "tiny-test", *sets, "--output", str(run), "-q"]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    hint = [line for line in capsys.readouterr().out.splitlines() if "to train further" in line]
    assert len(hint) == 1 and "trainer.steps=2" not in hint[0], hint
    assert "agents.llama-bpe.lr_schedule=cosine" in hint[0] and "cannot stretch mid-run" in hint[0], hint
    assert f"hacrl export {run}" in hint[0], hint
