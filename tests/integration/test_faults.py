"""Kill -9 at several points of a run, resume, and get exactly the metrics of an uninterrupted run."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from hacrl.trainer.checkpoint import complete_checkpoints

ARGS = ["--preset", "tiny-test", "--set", "trainer.steps=4", "--set", "trainer.checkpoint_every=1",
        "--set", "trainer.eval_size=20", "--set", "trainer.keep_last=2", "-q"]


def train(out, *extra, failpoint=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HACRL_FAILPOINT", None)
    if failpoint:
        env["HACRL_FAILPOINT"] = failpoint
    return subprocess.run([sys.executable, "-m", "hacrl.cli", "train", *ARGS, "--output", str(out), *extra],
                          capture_output=True, text=True, env=env, timeout=300)


def metrics(run_dir):
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in rec.items() if not k.startswith("timing/")} for rec in lines]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    res = train(out)
    assert res.returncode == 0, res.stderr
    return metrics(out)


@pytest.mark.parametrize("point", ["rollout@3", "update@3", "checkpoint@3"])
def test_kill_9_then_resume_matches_an_uninterrupted_run(tmp_path, reference, point):
    out = tmp_path / "run"
    res = train(out, failpoint=point)
    assert res.returncode == -signal.SIGKILL
    done = complete_checkpoints(out / "checkpoints")
    assert [p.name for p in done] == ["step-000001", "step-000002"]  # step 3 never completed
    res = train(out, "--resume")
    assert res.returncode == 0, res.stderr
    assert metrics(out) == reference
    assert not list((out / "checkpoints").glob(".tmp-*"))  # the half-written checkpoint was cleaned up


def test_sigterm_checkpoints_and_says_how_to_resume(tmp_path, reference):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "hacrl.cli", "train", *ARGS, "--set", "trainer.steps=4",
                             "--output", str(out)], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env)
    deadline = time.time() + 120
    metrics_file = out / "metrics.jsonl"
    while time.time() < deadline and not (metrics_file.is_file() and metrics_file.read_text().strip()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 130), err  # 0 if the run was already finishing
    if proc.returncode == 130:
        assert "--resume" in err
        res = train(out, "--resume")
        assert res.returncode == 0, res.stderr
    assert metrics(out) == reference


def test_a_run_killed_before_its_first_checkpoint_names_the_way_out(tmp_path, capsys):
    from hacrl.cli import main

    out = tmp_path / "run"
    args = ["--preset", "tiny-test", "--set", "trainer.eval_size=10", "--set", "trainer.steps=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HACRL_FAILPOINT": "rollout@1"}
    res = subprocess.run([sys.executable, "-m", "hacrl.cli", "train", *args, "--output", str(out)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == -signal.SIGKILL
    assert complete_checkpoints(out / "checkpoints") == [] and (out / "config.yaml").is_file()
    assert "pid" in (out / ".hacrl.lock").read_text()  # the killed holder's lock, left behind
    for flag in (["--resume"], []):  # both name the one way out, as a command
        assert main(["train", *args, "--output", str(out), *flag]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "start over with: hacrl train" in err[0], err
    command = err[0].split("start over with: ")[1]
    assert command.endswith(f"--output {out} --overwrite")
    assert main([*shlex.split(command)[1:], "-q"]) == 0  # takes over the dead process's lock
    assert [p.name for p in complete_checkpoints(out / "checkpoints")] == ["step-000001"]
