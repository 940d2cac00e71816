"""`hacrl compare --jobs N`: runs trained side by side write what one at a time writes; a stopped parallel
comparison resumes to the same report; the lanes' thread count; Ray tasks on a local instance."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_compare import _overrides, tiny_models  # noqa: F401 - the fixture, shared

from hacrl.config import ConfigError
from hacrl.report.compare import _lane_threads, run_comparison
from hacrl.report.parallel import lane_threads, run_resources
from hacrl.report.runs import mark_stopped

SRC = Path(__file__).resolve().parents[2] / "src"
# what differs between two comparisons of the same runs: the clock, where they are and how they were made
VOLATILE = {"command", "created", "wall_s", "phase_s", "rollout_s", "update_s", "idle", "status", "commits",
            "dirty", "wall_short", "invocations", "resumed"}  # the last two: provenance of a resumed run


def _comparable(summary_path: Path) -> dict:
    out = summary_path.parent

    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in VOLATILE}
        if isinstance(x, list):  # a commit made in this checkout while the runs trained is not theirs to differ in
            return [strip(v) for v in x if not (isinstance(v, dict) and v.get("what") == "hacrl commit")]
        return x.replace(str(out), "OUT") if isinstance(x, str) else x

    return strip(json.loads(summary_path.read_text()))


def _invocations(out: Path, algo: str, seed: int) -> list[tuple[str, int, int]]:
    record = json.loads((out / "runs" / algo / f"seed-{seed}" / "compare.json").read_text())
    return [(i["status"], i["from_step"], i["to_step"]) for i in record["invocations"]]


# ---- no model -----------------------------------------------------------------------------------------------

def test_each_lane_gets_its_share_of_the_cores_unless_threads_are_set():
    assert lane_threads(2, cores=16) == 8 and lane_threads(3, cores=2) == 1
    assert _lane_threads([], 1, "local") is None  # --jobs 1: today's behaviour, the config's threads
    assert _lane_threads(["trainer.steps=3"], 2, "local") == lane_threads(2)
    assert _lane_threads(["trainer.threads=3"], 2, "local") is None  # an explicit --set wins
    assert _lane_threads([], 2, "ray") is None  # a Ray task reserves the config's threads


def test_bad_jobs_are_refused_before_anything_trains(tmp_path):
    with pytest.raises(ConfigError, match="--jobs 0"):
        run_comparison("tiny-test", "gspo", 1, [], tmp_path / "cmp", jobs=0, log=lambda _: None)
    with pytest.raises(ConfigError, match="--jobs-backend"):
        run_comparison("tiny-test", "gspo", 1, [], tmp_path / "cmp", jobs=2, jobs_backend="slurm",
                       log=lambda _: None)
    assert not (tmp_path / "cmp").exists()


def test_a_lane_killed_mid_run_is_recorded_as_stopped(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "compare.json").write_text(json.dumps({"wall_s": 3.0, "invocations": [
        {"status": "stopped", "from_step": 0, "to_step": 1, "wall_s": 1.0},
        {"status": "cut short", "from_step": 1, "to_step": 2, "wall_s": 2.0}]}))
    assert not mark_stopped(run, since=(run / "compare.json").stat().st_mtime + 10)  # an older record
    assert mark_stopped(run, since=0)
    assert [i["status"] for i in json.loads((run / "compare.json").read_text())["invocations"]] == [
        "stopped", "stopped"]
    assert not mark_stopped(run, since=0) and not mark_stopped(tmp_path / "none", since=0)


# ---- tiny comparisons ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def serial_and_parallel(tiny_models, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("jobs")
    lines: list[str] = []
    run_comparison("tiny-test", "hacpo,gspo", 2, _overrides(tiny_models), root / "serial", log=lambda _: None)
    run_comparison("tiny-test", "hacpo,gspo", 2, _overrides(tiny_models), root / "parallel", jobs=2,
                   log=lines.append, log_steps=True)
    return root, lines


@pytest.mark.model
def test_two_lanes_write_the_summary_of_one(serial_and_parallel):
    root, lines = serial_and_parallel
    assert any(line.startswith("lanes: 2 of the 4 runs") for line in lines)
    assert any(line.startswith("    [gspo seed 1] step 2/2") for line in lines)  # step lines name their run
    assert _comparable(root / "serial" / "summary.json") == _comparable(root / "parallel" / "summary.json")
    for algo in ("hacpo", "gspo"):
        for seed in (0, 1):
            assert _invocations(root / "parallel", algo, seed) == [("trained", 0, 2)]


def _lanes_command(out, models) -> tuple[list[str], dict[str, str]]:
    """The command and environment of ``hacrl compare --jobs 2`` of hacpo,gspo × 2 seeds on the tiny models."""
    argv = [sys.executable, "-m", "hacrl.cli", "compare", "--preset", "tiny-test", "--algos", "hacpo,gspo",
            "--seeds", "2", "--jobs", "2", "--output", str(out)]
    for o in _overrides(models):
        argv += ["--set", o]
    return argv, {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}


@pytest.mark.model
def test_sigterm_stops_every_lane_resumably_and_the_same_command_finishes(serial_and_parallel, tiny_models,  # noqa: F811
                                                                           tmp_path):
    root, _ = serial_and_parallel
    out = tmp_path / "cmp"
    argv, env = _lanes_command(out, tiny_models)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = []
    for line in proc.stdout:  # the first step of a lane: then SIGTERM to the parent only (a scheduler's stop)
        seen.append(line)
        if "step 1/2" in line:
            proc.send_signal(signal.SIGTERM)
            break
    seen += proc.stdout.readlines()
    assert proc.wait(timeout=300) == 130, "".join(seen)
    assert any("stopping" in line for line in seen)
    stopped = [(a, s) for a in ("hacpo", "gspo") for s in (0, 1)
               if (out / "runs" / a / f"seed-{s}" / "compare.json").exists()]
    assert stopped, "".join(seen)  # the run that reached step 1 at least
    for algo, seed in stopped:
        assert _invocations(out, algo, seed)[-1][0] == "stopped"
    assert not (out / "summary.json").exists()
    assert not (out / "runs" / "gspo" / "seed-1").exists()  # no lane started after the stop
    resumed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _comparable(out / "summary.json") == _comparable(root / "serial" / "summary.json")
    for algo, seed in stopped:
        statuses = [s for s, _, _ in _invocations(out, algo, seed)]
        assert statuses[0] == "stopped" and statuses[-1] in ("resumed", "restarted")


@pytest.mark.model
def test_runs_as_ray_tasks_on_a_local_instance(serial_and_parallel, tiny_models, tmp_path):  # noqa: F811
    ray = pytest.importorskip("ray")
    root, _ = serial_and_parallel
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    try:
        lines: list[str] = []
        run_comparison("tiny-test", "hacpo,gspo", 2, _overrides(tiny_models), tmp_path / "cmp", jobs=2,
                       jobs_backend="ray", log=lines.append)
    finally:
        ray.shutdown()
    assert any("a Ray task with 1 CPU" in line for line in lines)
    assert _comparable(tmp_path / "cmp" / "summary.json") == _comparable(root / "serial" / "summary.json")


def test_a_run_task_reserves_its_threads_and_its_agents_gpus():
    from hacrl.config import load_config
    from hacrl.report.runs import RunPlan

    def plan(*overrides):
        return RunPlan("gspo", 0, load_config("tiny-test", None, list(overrides)), Path("x"), "train", None)

    assert run_resources(plan("trainer.threads=3")) == (3.0, 0.0)
    assert run_resources(plan("agents.qwen-char.device=cuda", "agents.llama-bpe.device=cuda",
                              "agents.llama-bpe.num_gpus=0.5")) == (1.0, 1.5)
    assert run_resources(plan("backend.name=ray")) == (1.0, 0.0)  # its agents' actors reserve their own


def test_runs_that_miss_the_same_start_evaluation_at_once_write_it_whole(tmp_path):
    # two lanes starting alike both evaluate step 0 and store it under one key: each writes its own temporary
    # file and renames it over the entry, so the entry is always one writer's whole and no temporary is left
    import threading

    from hacrl.trainer.start_eval import Evaluation, StartCache

    cache = StartCache.__new__(StartCache)
    cache.path = tmp_path / "start-evals" / "key.json"
    entries = [Evaluation({"eval/a/greedy_acc": w / 10}, [{"step": 0, "w": w}], [{"step": 0, "ids": [w] * 500}])
               for w in range(4)]
    errors: list[BaseException] = []

    def write(e):
        try:
            for _ in range(25):
                cache.store(e, tmp_path / "run")
                assert cache.load() in entries
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(e,)) for e in entries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.load() in entries
    assert [p.name for p in cache.path.parent.iterdir()] == ["key.json"]


@pytest.mark.model
def test_a_lane_that_dies_stops_the_comparison_with_its_run_named(tiny_models, tmp_path, monkeypatch):  # noqa: F811
    # every lane's process is killed (SIGKILL, as by the OOM killer) after its first update: the comparison ends
    # with one error naming a run, writes no report, and the same call without the fault trains them all
    from hacrl.report.parallel import JobFailed

    out = tmp_path / "cmp"
    monkeypatch.setenv("HACRL_FAILPOINT", "update@1")
    with pytest.raises(JobFailed, match=r"seed 0 failed in its lane:\nits process ended with exit code -9"):
        run_comparison("tiny-test", "hacpo,gspo", 1, _overrides(tiny_models), out, jobs=2, log=lambda _: None)
    assert not (out / "summary.json").exists()
    monkeypatch.delenv("HACRL_FAILPOINT")
    run_comparison("tiny-test", "hacpo,gspo", 1, _overrides(tiny_models), out, jobs=2, log=lambda _: None)
    for algo in ("hacpo", "gspo"):  # killed before its first checkpoint (restarted), or stopped by the parent
        status, _, to_step = _invocations(out, algo, 0)[-1]
        assert status in ("restarted", "resumed") and to_step == 2


@pytest.mark.model
def test_dry_run_lays_out_the_lanes_and_a_second_signal_aborts_at_once(tiny_models, tmp_path):  # noqa: F811
    out = tmp_path / "cmp"
    lines: list[str] = []
    run_comparison("tiny-test", "hacpo,gspo", 2, _overrides(tiny_models), out, jobs=2, dry_run=True,
                   log=lines.append)
    assert lines[1].startswith("lanes: 2 of the 4 runs to train at a time, in their own processes at 1 torch")
    assert not out.exists()
    argv, env = _lanes_command(out, tiny_models)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = []
    for line in proc.stdout:  # Ctrl-C twice: the lanes are killed without finishing their step
        seen.append(line)
        if "step 1/2" in line:
            proc.send_signal(signal.SIGINT)
            proc.send_signal(signal.SIGINT)
            break
    seen += proc.stdout.readlines()
    assert proc.wait(timeout=120) == 130, "".join(seen)
    records = list(out.glob("runs/*/seed-*/compare.json"))
    assert records, "".join(seen)
    for path in records:  # killed or stopped, each reads "stopped" and keeps its last complete checkpoint
        assert json.loads(path.read_text())["invocations"][-1]["status"] == "stopped"
    resumed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr


@pytest.mark.model
def test_a_stopped_ray_comparison_stops_its_tasks_at_a_step_and_resumes(tiny_models, tmp_path):  # noqa: F811
    # SIGTERM to the driver once a run has logged a step: each task is cancelled gently (its trainer's SIGINT
    # handler), checkpoints, records "stopped"; the same call resumes the runs to the end
    import threading

    ray = pytest.importorskip("ray")
    out = tmp_path / "cmp"
    overrides = [o for o in _overrides(tiny_models) if not o.startswith("trainer.steps")] + ["trainer.steps=6"]

    def stop_at_first_step():
        while not list(out.glob("runs/*/seed-*/compare.json")):
            threading.Event().wait(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    try:
        threading.Thread(target=stop_at_first_step, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_comparison("tiny-test", "hacpo,gspo", 1, overrides, out, jobs=2, jobs_backend="ray",
                           log=lambda _: None)
        records = list(out.glob("runs/*/seed-*/compare.json"))
        assert records
        for path in records:
            status, _, to_step = _invocations(out, path.parent.parent.name, 0)[-1]
            assert status == "stopped" and to_step < 6
        run_comparison("tiny-test", "hacpo,gspo", 1, overrides, out, jobs=2, jobs_backend="ray",
                       log=lambda _: None)
    finally:
        ray.shutdown()
    assert (out / "summary.json").exists()
    for algo in ("hacpo", "gspo"):
        assert _invocations(out, algo, 0)[-1][2] == 6


@pytest.mark.model
def test_lanes_remove_the_checkpoints_of_finished_runs_when_asked(tiny_models, tmp_path):  # noqa: F811
    # 3 runs in 2 lanes: the first run's checkpoints go as it finishes, before the last run has finished (a
    # comparison stopped part-way keeps none of a finished run's)
    out = tmp_path / "cmp"
    lines: list[str] = []
    run_comparison("tiny-test", "hacpo,gspo,naive", 1, _overrides(tiny_models), out, jobs=2,
                   keep_checkpoints="none", log=lines.append)
    removed = [i for i, line in enumerate(lines) if line.startswith("    removed the checkpoints of")]
    done = [i for i, line in enumerate(lines) if ": trained in " in line]
    assert len(removed) == len(done) == 3, lines
    assert removed[0] < done[-1], lines
    for algo in ("hacpo", "gspo", "naive"):
        run = out / "runs" / algo / "seed-0"
        assert not (run / "checkpoints").exists()
        assert json.loads((run / "compare.json").read_text())["checkpoints_removed"] is True
    lines.clear()
    run_comparison("tiny-test", "hacpo,gspo,naive", 1, _overrides(tiny_models), out, jobs=2, log=lines.append)
    assert sum("reused" in line for line in lines) == 3 and not any(line.startswith("lanes") for line in lines)
