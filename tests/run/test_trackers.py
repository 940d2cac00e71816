"""run.loggers: jsonl always, TensorBoard when installed, wandb (WANDB_MODE=offline) and trackio (its local
store in a tmp dir) with the same metric names, the config and run directory recorded, and --resume
continuing the same tracker run. Also the one-line warnings for a missing TensorBoard or math-verify."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hacrl.config import ConfigError, RunConfig, TaskConfig
from hacrl.rewards.math_reward import warn_if_no_math_verify
from hacrl.run import trackers
from hacrl.run.trackers import resolve_loggers

REPO_ROOT = Path(__file__).resolve().parents[2]


def _without(monkeypatch: pytest.MonkeyPatch, *missing: str) -> None:
    real = trackers._installed
    monkeypatch.setattr(trackers, "_installed", lambda m: m not in missing and real(m))


def test_default_loggers_follow_what_is_installed(monkeypatch, caplog) -> None:
    _without(monkeypatch, "tensorboard")
    with caplog.at_level(logging.WARNING):
        assert resolve_loggers(RunConfig()) == ["jsonl"]  # a plain install: no TensorBoard, no warning
    assert not caplog.records
    with caplog.at_level(logging.WARNING):
        assert resolve_loggers(RunConfig(tensorboard=True)) == ["jsonl"]  # asked for: one line
    assert len(caplog.records) == 1 and "pip install 'hacrl[report]'" in caplog.records[0].getMessage()
    monkeypatch.undo()
    pytest.importorskip("tensorboard")
    assert resolve_loggers(RunConfig()) == ["jsonl", "tensorboard"]
    assert resolve_loggers(RunConfig(tensorboard=False)) == ["jsonl"]
    assert resolve_loggers(RunConfig(loggers=["tensorboard"])) == ["jsonl", "tensorboard"]
    # a preset's `tensorboard: true` under the user's own list does not add TensorBoard to it
    assert resolve_loggers(RunConfig(tensorboard=True, loggers=["jsonl"])) == ["jsonl"]


def test_a_listed_logger_that_is_missing_stops_with_the_pip_command(monkeypatch) -> None:
    _without(monkeypatch, "wandb")
    with pytest.raises(ConfigError) as err:
        resolve_loggers(RunConfig(loggers=["jsonl", "wandb"]))
    assert str(err.value) == ("run.loggers: wandb is not installed; fix: pip install 'hacrl[wandb]' "
                              "or remove wandb from run.loggers")
    with pytest.raises(ValueError, match="loggers"):
        RunConfig(loggers=["mlflow"])


def test_math_reward_without_math_verify_warns_once_at_start(monkeypatch, caplog) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "math_verify" else real(name, *a))
    with caplog.at_level(logging.WARNING):
        assert warn_if_no_math_verify(TaskConfig(kind="dataset", train_path="x.jsonl"))  # the dataset default
        assert warn_if_no_math_verify(TaskConfig(reward="math"))
        assert warn_if_no_math_verify(TaskConfig(), benchmarks=True)
        assert not warn_if_no_math_verify(TaskConfig())  # add2's own verifier
        assert not warn_if_no_math_verify(TaskConfig(kind="dataset", reward="exact"))
    assert len(caplog.records) == 3
    assert "pip install 'hacrl[math]'" in caplog.records[0].getMessage()
    monkeypatch.undo()
    if real("math_verify") is not None:
        assert not warn_if_no_math_verify(TaskConfig(reward="math"))


# ---- wandb and trackio, offline ----------------------------------------------------------------------
def _wandb_records(path: Path):
    """The protobuf records of a .wandb file (a LevelDB-style log: 7-byte file header, 32 KiB blocks,
    each record chunk with a 7-byte header: crc32, length, type FULL/FIRST/MIDDLE/LAST)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf + chunk)
            buf = b""
            yield record
        elif kind in (2, 3):
            buf += chunk


def _wandb_run(path: Path) -> tuple[str, list[str], dict[int, set[str]]]:
    """(run id, config keys, step -> metric keys) of one offline .wandb file."""
    run_id, config, history = "", [], {}
    for r in _wandb_records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run_id, config = r.run.run_id, [u.key for u in r.run.config.update]
        elif kind == "history":
            items = {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
            history[int(json.loads(items["_step"]))] = {k for k in items if not k.startswith("_")}
    return run_id, config, history


def _train(run_dir: Path, env: dict[str, str], *extra: str) -> None:
    cmd = [sys.executable, "-m", "hacrl.cli", "train", "--preset", "tiny-test", "--output", str(run_dir),
           "-q",
           "--set", "run.loggers=[jsonl,tensorboard,wandb,trackio]", "--set", "trainer.eval_size=4",
           "--set", "trainer.checkpoint_every=1", *extra]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.model
def test_wandb_and_trackio_offline_same_names_config_and_resume(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("trackio")
    pytest.importorskip("tensorboard")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "TRACKIO_DIR": str(tmp_path / "trackio"),
           "HF_HOME": str(tmp_path / "hf"), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT / "src")}
    run = tmp_path / "run"
    _train(run, env, "--set", "trainer.steps=1")
    _train(run, env, "--resume", "--set", "trainer.steps=2")

    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    jsonl = {r["step"]: {k for k, v in r.items() if k != "step" and isinstance(v, int | float)}
             for r in lines}
    assert sorted(jsonl) == [0, 1, 2]
    assert "agent/qwen-char/reward" in jsonl[1] and "timing/rollout" in jsonl[2]

    ids = json.loads((run / "trackers.json").read_text())
    files = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2  # the run and its resumption: the same wandb run id
    seen: dict[int, set[str]] = {}
    for f in files:
        run_id, config, history = _wandb_run(f)
        assert run_id == ids["wandb"]["id"] and {"agents", "algorithm", "run_dir"} <= set(config)
        seen.update(history)
    assert seen == jsonl

    code = ("import json; from trackio.sqlite_storage import SQLiteStorage as S; "
            "print(json.dumps([S.get_runs('hacrl'), S.get_logs('hacrl', 'run'), "
            "S.get_run_config('hacrl', 'run')]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    runs, logs, config = json.loads(out.stdout.splitlines()[-1])
    assert runs == ["run"]  # resumed by name, not a second run
    tracked = {r["step"]: {k for k in r if k in jsonl[r["step"]]} for r in logs}
    assert tracked == jsonl
    assert config["run_dir"] == str(run.resolve()) and config["algorithm"]["name"] == "hacpo"
