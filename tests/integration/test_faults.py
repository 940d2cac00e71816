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

from hacrl.run.checkpoint import complete_checkpoints

pytestmark = pytest.mark.model

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


def _last_logged_step(metrics_file):
    if not metrics_file.is_file():
        return 0
    lines = [x for x in metrics_file.read_text().split("\n")[:-1] if x]  # complete lines only
    return max((json.loads(x)["step"] for x in lines), default=0)


def test_sigterm_checkpoints_the_step_it_arrived_in_and_says_how_to_resume(tmp_path, reference):
    # a run far longer than the test, without periodic checkpoints: the only checkpoint it can write before
    # its end is the one SIGTERM asks for, after finishing the step the signal arrived in
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HACRL_FAILPOINT", None)
    proc = subprocess.Popen([sys.executable, "-m", "hacrl.cli", "train", *ARGS, "--set", "trainer.steps=40",
                             "--set", "trainer.checkpoint_every=0", "--output", str(out)],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and _last_logged_step(out / "metrics.jsonl") < 1:
        time.sleep(0.02)
    seen = _last_logged_step(out / "metrics.jsonl")  # step 1 done; the signal arrives in step seen or seen + 1
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    stopped = _last_logged_step(out / "metrics.jsonl")
    assert 1 <= seen <= stopped <= seen + 1 < 4, (seen, stopped)
    assert [p.name for p in complete_checkpoints(out / "checkpoints")] == [f"step-{stopped:06d}"]
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"hacrl: stopped at step {stopped}; resume with: hacrl train "), last
    command = shlex.split(last.split("resume with: ")[1])
    assert command[-1] == "--resume" and command[command.index("--output") + 1] == str(out)
    # the printed command continues the run; cut to 4 steps it ends as the uninterrupted run did
    res = subprocess.run([sys.executable, "-m", "hacrl.cli", *command[1:], "--set", "trainer.steps=4", "-q"],
                         capture_output=True, text=True, env=env, timeout=300)
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


def test_a_compare_run_killed_from_outside_keeps_the_time_it_spent(tmp_path):
    # compare.json is the run's cost record: a process killed with -9 cannot write at its end, so each step
    # writes it; the resumed invocation adds its own time, and the report's wall time is the sum of both
    out = tmp_path / "cmp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "hacrl.cli", "compare", "--preset", "tiny-test", "--algos", "gspo", "--seeds", "1",
            "--set", "trainer.steps=4", "--set", "trainer.checkpoint_every=2", "--set", "trainer.eval_size=20",
            "--output", str(out)]
    res = subprocess.run(args, capture_output=True, text=True, env={**env, "HACRL_FAILPOINT": "rollout@4"},
                         timeout=300)
    assert res.returncode == -signal.SIGKILL, res.stderr
    run = out / "runs" / "gspo" / "seed-0"
    cut = json.loads((run / "compare.json").read_text())
    (first,) = cut["invocations"]
    assert (first["status"], first["from_step"], first["to_step"]) == ("cut short", 0, 3)
    assert first["wall_s"] > 0 and cut["wall_s"] == first["wall_s"]

    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "resuming from step 2 of 4" in res.stdout
    done = json.loads((run / "compare.json").read_text())
    assert done["invocations"][0] == first  # the cut-short one is kept as it was written
    second = done["invocations"][1]
    assert (second["status"], second["from_step"], second["to_step"]) == ("resumed", 2, 4)
    assert done["wall_s"] == pytest.approx(first["wall_s"] + second["wall_s"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"][0]["wall_s"] == pytest.approx(done["wall_s"])
