"""A stop that always stops: the first Ctrl-C (or SIGTERM) finishes the step and checkpoints, a second aborts at
once — also inside a step that would run for minutes — leaving the last complete checkpoint as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hacrl.trainer.trainer import StopRequests


def test_a_second_request_aborts_at_once():
    stop = StopRequests()
    stop.request(signal.SIGINT, None)
    assert stop.requested  # the first: finish the step, checkpoint, stop
    with pytest.raises(KeyboardInterrupt, match="aborted at a second SIGTERM; the last complete checkpoint is kept"):
        stop.request(signal.SIGTERM, None)


@pytest.mark.model
def test_two_ctrl_c_stop_a_huge_step_within_seconds(tmp_path):
    """A batch of 20,000 prompts makes step 1 run for many minutes on this machine; the run was told of the first
    SIGINT (a warning line), and the second one ends it within seconds with one line and exit code 130."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hacrl.cli", "train", "--preset", "tiny-test", "--set", "trainer.batch_size=20000",
         "--set", "trainer.eval_size=4", "--set", "trainer.steps=1", "--output", str(tmp_path / "run")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "run" / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.2)  # the models are loaded and the step-0 evaluation is written: step 1 is under way
        time.sleep(2.0)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)
        assert proc.poll() is None  # the first asks the step to finish
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert took < 30, took
    assert "send it again to abort at once" in err
    assert "hacrl: interrupted: aborted at a second SIGINT; the last complete checkpoint is kept" in err
    assert "Traceback" not in err
