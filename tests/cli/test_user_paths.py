"""The frictions a new user met (issue 26): a config file layered on a preset, resuming by run directory
and from the run's own config, a finished run, no empty runs/ left behind, did-you-mean for keys and
names, the listings, and what `hacrl eval --run` evaluated."""

from __future__ import annotations

import json

import pytest

from hacrl.cli import main
from hacrl.config import load_config

QUICK = ["--set", "trainer.eval_size=10", "--set", "trainer.log_samples=0", "--set", "trainer.steps=1"]


def test_a_config_file_layers_on_a_preset_then_set_wins(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("trainer: {steps: 3, batch_size: 8}\nagents:\n  - {id: llama-bpe, lr: 1.0e-4}\n")
    cfg = load_config("tiny-test", mine, ["trainer.batch_size=2"])
    assert (cfg.trainer.steps, cfg.trainer.batch_size, cfg.trainer.eval_size) == (3, 2, 50)  # file, --set, preset
    assert [(a.id, a.lr) for a in cfg.agents] == [("qwen-char", 3e-4), ("llama-bpe", 1e-4)]  # merged by id
    # a file naming agents the preset does not have brings its own list
    mine.write_text("agents:\n  - {id: solo, model: 'builtin:qwen2-char'}\n")
    assert [a.id for a in load_config("tiny-test", mine).agents] == ["solo"]


def test_a_dataset_task_without_a_name_is_named_after_its_file(tmp_path):
    path = tmp_path / "my_problems.jsonl"
    cfg = load_config("tiny-test", overrides=["task.kind=dataset", f"task.train_path={path}"])
    assert cfg.task.name == "my_problems"
    named = load_config("tiny-test", overrides=["task.kind=dataset", f"task.train_path={path}", "task.name=mine"])
    assert named.task.name == "mine"


@pytest.mark.parametrize(("args", "expected"), [
    (["--set", "trainer.step=3"], ("unknown key 'trainer.step'; did you mean 'trainer.steps'? "
                                   "(every key: `hacrl presets --fields`)")),
    (["--set", "trainer.delta=0.6"], "did you mean 'algorithm.delta'?"),
    (["--set", "agents.qwen-char.lrr=1"], "did you mean 'agents.qwen-char.lr'?"),
    (["--set", "task.name=ad2"], "unknown task 'ad2'; did you mean 'add2'? valid: add2, add2-trace, add3, mixed, mul1x3"),
    (["--set", "algorithm.name=hacop"], "unknown algorithm 'hacop'; did you mean 'hacpo'?"),
    (["--preset", "tiny-tset"], "--preset 'tiny-tset' is unknown; did you mean 'tiny-test'?"),
])
def test_a_typo_names_what_was_meant(tmp_path, capsys, args, expected):
    assert main(["train", "--preset", "tiny-test", *args, "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not (tmp_path / "run").exists()


def test_the_listings_name_the_tasks_and_algorithms(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "builtin tasks (task.name): add2, add2-trace, add3, mixed, mul1x3" in out and "hub-pair-gsm8k" in out
    assert main(["presets", "--fields"]) == 0
    fields = capsys.readouterr().out.splitlines()
    assert any(line.startswith("task.name") and "builtin: add2, add2-trace, add3, mixed, mul1x3" in line for line in fields)


def test_a_failed_run_leaves_no_empty_runs_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--preset", "tiny-test", "--set", "agents.qwen-char.model=/no/such/model"]) == 2
    assert main(["train", "--preset", "tiny-test", "--resume"]) == 2  # runs/<new name> holds no run
    assert main(["train", "--preset", "tiny-test", "--resume", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert "neither a run directory nor a complete checkpoint" in err and "--output RUN --resume" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.model
def test_resume_by_run_directory_from_its_own_config(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny-test", *QUICK, "--output", str(run), "-q"]) == 0
    assert "finished 1 step of hacpo" in capsys.readouterr().out
    lines = (run / "metrics.jsonl").read_text()

    # --resume RUN (no --preset): the run directory is accepted, the run's config.yaml used, nothing trained
    assert main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{run} already finished at step 1 (trainer.steps=1); nothing to train" in out
    assert "after -" not in out and "before 0." in out and "after 0." in out
    assert f"to train further: hacrl train --set trainer.steps=2 --output {run} --resume" in out
    assert (run / "metrics.jsonl").read_text() == lines
    # --output RUN --resume: the run's own config (tiny-test), not the default preset, with --set on top
    assert main(["train", "--output", str(run), "--resume", "--set", "trainer.steps=2", "-q"]) == 0
    assert "finished 2 steps of hacpo" in capsys.readouterr().out
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    # --resume RUN with another --output is one line naming the command
    assert main(["train", "--resume", str(run), "--output", str(tmp_path / "other")]) == 2
    assert f"resume it with: hacrl train --output {run} --resume" in capsys.readouterr().err

    # eval --run says which checkpoint it evaluated, and why its count differs from training's evaluation
    assert main(["eval", "--run", str(run), "--n", "5"]) == 0
    err = capsys.readouterr().err
    assert f"eval: --run {run}: the latest intact checkpoint, step-000002 (step 2 of 2, the end of training)" in err
    assert "the first 5 held-out problems (--n 5); training's evaluations (eval.jsonl) used the first 10" in err
