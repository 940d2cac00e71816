"""``hacrl train --check``: a broken GPU config's every problem in one run, before anything loads."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest

from hacrl.cli import main

BROKEN = textwrap.dedent("""\
    task: {kind: dataset, train_path: data/gsm8k/train.jsonl, reward: mypkg.rewards:acc}
    agents:
      - {id: qwen3-1.7b, model: /models/qwen3-1.7b, device: "cuda:0", lr: 1.0e-6, data_parallel: 2, num_gpus: 1}
      - {id: llama, model: /models/llama-3b, device: cuda, lr: 1.0e-6}
    rollout: {engine: vllm}
    backend: {name: ray, num_gpus_per_agent: 1, num_cpus_per_agent: 64}
    """)


def test_a_broken_gpu_config_lists_every_problem_in_one_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpu.yaml").write_text(BROKEN)
    assert main(["train", "--config", "gpu.yaml", "--check"]) == 2
    err = capsys.readouterr().err
    lines = [line.strip() for line in err.splitlines()[1:]]
    kinds = [line.split("]", 1)[0] + "]" for line in lines]
    # no CUDA on this CPU machine (or fewer devices than asked), two missing models, the GPUs and CPUs Ray would
    # wait for, a reward that does not import, a data file that is not there: each named, none hiding another
    assert kinds.count("[devices]") == 2 and kinds.count("[models]") == 2 and kinds.count("[ray]") == 2
    assert "[reward]" in kinds and "[data and reward]" in kinds
    if importlib.util.find_spec("vllm") is None:
        assert "[extras] rollout.engine=vllm needs vllm: pip install 'hacrl[vllm]'" in lines
    assert "asks for 3 GPU(s)" in err or "ask for 3 GPU(s)" in err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()  # nothing loaded, nothing written
    assert err.splitlines()[0].startswith(f"hacrl train --check: {len(lines)} problems")


def test_every_config_error_at_once_and_a_clean_config_passes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--preset", "tiny-test", "--set", "trainer.stepz=3", "--set", "agents.llama-bpe.lrr=2",
                 "--check"]) == 2
    err = capsys.readouterr().err
    assert "'trainer.stepz'; did you mean 'trainer.steps'?" in err and "'agents.llama-bpe.lrr'" in err
    assert main(["train", "--preset", "tiny-test", "--check"]) == 0
    assert capsys.readouterr().out.startswith("hacrl train --check: no problem found")
    assert not (tmp_path / "runs").exists()


def test_schema_errors_and_every_other_check_in_one_pass(tmp_path, monkeypatch, capsys):
    """Schema errors no longer hide the rest: the other checks run with the keys in error at their defaults, and
    the header says so (not that everything was checked on the config as written)."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--preset", "tiny-test", "--set", "trainer.stepz=3", "--set", "agents.llama-bpe.lr=-1",
                 "--set", "agents.qwen-char.model=/nowhere/qwen", "--set", "agents.llama-bpe.device=cuda:7",
                 "--set", "task.kind=dataset", "--set", "task.train_path=missing.jsonl", "--check"]) == 2
    err = capsys.readouterr().err.splitlines()
    kinds = [line.strip().split("]", 1)[0] + "]" for line in err[1:]]
    assert kinds.count("[config]") == 2 and "[models]" in kinds and "[devices]" in kinds, err
    assert "[data and reward]" in kinds and "missing.jsonl" in "\n".join(err), err
    assert err[0] == (f"hacrl train --check: {len(err) - 1} problems (config checked; then, with the 2 keys in error "
                      "at their defaults, extras, devices, models, ray, reward, data and reward up to its first "
                      "problem):"), err[0]
    assert "Traceback" not in "\n".join(err) and not (tmp_path / "runs").exists()


def test_a_config_that_cannot_be_checked_further_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("agents:\n  - {model: builtin:llama-bpe}\n")  # no id: nothing to default
    assert main(["train", "--config", "bad.yaml", "--check"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "hacrl train --check: 1 problem (config checked; not the others: the config does not load):"
    assert err[1] == "  [config] config: agents.0.id is required"


def test_a_gpu_shortfall_ends_hacrl_train_before_ray_starts(tmp_path, monkeypatch, capsys):
    """`hacrl train` runs --check's resource check before Ray starts: no placement wait, no actor left pending
    for GPUs this machine lacks, one line, nothing written."""
    pytest.importorskip("ray")

    def no_start(*args, **kwargs):
        raise AssertionError("Ray was started for actors this machine cannot place")

    monkeypatch.setattr("ray.is_initialized", lambda: False)
    monkeypatch.setattr("ray.init", no_start)
    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny-test", "--set", "backend.name=ray", "--set",
                 "backend.num_gpus_per_agent=64", "-q", "--output", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ask for 128 GPU(s) and this machine has" in err[0], err
    assert err[0].startswith("hacrl: error: backend.name=ray: ") and not run.exists()


def _rows(path, n: int) -> None:
    path.write_text("".join(f'{{"question": "{i:02d}+{i:02d}=", "answer": "{2 * i}"}}\n' for i in range(n)))


def test_the_check_counts_epochs_as_training_does(tmp_path, monkeypatch, capsys):
    """`trainer.num_train_epochs` is counted into steps once the task is built: --check builds it too, so a
    builtin task with epochs, steps that disagree with the epochs and a warm-up longer than the counted run are
    found before anything loads."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--preset", "tiny-test", "--set", "trainer.steps=null", "--set",
                 "trainer.num_train_epochs=1", "--check"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[1].startswith("  [data and reward] trainer.num_train_epochs: task 'add2' draws new problems"), err
    _rows(tmp_path / "train.jsonl", 20)
    data = ["--set", "task.kind=dataset", "--set", f"task.train_path={tmp_path / 'train.jsonl'}", "--set",
            "task.test_fraction=0.5", "--set", "trainer.eval_size=5", "--set", "trainer.batch_size=4"]
    assert main(["train", "--preset", "tiny-test", *data, "--set", "trainer.steps=5", "--set",
                 "trainer.num_train_epochs=1", "--check"]) == 2  # 10 training rows at 4 a step: 3 steps
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "trainer.steps=5 and trainer.num_train_epochs=1 disagree" in err[1], err
    assert main(["train", "--preset", "tiny-test", *data, "--set", "trainer.steps=null", "--set",
                 "trainer.num_train_epochs=1", "--set", "agents.qwen-char.lr_schedule=cosine", "--set",
                 "agents.qwen-char.warmup_steps=4", "--check"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "agents.qwen-char.warmup_steps=4 is more than the run's 3 trainer.steps" in err[1], err
    assert main(["train", "--preset", "tiny-test", *data, "--set", "trainer.steps=null", "--set",
                 "trainer.num_train_epochs=1", "--check"]) == 0
    assert not (tmp_path / "runs").exists()


def test_settings_that_do_not_fit_the_algorithm_are_found_before_anything_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--preset", "tiny-test", "--set", "algorithm.trust_budget=true", "--check"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[1].strip() == ("[config] algorithm.trust_budget: hacpo holds no trust to move the "
                                                "budget by; set algorithm.name=trust or drop trust_budget"), err
    assert main(["train", "--preset", "tiny-test", "--set", "algorithm.name=trust", "--set", "trainer.mode=async",
                 "--check"]) == 2
    assert "trainer.mode=async: trust reads lock-step validation checks" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
