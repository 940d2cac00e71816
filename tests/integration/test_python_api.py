"""The Python trainer (hacrl.api): models, reward callables and rows in, a run directory and the evaluation
out, through the same start as `hacrl train`; callables without a spec reach the scorer's worker processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from hacrl.api import HACRLTrainer, train
from hacrl.config import ConfigError

QUICK = {"trainer.steps": 2, "trainer.eval_size": 20, "trainer.log_samples": 0}
REWARDS = Path(__file__).resolve().parents[1] / "rewards" / "trl_rewards.py"


def rows(n: int = 60) -> list[dict]:
    return [{"prompt": f"{a:02d}+{b:02d}=", "solution": str(a + b), "difficulty": "hard" if a + b > 99 else "easy"}
            for a, b in ((i * 7 % 100, i * 13 % 100) for i in range(n))]


def test_a_closure_reward_and_a_dataset_train_with_the_tiny_models(tmp_path):
    datasets = pytest.importorskip("datasets")
    pids = tmp_path / "pids"

    def accuracy(completions, solution, **kwargs):  # a closure: no importable spec, so it travels pickled
        with open(pids, "a") as f:
            f.write(f"{os.getpid()}\n")
        return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]

    result = train(["builtin:qwen2-char", "builtin:llama-bpe"], [accuracy, f"{REWARDS}:hard_only"],
                   reward_weights=[1.0, 0.1], train_dataset=datasets.Dataset.from_list(rows()),
                   preset="tiny-test", overrides=QUICK, output_dir=tmp_path / "runs" / "api")
    assert result.run_dir == tmp_path / "runs" / "api" and (result.run_dir / "metrics.jsonl").is_file()
    assert set(result.accuracy) == {"qwen-char", "llama-bpe"}
    assert all(before is not None and after is not None for before, after in result.accuracy.values())
    task = yaml.safe_load((result.run_dir / "config.yaml").read_text())["task"]
    assert task["reward"][0].startswith("python:") and task["reward"][1] == f"{REWARDS}:hard_only"
    assert task["reward_weights"] == [1.0, 0.1] and task["kind"] == "dataset"
    assert Path(task["train_path"]).parent == tmp_path / "runs" / ".hacrl-data"  # beside the run, by content
    assert {int(p) for p in pids.read_text().split()} - {os.getpid()}, "scored in a worker process"
    # the same rows again are the same file, the same closure the same python: name: the run resumes
    resumed = train(["builtin:qwen2-char", "builtin:llama-bpe"], [accuracy, f"{REWARDS}:hard_only"],
                    reward_weights=[1.0, 0.1], train_dataset=rows(), preset="tiny-test",
                    overrides={**QUICK, "trainer.steps": 3}, output_dir=tmp_path / "runs" / "api", resume=True)
    assert resumed.config.task.train_path == task["train_path"] and resumed.config.task.reward[0] == task["reward"][0]
    assert resumed.result["last"] and '"step": 3' in (resumed.run_dir / "metrics.jsonl").read_text()
    # resuming a finished run trains nothing and reads its evaluations back
    done = train(["builtin:qwen2-char", "builtin:llama-bpe"], [accuracy, f"{REWARDS}:hard_only"],
                 reward_weights=[1.0, 0.1], train_dataset=rows(), preset="tiny-test",
                 overrides={**QUICK, "trainer.steps": 3}, output_dir=tmp_path / "runs" / "api", resume=True)
    assert done.result == {} and done.accuracy == resumed.accuracy


@pytest.mark.model
def test_loaded_models_and_agent_fields(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hacrl.backends.resolve import resolve_model_path

    path = resolve_model_path("builtin:llama-bpe")
    loaded = (AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path))
    result = HACRLTrainer([{"id": "q", "model": "builtin:qwen2-char", "lr": 3e-4}, loaded],
                          f"{REWARDS}:accuracy_reward", train_dataset=rows(), preset="tiny-test", overrides=QUICK,
                          output_dir=tmp_path / "run").train()
    assert [a.id for a in result.config.agents] == ["q", "llama-bpe"]  # named after its name_or_path
    assert result.config.agents[1].model.startswith(str(tmp_path / ".hacrl-data" / "models"))
    assert set(result.accuracy) == {"q", "llama-bpe"}


def test_a_broken_reward_stops_before_any_model_loads(tmp_path):
    def one_float(completions, **kwargs):
        return 1.0

    trainer = HACRLTrainer(None, one_float, train_dataset=rows(), preset="tiny-test", overrides=QUICK,
                           output_dir=tmp_path / "run")
    with pytest.raises(ConfigError, match=r"^task.reward: reward python:.*one_float.* returned float, expected a list"):
        trainer.train()
    assert not (tmp_path / "run").exists()


def test_bad_arguments_are_one_line(tmp_path):
    datasets = pytest.importorskip("datasets")
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows())})
    with pytest.raises(ConfigError, match=r"train_dataset: a mapping of 'train' \(a DatasetDict\?\); pass one split"):
        HACRLTrainer(None, "exact", train_dataset=splits, output_dir=tmp_path / "r")
    with pytest.raises(ConfigError, match="reward_weights has 1 weights for 2 rewards"):
        HACRLTrainer(None, ["exact", "numeric"], reward_weights=[1.0], train_dataset=rows(), output_dir=tmp_path / "r")


def test_without_cloudpickle_a_python_reward_is_scored_inline(monkeypatch, caplog):
    from hacrl.rewards import RewardScorer, register_python, scorer

    monkeypatch.setattr(scorer, "_pickle_function", lambda fn: None)
    with RewardScorer(register_python(lambda completions, **kw: [0.5] * len(completions)), timeout_s=5.0) as s:
        assert s.timeout_s is None and s.score(["a"], [{"answer": "1"}]).rewards == [0.5] and not s.pids
    assert "scored inline, in this process, without a time limit" in caplog.text


def test_cloudpickle_is_a_dependency_so_a_closure_reward_needs_neither_ray_nor_a_warning(monkeypatch, caplog):
    import tomllib

    from hacrl.rewards import RewardScorer, register_python

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert any(dep.startswith("cloudpickle") for dep in pyproject["project"]["dependencies"])
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # Ray's copy of cloudpickle out of reach
    with RewardScorer(register_python(lambda completions, **kw: [0.5] * len(completions)), timeout_s=5.0) as s:
        assert s.timeout_s == 5.0 and s.score(["a"], [{"answer": "1"}]).rewards == [0.5] and s.pids
    assert "cloudpickle" not in caplog.text


@pytest.mark.model
def test_from_hacrl_import_trainer_trains_without_progress_bars_and_exports(tmp_path, capfd):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from hacrl import HACRLTrainer as Lazy

    trainer = Lazy(["builtin:qwen2-char", "builtin:llama-bpe"], "exact", preset="tiny-test", overrides=QUICK,
                   output_dir=tmp_path / "run")
    before = hf_logging.is_progress_bar_enabled()  # off after an in-process `hacrl train` (the CLI turns them off)
    hf_logging.enable_progress_bar()  # a Python user's default
    try:
        trainer.train()
        assert hf_logging.is_progress_bar_enabled()  # as they were, once training is over
    finally:
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "Writing model shards" not in err and "it/s]" not in err, err
    folders = trainer.export(tmp_path / "ship")
    assert [p.name for p in folders] == ["qwen-char", "llama-bpe"] and not list(tmp_path.glob("ship/*/*.pt"))
    AutoModelForCausalLM.from_pretrained(folders[1])


@pytest.mark.model
def test_the_trl_style_example_runs(tmp_path):
    import subprocess
    import sys

    example = Path(__file__).resolve().parents[2] / "examples" / "trl_style.py"
    res = subprocess.run([sys.executable, str(example), "--steps", "1", "--output", str(tmp_path / "run")],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[-1] == f"run directory: {tmp_path / 'run'}" and "held-out accuracy" in lines[-2]


@pytest.mark.model
def test_the_trl_docs_script_trains_with_a_schedule_two_weighted_rewards_and_exports(tmp_path, transformers_rates):
    """examples/trl_docs_script.py, TRL's documented script with only its models changed: its cosine schedule
    with warm-up gives transformers' rates at every step, both weighted rewards score every answer, and the
    exported folders load with from_pretrained."""
    import importlib.util
    import math
    import subprocess
    import sys

    from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

    example = Path(__file__).resolve().parents[2] / "examples" / "trl_docs_script.py"
    run = tmp_path / "run"
    res = subprocess.run([sys.executable, str(example), "--num_train_epochs", "0.1", "--output_dir", str(run)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    steps = cfg["trainer"]["steps"]
    assert steps == math.ceil(0.1 * 160 / (16 // 4))  # TRL's count: epochs × problems / prompts a step

    # the schedule: transformers' cosine with ⌈0.1 × steps⌉ warm-up steps, stepped once per step
    expected = transformers_rates(get_cosine_schedule_with_warmup, steps, lr=cfg["agents"][0]["lr"],
                                  num_warmup_steps=math.ceil(0.1 * steps), num_training_steps=steps)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for agent in ("qwen-char", "llama-bpe"):
        assert [m[f"agent/{agent}/lr"] for m in metrics if m["step"] > 0] == expected

    # both rewards: every sampled answer's reward is their weighted sum on its text, and each term counts
    spec = importlib.util.spec_from_file_location("trl_docs_script_under_test", example)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    terms = []
    for path in sorted((run / "samples").glob("step-*.jsonl")):
        for line in path.read_text().splitlines():
            sample = json.loads(line)
            for answer in sample["answers"]:
                length = 0.1 * script.reward_len([answer["text"]])[0]
                digits = 1.0 * script.reward_digits([answer["text"]], ground_truth=[sample["answer"]])[0]
                assert answer["reward"] == pytest.approx(length + digits), (answer, sample["answer"])
                terms.append((length, digits))
    assert any(length for length, _ in terms) and any(digits for _, digits in terms), terms
    for agent in ("qwen-char", "llama-bpe"):  # and each function's own mean is logged, as TRL's rewards/<name>
        assert all({f"agent/{agent}/reward/reward_len", f"agent/{agent}/reward/reward_digits"} <= set(m)
                   for m in metrics if m["step"] > 0)

    # the export: one plain Hugging Face folder per agent, no optimizer or scheduler state
    folders = [Path(line.removeprefix("exported: ")) for line in res.stdout.splitlines()
               if line.startswith("exported: ")]
    assert [f.name for f in folders] == ["qwen-char", "llama-bpe"]
    for folder in folders:
        assert not list(folder.glob("*.pt"))
        AutoModelForCausalLM.from_pretrained(folder)
        AutoTokenizer.from_pretrained(folder)


@pytest.mark.slow  # about 35 s on 2 shared cores: a local Ray instance starts
def test_a_closure_reward_on_the_ray_backend(tmp_path):
    pytest.importorskip("ray")
    pids = tmp_path / "pids"

    def accuracy(completions, solution, **kwargs):
        with open(pids, "a") as f:
            f.write(f"{os.getpid()} {os.getppid()}\n")
        return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]

    result = train(["builtin:qwen2-char", "builtin:llama-bpe"], accuracy, train_dataset=rows(), preset="tiny-test",
                   overrides={**QUICK, "backend.name": "ray", "backend.num_cpus_per_agent": 0.5},
                   output_dir=tmp_path / "run")
    assert set(result.accuracy) == {"qwen-char", "llama-bpe"}
    # the driver's scorer ran it, in its worker processes (children of this one), not in a Ray actor
    scored = [tuple(map(int, line.split())) for line in pids.read_text().splitlines()]
    assert scored and all(pid != os.getpid() and parent == os.getpid() for pid, parent in scored)
