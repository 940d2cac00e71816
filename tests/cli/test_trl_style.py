"""A data set in TRL's layout with a reward written as TRL's documentation writes it trains from the CLI with
the tiny models; a reward that breaks its contract stops `hacrl train` with one line before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hacrl.cli import main

REWARDS = Path(__file__).resolve().parents[1] / "rewards" / "trl_rewards.py"
QUICK = ["--set", "trainer.steps=2", "--set", "trainer.eval_size=20", "--set", "trainer.log_samples=1", "-q"]


def trl_data(tmp_path: Path) -> Path:
    path = tmp_path / "trl.jsonl"
    rows = [{"prompt": f"{a:02d}+{b:02d}=", "solution": str(a + b), "difficulty": "hard" if a + b > 99 else "easy"}
            for a, b in ((i * 7 % 100, i * 13 % 100) for i in range(60))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_trl_dataset_and_trl_rewards_train_from_the_cli(tmp_path, capsys):
    data, run = trl_data(tmp_path), tmp_path / "run"
    rc = main(["train", "--preset", "tiny-test", "--set", "task.kind=dataset", "--set", f"task.train_path={data}",
               "--set", f"task.reward=[{REWARDS}:accuracy_reward, {REWARDS}:hard_only]",
               "--set", "task.reward_weights=[1.0, 0.1]", *QUICK, "--output", str(run)])
    assert rc == 0, capsys.readouterr().err
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(s.get("reward/ok", 0) > 0 for s in steps)
    sample = json.loads((run / "samples" / "step-000001.jsonl").read_text().splitlines()[0])
    assert "step by step" not in json.dumps(sample)  # the prompt column as written


@pytest.mark.parametrize(("reward", "message"), [
    ("wrong_length", "returned 1 values for 2 completions"),
    # TRL's docs' reward on data whose ground truth is in `solution`: a keyword the rows lack, named at once
    ("reward_func", "needs the keyword 'ground_truth', which the rows do not have"),
])
def test_a_broken_trl_reward_stops_the_run_with_one_line(tmp_path, capsys, reward, message):
    data, run = trl_data(tmp_path), tmp_path / "run"
    rc = main(["train", "--preset", "tiny-test", "--set", "task.kind=dataset", "--set", f"task.train_path={data}",
               "--set", f"task.reward={REWARDS}:{reward}", *QUICK, "--output", str(run)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err
    assert not run.exists()


@pytest.mark.parametrize("reward", ["reward_func", "reads_ground_truth"])
def test_a_reward_reading_a_column_the_data_lacks_fails_the_check(tmp_path, capsys, reward):
    """`reward_func(completions, ground_truth, **kwargs)` (or one reading kwargs["ground_truth"]) on data whose
    column is `solution`: `--check` calls it on the first row and names the column and the columns present."""
    data = trl_data(tmp_path)
    rc = main(["train", "--preset", "tiny-test", "--set", "task.kind=dataset", "--set", f"task.train_path={data}",
               "--set", "trainer.eval_size=2", "--set", f"task.reward={REWARDS}:{reward}", "--check"])
    problems = [line for line in capsys.readouterr().err.splitlines() if line.startswith("  [")]
    assert rc == 2 and len(problems) == 1, problems
    assert problems[0].startswith("  [data and reward] task.reward: reward ") and "'ground_truth'" in problems[0]
    assert all(column in problems[0] for column in ("solution", "difficulty")), problems[0]
