"""The asynchronous mode (``trainer.mode=async``, docs/async.md) end to end with tiny agents on CPU.

- local backend, bound 0, equal speeds: the loop writes the lock-step trainer's metrics, update for update;
- agents of different speeds (a simulated clock on the local backend: deterministic; and real Ray actors):
  no taken answer is staler than the bound, every answer is used, expired or pending for every learner, and the
  faster agent makes more updates;
- a run stopped with answers in the pool and own answers kept by the workers resumes without losing them;
- the CLI path.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from hacrl.backends import Handle
from hacrl.backends.local import LocalBackend
from hacrl.cli import main
from hacrl.config import load_config
from hacrl.run import checkpoint as ckpt
from hacrl.trainer.trainer import Trainer

pytestmark = pytest.mark.model
IDS = ["qwen-char", "llama-bpe"]
COMMON = ["trainer.eval_size=10", "run.loggers=[jsonl]", "trainer.log_samples=0"]


def records(run_dir, name="metrics.jsonl"):
    return [json.loads(x) for x in (run_dir / name).read_text().splitlines()]


def train(run_dir, *overrides, resume_from=None):
    cfg = load_config("tiny-test", overrides=[*COMMON, *overrides])
    run_dir.mkdir(exist_ok=True)
    return Trainer(cfg, run_dir, resume_from=resume_from).train()


def update_lines(run_dir):
    """(agent, its version, the line) of every update line."""
    out = []
    for line in records(run_dir)[1:]:
        agents = [a for a in IDS if f"agent/{a}/async/idle_frac" in line]
        if agents:
            out.append((agents[0], line[f"agent/{agents[0]}/version"], line))
    return out


def test_bound_zero_at_equal_speeds_writes_the_lock_step_metrics(tmp_path):
    train(tmp_path / "lockstep", "trainer.steps=3")
    train(tmp_path / "async", "trainer.steps=3", "trainer.mode=async", "async.bound=0")
    lockstep = records(tmp_path / "lockstep")
    lines = update_lines(tmp_path / "async")
    assert sorted((a, v) for a, v, _ in lines) == sorted((a, v) for a in IDS for v in (1, 2, 3))
    compared = 0
    for agent, version, line in lines:
        want = {k: v for k, v in lockstep[version].items() if k.startswith(f"agent/{agent}/")}
        assert {k: line[k] for k in want} == want  # every value the lock-step trainer logged for the agent
        compared += len(want)
        assert line["pool/size"] == lockstep[version]["pool/size"]
        assert line[f"agent/{agent}/staleness/max"] == 0 and line[f"agent/{agent}/async/joint_frac"] == 1.0
    assert compared > 100
    drop = {"step"}
    evals = [[{k: v for k, v in r.items() if k not in drop} for r in records(tmp_path / d, "eval.jsonl")]
             for d in ("lockstep", "async")]
    assert evals[0] == evals[1]


@pytest.fixture
def speeds(monkeypatch):
    """Agents of different speeds on the local backend, deterministically: every call still runs in its
    ``submit_*``, but finishes on a simulated clock at its submit time plus its agent's cost (an update costs twice
    a rollout), and ``wait_any`` hands out the earliest-finishing call first."""
    def install(cost: list[float]) -> None:
        finish: dict[int, float] = {}
        now = [0.0]
        real_rollout, real_update = LocalBackend.submit_rollout, LocalBackend.submit_update

        def submit_rollout(self, agent, *args, **kwargs):
            handle = real_rollout(self, agent, *args, **kwargs)
            finish[id(handle)] = now[0] + cost[agent]
            return handle

        def submit_update(self, agent, request):
            handle = real_update(self, agent, request)
            finish[id(handle)] = now[0] + cost[agent] * 2
            return handle

        def wait_any(self, handles: list[Handle], timeout=None):
            if not handles:
                return None
            first = min(handles, key=lambda h: finish[id(h)])  # ties: the order given
            now[0] = finish.pop(id(first))
            return first, first.ref

        monkeypatch.setattr(LocalBackend, "submit_rollout", submit_rollout)
        monkeypatch.setattr(LocalBackend, "submit_update", submit_update)
        monkeypatch.setattr(LocalBackend, "wait_any", wait_any)
    return install


def check_bound_and_accounting(run_dir, bound):
    lines = update_lines(run_dir)
    used = defaultdict(float)
    for agent, _, line in lines:
        assert line[f"agent/{agent}/staleness/max"] <= bound
        for j in IDS:
            used[agent, j] += line.get(f"agent/{agent}/async/used/{j}", 0.0)
    last = lines[-1][2]
    for k in IDS:
        assert last[f"pool/used/{k}"] + last[f"pool/expired/{k}"] + last[f"pool/pending/{k}"] == last["pool/added"]
    return lines, used


@pytest.mark.parametrize("bound", [0, 1])
def test_agents_at_different_speeds_stay_within_the_bound_and_account_for_every_answer(tmp_path, speeds, bound):
    speeds([1.0, 3.0])  # qwen-char three times as fast as llama-bpe
    run = tmp_path / "run"
    train(run, "trainer.steps=2", "trainer.mode=async", f"async.bound={bound}", "trainer.batch_size=2")
    lines, used = check_bound_and_accounting(run, bound=bound)
    versions = {a: max(v for b, v, _ in lines if b == a) for a in IDS}
    assert versions["llama-bpe"] == 2 and versions["qwen-char"] >= 4  # the faster agent did not wait
    assert used["llama-bpe", "qwen-char"] > 0 and used["qwen-char", "llama-bpe"] > 0  # joint groups formed
    staleness = [line[f"agent/{a}/staleness/max"] for a, _, line in lines]
    assert max(staleness) == bound  # answers as old as the bound were used, none older
    if bound == 0:
        assert sum(line.get(f"agent/{a}/async/expired_cross", 0) for a, _, line in lines) > 0  # the rest expired


def test_a_run_stopped_with_answers_in_flight_resumes_without_losing_them(tmp_path, speeds):
    speeds([1.0, 3.0])
    run = tmp_path / "run"
    args = ["trainer.mode=async", "async.bound=2", "trainer.batch_size=2"]
    train(run, "trainer.steps=1", *args)
    path = ckpt.latest_checkpoint(run / "checkpoints")
    state = ckpt.load_state(path)["async"]
    pending = {k: n for k, n in zip(IDS, [len(p) for p in state["pool"]["pending"]], strict=True)}
    assert sum(pending.values()) > 0 and state["held"]  # answers in the pool, a scored round not taken yet
    kept = [(tag, pos) for k, m in enumerate(state["own_keys"]) for tag, pos in m.values()]
    assert kept  # own answers the workers keep for a later update (their token ids are in own_pending.pt)
    added_before = state["pool"]["next_uid"]
    train(run, "trainer.steps=3", *args, resume_from=path)  # an update of a kept answer fails if it was lost
    lines, _ = check_bound_and_accounting(run, bound=2)
    for k, a in enumerate(IDS):  # each agent goes on from its version in the checkpoint, none done twice
        mine = [v for b, v, _ in lines if b == a]
        assert mine == list(range(1, len(mine) + 1)) and mine[-1] > state["versions"][k]
    last = lines[-1][2]
    assert last["pool/added"] > added_before
    # the answers pending at the cut were taken after it: each learner used more than it had before the resume
    before = {k: state["pool"]["used"][i] for i, k in enumerate(IDS)}
    assert all(last[f"pool/used/{k}"] >= before[k] + min(pending[k], 1) for k in IDS)
    steps = [r["step"] for r in records(run)]
    assert steps == sorted(steps) and len(set(steps)) == len(steps) - 2  # step 0 and the last eval share a step


def test_the_cli_resumes_an_async_run_whose_step_count_passed_trainer_steps_before_its_slowest_agent(tmp_path,
                                                                                                      speeds, capsys):
    # the step counts every agent's updates: a fast agent takes it past trainer.steps while the slow one is short
    speeds([1.0, 3.0])
    run = tmp_path / "run"
    sets = [*COMMON, "trainer.mode=async", "trainer.batch_size=2", "trainer.steps=1"]
    args = ["train", "--preset", "tiny-test", "-q", "--output", str(run)]
    assert main([*args, *(x for s in sets for x in ("--set", s))]) == 0
    manifest = json.loads((ckpt.latest_checkpoint(run / "checkpoints") / "manifest.json").read_text())
    assert manifest["step"] >= 3 and min(manifest["versions"]) == 1
    assert main([*args, "--resume", *(x for s in [*sets, "trainer.steps=3"] for x in ("--set", s))]) == 0
    assert "already finished" not in capsys.readouterr().out
    assert {a: max(v for b, v, _ in update_lines(run) if b == a) for a in IDS}["llama-bpe"] == 3
    # and one whose slowest agent got there is finished
    assert main([*args, "--resume", *(x for s in [*sets, "trainer.steps=3"] for x in ("--set", s))]) == 0
    assert "already finished" in capsys.readouterr().out


def test_the_cli_trains_in_async_mode(tmp_path):
    out = tmp_path / "cli"
    sets = [*COMMON, "trainer.steps=1", "trainer.mode=async"]
    assert main(["train", "--preset", "tiny-test", "-q", *(x for s in sets for x in ("--set", s)),
                 "--output", str(out)]) == 0
    assert {a for a, _, _ in update_lines(out)} == set(IDS)
    assert "mode: async" in (out / "config.yaml").read_text()


def test_on_ray_agents_at_their_own_pace_stay_within_the_bound_and_account_for_every_answer(tmp_path):
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        run = tmp_path / "ray"
        train(run, "trainer.steps=3", "trainer.mode=async", "async.bound=1", "async.group_wait_s=0",
              "backend.name=ray", "backend.num_cpus_per_agent=0.5", "trainer.threads=1", "trainer.batch_size=2")
    finally:
        ray.shutdown()
    lines, _ = check_bound_and_accounting(run, bound=1)
    assert min(max(v for b, v, _ in lines if b == a) for a in IDS) == 3
    for a, _, line in lines:  # each agent's actor computed part of the time; the metrics say how much
        assert 0.0 <= line[f"agent/{a}/async/idle_frac"] < 1.0 and line[f"agent/{a}/async/updates_per_hour"] > 0
