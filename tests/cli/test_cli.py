"""The `hacrl` command as a user meets it: a smoke run, and bad input that must exit 2 with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def hacrl(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "hacrl.cli", *args], capture_output=True, text=True, env=ENV,
                          cwd=cwd, timeout=300)


@pytest.mark.model
def test_train_smoke_writes_the_run_directory(tmp_path):
    out = tmp_path / "run"
    res = hacrl("train", "--preset", "tiny-test", "--set", "trainer.steps=2", "--output", str(out))
    assert res.returncode == 0, res.stderr
    assert "before" in res.stdout and "after" in res.stdout
    for name in ("config.yaml", "metrics.jsonl", "eval.jsonl", "samples/step-000001.jsonl",
                 "checkpoints/step-000002/manifest.json", "checkpoints/step-000002/trainer_state.pt"):
        assert (out / name).is_file(), name
    assert any((out / "tensorboard").iterdir())
    for agent in ("qwen-char", "llama-bpe"):
        assert (out / "checkpoints/step-000002/agents" / agent / "model.safetensors").is_file()
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]
    # eval of the trained run's checkpoint works from the run directory
    res = hacrl("eval", "--run", str(out), "--n", "20", "--json")
    assert res.returncode == 0, res.stderr
    assert [r["agent"] for r in json.loads(res.stdout)] == ["qwen-char", "llama-bpe"]


def test_presets_lists_the_embedded_presets():
    res = hacrl("presets")
    assert res.returncode == 0
    for name in ("tiny-model", "tiny-state", "tiny-size", "tiny-3agents", "tiny-test"):
        assert name in res.stdout


BAD = [
    (["--set", "trainer.stepz=3"], "unknown key 'trainer.stepz'"),
    (["--set", "trainer.steps=many"], "trainer.steps"),
    (["--set", "trainer.steps=-1"], "trainer.steps"),
    (["--set", "nonsense"], "expected key=value"),
    (["--set", "algorithm.name=gspo", "--set", "rollout.rollouts_per_prompt=1"], "rollout.rollouts_per_prompt"),
    (["--set", "algorithm.delta=1.5"], "algorithm.delta"),
    (["--set", "algorithm.clip_low=1.5"], "algorithm.clip_low"),
    (["--set", "algorithm.name=ppo"], "unknown algorithm 'ppo'"),
    (["--set", "task.name=chess"], "unknown task 'chess'"),
    (["--set", "agents.llama-bpe.id=qwen-char"], "duplicate id 'qwen-char'"),
    (["--set", "agents.nobody.lr=1"], "no agent with id 'nobody'"),
    (["--set", "trainer.minibatch_size=7"], "trainer.minibatch_size=7"),
    (["--set", "agents.qwen-char.model=/nonexistent/model"], "agents.qwen-char.model"),
    (["--set", "agents.qwen-char.model=."], "agents.qwen-char.model"),  # a directory with no model in it
    (["--set", "agents.qwen-char.data_parallel=2"], "needs backend.name=ray"),
    (["--set", "rollout.engine_options.enable_sleep_mode=true"], "enable_sleep_mode"),
    (["--set", "rollout.engine_options.bogus=1"], "rollout.engine_options.bogus"),
    (["--set", "rollout.engine_options.sampler=beam"], "rollout.engine_options.sampler"),
    (["--set", "rollout.engine=sglang"], "rollout.engine"),
    (["--set", "backend.name=ray", "--set", "agents.qwen-char.device=cuda"], "gets no GPU"),
    (["--set", "backend.name=ray", "--set", "backend.num_gpus_per_agent=1", "--set", "agents.qwen-char.device=cuda:1"],
     "device=cuda"),
    (["--preset", "no-such-preset"], "unknown"),
    (["--config", "missing.yaml"], "no such file"),
    (["--config", "."], "is a directory"),
    # numbers take no booleans and no inf/nan (#17); agents are named by id, as --set names them
    (["--set", "trainer.steps=true"], "trainer.steps: a number is expected, not a boolean"),
    (["--set", "trainer.threads=false"], "trainer.threads: a number is expected"),
    (["--set", "agents.qwen-char.lr=inf"], "agents.qwen-char.lr: Input should be a finite number"),
    (["--set", "agents.llama-bpe.lr=.nan"], "agents.llama-bpe.lr: Input should be a finite number"),
    (["--set", "algorithm.alpha=.inf"], "algorithm.alpha"),
    (["--set", "agents.llama-bpe.grad_clip=0"], "agents.llama-bpe.grad_clip"),
    # devices torch does not know or this machine does not have; unknown builtin models
    (["--set", "agents.qwen-char.device=nonsense"], "agents.qwen-char.device='nonsense': not a torch device"),
    (["--set", "agents.llama-bpe.device=cuda:99"], "agents.llama-bpe.device=cuda:99"),
    (["--set", "agents.qwen-char.device=xpu"], "agents.qwen-char.device=xpu"),
    (["--set", "agents.qwen-char.model=builtin:nope"], "agents.qwen-char.model: no tiny agent 'nope'"),
    *([(["--set", "agents.qwen-char.device=cuda"], "no CUDA device is available")]
      if not torch.cuda.is_available() else []),
]


@pytest.mark.parametrize("args,expected", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, args, expected):
    from hacrl.cli import main

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    if "--preset" not in args and "--config" not in args:
        args = ["--preset", "tiny-test", *args]
    assert main(["train", *args, "--output", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hacrl: error:"), lines
    assert expected in lines[0]
    assert not out.exists()


@pytest.mark.model
@pytest.mark.parametrize("args", [["--set", "trainer.stepz=3"], ["--set", "agents.qwen-char.model=/nonexistent"]])
def test_bad_input_in_a_fresh_process_prints_no_traceback(tmp_path, args):
    res = hacrl("train", "--preset", "tiny-test", *args, "--output", str(tmp_path / "run"), cwd=tmp_path)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.model
def test_existing_run_directory_is_refused_unless_resume_or_overwrite(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text("{}\n")
    res = hacrl("train", "--preset", "tiny-test", "--output", str(out))
    assert res.returncode == 2
    # no checkpoint yet: the one way out is named, as a command
    assert f"start over with: hacrl train --preset tiny-test --output {out} --overwrite" in res.stderr
    assert (out / "metrics.jsonl").read_text() == "{}\n"
    res = hacrl("train", "--preset", "tiny-test", "--output", str(out), "--resume")
    assert res.returncode == 2 and "no complete checkpoint" in res.stderr and "--overwrite" in res.stderr


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    from hacrl.cli import main

    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("# café\nagents: []\n".encode("latin-1"))
    assert main(["train", "--config", str(bad), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hacrl: error: --config {bad}: not UTF-8 text (byte 0xe9 at offset 5); save the file as UTF-8"]


@pytest.mark.model
def test_invalid_yaml_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents: [\n")
    res = hacrl("train", "--config", str(bad), "--output", str(tmp_path / "run"))
    assert res.returncode == 2 and "not valid YAML" in res.stderr


@pytest.mark.model
def test_disk_full_while_writing_metrics_is_one_line_and_keeps_the_checkpoint(tmp_path, monkeypatch, capsys):
    import errno

    from hacrl.cli import main
    from hacrl.run import sinks

    out = tmp_path / "run"
    real_log = sinks.JsonlSink.log

    def log(self, step, metrics):
        if step == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        real_log(self, step, metrics)

    monkeypatch.setattr(sinks.JsonlSink, "log", log)
    args = ["train", "--preset", "tiny-test", "--set", "trainer.steps=3", "--set", "trainer.checkpoint_every=1",
            "--set", "trainer.eval_size=10", "--output", str(out), "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "disk full" in err[0] and "--resume" in err[0]
    assert (out / "checkpoints" / "step-000001" / "manifest.json").is_file()
    monkeypatch.setattr(sinks.JsonlSink, "log", real_log)
    assert main([*args, "--resume"]) == 0
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3]
