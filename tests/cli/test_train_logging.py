"""What `hacrl train` logs and prints, as a TRL user expects it (issue 59, item 3), with the tiny models:

- several weighted rewards: each function's mean per agent and step (``agent/<id>/reward/<name>``, TRL's
  ``rewards/<name>/mean``) beside the weighted sum, and the training itself unchanged by them;
- a line per phase that runs long (none for a quick step), none with ``-q``;
- the end line says "reward", not "accuracy", when rewards fall outside [0, 1]."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from hacrl.cli import main
from hacrl.rewards import get_reward

pytestmark = pytest.mark.model

REWARDS = Path(__file__).resolve().parents[1] / "rewards" / "step_rewards.py"
QUICK = ["--set", "trainer.steps=2", "--set", "trainer.eval_size=20", "--set", "trainer.log_samples=4"]


def data(tmp_path: Path) -> Path:
    path = tmp_path / "sums.jsonl"
    rows = [{"prompt": f"{a:02d}+{b:02d}=", "solution": str(a + b)} for a, b in
            ((i * 7 % 100, i * 13 % 100) for i in range(60))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def train(tmp_path: Path, name: str, reward: str, *extra: str) -> tuple[int, Path]:
    run = tmp_path / name
    rc = main(["train", "--preset", "tiny-test", "--set", "task.kind=dataset", "--set",
               f"task.train_path={data(tmp_path)}", "--set", f"task.reward={reward}", *QUICK, *extra,
               "--output", str(run)])
    return rc, run


def steps(run: Path) -> list[dict]:
    return [m for m in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if m["step"] > 0]


def answers(run: Path, step: int) -> list[dict]:
    lines = (run / "samples" / f"step-{step:06d}.jsonl").read_text().splitlines()
    return [{**a, "solution": row["answer"]} for row in map(json.loads, lines) for a in row["answers"]]


def function_key(key: str) -> bool:
    """``agent/<id>/reward/<function>`` (agent ids hold no '/')."""
    return key.startswith("agent/") and key.count("/") == 3 and key.split("/")[2] == "reward"


PAIR = f"[{REWARDS}:accuracy, {REWARDS}:brevity]"


def test_weighted_rewards_log_each_functions_mean_per_agent(tmp_path):
    accuracy, brevity = get_reward(f"{REWARDS}:accuracy"), get_reward(f"{REWARDS}:brevity")
    rc, run = train(tmp_path, "pair", PAIR, "--set", "task.reward_weights=[1.0, 0.5]", "-q")
    assert rc == 0
    for line in steps(run):
        for agent in ("qwen-char", "llama-bpe"):
            own = [a for a in answers(run, line["step"]) if a["agent"] == agent]  # every answer of the step
            right = accuracy([a["text"] for a in own], [a["solution"] for a in own])
            short = [b for b in (brevity(a["text"], {}) for a in own) if b is not None]
            assert line[f"agent/{agent}/reward/accuracy"] == pytest.approx(sum(right) / len(right))
            if short:
                assert line[f"agent/{agent}/reward/brevity"] == pytest.approx(sum(short) / len(short))
            assert line[f"agent/{agent}/reward"] == pytest.approx(
                sum(a["reward"] for a in own if a["reward"] is not None) / sum(a["reward"] is not None for a in own))


def test_the_per_function_metrics_leave_the_training_as_it_was(tmp_path):
    """The weighted pair trains exactly as one reward computing the same sum by hand: the same rewards to the bit,
    the same losses and evaluations; a single reward gets no per-function key."""
    _, pair = train(tmp_path, "pair", PAIR, "--set", "task.reward_weights=[1.0, 0.5]", "-q")
    _, single = train(tmp_path, "single", f"{REWARDS}:weighted_by_hand", "-q")

    def comparable(line: dict) -> dict:  # what the runs share: all but the clock and the per-function means
        return {k: v for k, v in line.items() if not k.startswith("timing/") and not function_key(k)}

    assert not any(function_key(k) for line in steps(single) for k in line)
    assert len(steps(single)) == 2 and [comparable(m) for m in steps(pair)] == [comparable(m) for m in steps(single)]
    for step in (1, 2):
        assert [a["reward"] for a in answers(pair, step)] == [a["reward"] for a in answers(single, step)]
    assert (pair / "eval.jsonl").read_text() == (single / "eval.jsonl").read_text()


def test_a_long_phase_gets_a_line_a_quick_step_none(tmp_path, capsys, monkeypatch):
    from hacrl.cli import train as train_cli
    from hacrl.trainer.trainer import Trainer

    rc, _ = train(tmp_path, "quick", PAIR)  # every phase well under the threshold: the step lines as before
    err = capsys.readouterr().err
    assert rc == 0 and [line.split("  ")[0] for line in err.splitlines() if line.startswith("step ")] == \
        ["step 1/2", "step 2/2"]
    assert not [line for line in err.splitlines() if line.startswith("  step ")]

    check = Trainer._validation_check

    def slow_check(self):  # a validation phase of 1 s: 5 times the update's, the slowest phase of the tiny run
        time.sleep(1.0)
        return check(self)

    monkeypatch.setattr(Trainer, "_validation_check", slow_check)
    monkeypatch.setattr(train_cli, "PHASE_LINE_S", 0.8)
    rc, _ = train(tmp_path, "slow", PAIR)
    lines = capsys.readouterr().err.splitlines()
    phase_lines = [line for line in lines if line.startswith("  step ")]
    assert rc == 0 and [line.rsplit(" ", 2)[0] for line in phase_lines] == ["  step 1: validation",
                                                                             "  step 2: validation"]
    assert all(1.0 <= float(line.split()[-2]) < 5 and line.endswith(" s") for line in phase_lines)
    assert lines.index(phase_lines[0]) < next(i for i, line in enumerate(lines) if line.startswith("step 1/2"))

    rc, _ = train(tmp_path, "slow-quiet", PAIR, "-q")  # -q: no line per step, none per phase
    assert rc == 0 and "step " not in capsys.readouterr().err


def test_rewards_outside_0_1_are_reported_as_rewards(tmp_path, capsys):
    rc, _ = train(tmp_path, "doubled", f"{REWARDS}:doubled", "-q")
    out = capsys.readouterr().out
    assert rc == 0 and "; held-out mean greedy reward on " in out and "accuracy" not in out
    rc, _ = train(tmp_path, "unit", f"{REWARDS}:accuracy", "-q")
    assert rc == 0 and "; held-out greedy accuracy on " in capsys.readouterr().out
