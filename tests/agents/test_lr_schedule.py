"""An agent's learning-rate schedule (hacrl.agents.lr_schedule) against transformers' schedule functions called
directly on a dummy optimizer: the same rate at every training step, warm-up as TRL counts it, the last step's
rate past the end, and a checkpoint that gives a resumed agent the uninterrupted one's rates."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import (
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_linear_schedule_with_warmup,
)

from hacrl.agents.agent import Agent
from hacrl.agents.lr_schedule import SCHEDULER_FILE, agent_schedule
from hacrl.config import AgentSpec, ConfigError

LR = 3.0e-4
REFERENCE = {"cosine": get_cosine_schedule_with_warmup, "linear": get_linear_schedule_with_warmup,
             "constant_with_warmup": get_constant_schedule_with_warmup}


def make_agent(total: int, **spec_fields) -> Agent:
    """An agent on a 2×2 linear model (nothing but its optimizer and schedule is used), built as a worker builds
    it: the schedule, then the optimizer."""
    torch.manual_seed(0)
    tokenizer = SimpleNamespace(eos_token_id=0, pad_token_id=0, chat_template=None)
    agent = Agent("a", 0, torch.nn.Linear(2, 2), tokenizer)
    agent.lr_schedule = agent_schedule(AgentSpec(id="a", model="m", lr=LR, **spec_fields), total)
    agent.configure_optimizer(lr=LR)
    return agent


def train_steps(agent: Agent, n: int) -> list[float]:
    """The rate of each of ``n`` training steps of two optimizer steps each (a step's minibatches share it)."""
    rates = []
    for _ in range(n):
        rates.append(agent.lr)
        for _ in range(2):
            agent.model(torch.ones(1, 2)).sum().backward()
            agent.optimizer.step()
            agent.optimizer.zero_grad()
        agent.step_lr()
    return rates


def reference_rates(transformers_rates, name: str, warmup: int, total: int, n: int) -> list[float]:
    """transformers' own schedule ``name`` (the ``transformers_rates`` fixture), stepped once per step as TRL
    steps it."""
    total_arg = {} if name == "constant_with_warmup" else {"num_training_steps": total}  # it takes no total
    return transformers_rates(REFERENCE[name], n, lr=LR, num_warmup_steps=warmup, **total_arg)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_each_schedule_gives_transformers_rates_at_every_step(name, transformers_rates):
    # cosine with 3 warm-up steps over 10: 0, 1e-4, 2e-4, then 3e-4·½(1 + cos(π·k/7)) for k = 0..6
    assert train_steps(make_agent(10, lr_schedule=name, warmup_steps=3), 10) == reference_rates(transformers_rates, name, 3, 10, 10)


@pytest.mark.parametrize(("fields", "warmup"), [({"warmup_ratio": 0.25}, 3),  # ceil(0.25 × 10) = 3
                                                ({"warmup_ratio": 0.5, "warmup_steps": 2}, 2),  # steps > 0 win
                                                ({}, 0)])
def test_warmup_is_counted_as_trl_counts_it(fields, warmup, transformers_rates):
    agent = make_agent(10, lr_schedule="cosine", **fields)
    assert agent.lr_schedule is not None and agent.lr_schedule.warmup_steps == warmup
    assert train_steps(agent, 10) == reference_rates(transformers_rates, "cosine", warmup, 10, 10)


def test_past_the_last_step_the_rate_stays_the_last_steps(transformers_rates):
    """transformers' cosine rises again after its end; an agent that trains on (the asynchronous mode's faster
    ones) keeps the rate of step ``total``."""
    rates = train_steps(make_agent(4, lr_schedule="cosine", warmup_steps=1), 7)
    assert rates[:4] == reference_rates(transformers_rates, "cosine", 1, 4, 4)
    assert rates[4:] == [rates[3]] * 3 and rates[3] > 0


def test_constant_builds_no_scheduler_and_leaves_the_rate_as_configured():
    agent = make_agent(10)
    assert agent.lr_schedule is None and agent.scheduler is None
    assert train_steps(agent, 3) == [LR] * 3 and agent.lr == LR
    assert "initial_lr" not in agent.optimizer.param_groups[0]  # no scheduler ever touched the optimizer


def save(agent: Agent, path):
    path.mkdir()
    torch.save(agent.optimizer.state_dict(), path / "optimizer.pt")
    agent.save_scheduler(path)


def test_a_checkpoint_gives_a_resumed_agent_the_uninterrupted_rates(tmp_path):
    straight = train_steps(make_agent(8, lr_schedule="linear", warmup_steps=2), 8)
    first = make_agent(8, lr_schedule="linear", warmup_steps=2)
    head = train_steps(first, 3)
    save(first, tmp_path / "ckpt")
    resumed = make_agent(8, lr_schedule="linear", warmup_steps=2)
    resumed.load_optimizer(tmp_path / "ckpt")
    resumed.load_scheduler(tmp_path / "ckpt")
    assert head + train_steps(resumed, 5) == straight
    # the scheduler's rate wins over whatever the optimizer's own state held (a sharded optimizer's, say)
    again = make_agent(8, lr_schedule="linear", warmup_steps=2)
    again.load_scheduler(tmp_path / "ckpt")
    assert train_steps(again, 5) == straight[3:]


def test_a_checkpoint_of_another_schedule_or_of_none_is_refused_in_one_line(tmp_path):
    first = make_agent(8, lr_schedule="linear", warmup_steps=2)
    train_steps(first, 2)
    save(first, tmp_path / "ckpt")
    with pytest.raises(ConfigError, match=r"agents\.a\.lr_schedule: .*spans 8 steps.*resume with trainer\.steps=8") as e:
        make_agent(16, lr_schedule="linear", warmup_steps=2).load_scheduler(tmp_path / "ckpt")
    assert "\n" not in str(e.value)
    (tmp_path / "ckpt" / SCHEDULER_FILE).unlink()
    with pytest.raises(ConfigError, match=r"agents\.a\.lr_schedule=linear: .* has no scheduler\.pt") as e:
        make_agent(8, lr_schedule="linear", warmup_steps=2).load_scheduler(tmp_path / "ckpt")
    assert "\n" not in str(e.value)


def test_the_agent_saves_its_scheduler_beside_its_optimizer(tmp_path):
    agent = make_agent(8, lr_schedule="cosine", warmup_steps=2)
    agent.model.save_pretrained = lambda path: None  # a plain torch module: only the optimizer files matter here
    agent.tokenizer.save_pretrained = lambda path: None
    agent.save(tmp_path / "with")
    assert (tmp_path / "with" / SCHEDULER_FILE).is_file() and (tmp_path / "with" / "optimizer.pt").is_file()
    constant = make_agent(8)
    constant.model.save_pretrained = lambda path: None
    constant.tokenizer.save_pretrained = lambda path: None
    constant.save(tmp_path / "without")
    assert not (tmp_path / "without" / SCHEDULER_FILE).exists()


def test_the_run_directory_docs_name_the_scheduler_file():
    """docs/usage.md's run-directory listing names what an agent's checkpoint holds beside its weights."""
    from pathlib import Path

    usage = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text(encoding="utf-8")
    listing = usage.split("## The run directory", 1)[1].split("```", 2)[1]
    checkpoints = listing.split("checkpoints/step-*/", 1)[1].split("export/", 1)[0]
    assert SCHEDULER_FILE in checkpoints and "optimizer.pt" in checkpoints and "trainer_state.pt" in checkpoints
