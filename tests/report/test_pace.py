"""The compare report's pace section (hacrl.report.pace) and asynchronous runs read back (hacrl.report.runs), from
hand-made run directories: the idle share, updates per hour, staleness and answers used per source of an
asynchronous run computed by hand from its metrics.jsonl; a lock-step run's idle share from its timings and "—"
for the rest; an asynchronous run's evaluations keyed by the slowest agent's version, so its final accuracy is
found at trainer.steps; its checkpoint's progress read from the manifest. Then one real comparison of
asynchronous runs, trained and then reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hacrl.config import load_config
from hacrl.report.pace import async_pace, lockstep_idle, render_pace
from hacrl.report.render import render_report
from hacrl.report.runs import RunOutcome, _final_accuracies, async_progress, checkpoint_step, outputs_data
from hacrl.report.summary import summarize

AGENTS = ["fast", "slow"]


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _update(step: int, agent: str, version: int, *, idle: float, per_hour: float, stale_mean: float,
            stale_max: int, used: dict[str, int]) -> dict:
    a = f"agent/{agent}"
    return {"step": step, f"{a}/version": version, f"{a}/async/idle_frac": idle,
            f"{a}/async/updates_per_hour": per_hour, f"{a}/staleness/mean": stale_mean,
            f"{a}/staleness/max": stale_max, f"{a}/optimizer_steps": 1,
            # ω of the other agent at this update: 1 + version / 10 (fast) or 1 − version / 10 (slow)
            f"{a}/omega/{'slow' if agent == 'fast' else 'fast'}": 1 + (version if agent == "fast" else -version) / 10,
            **{f"{a}/async/used/{j}": n for j, n in used.items()}}


def _eval_line(step: int, versions: dict[str, int]) -> dict:
    return {"step": step, **{f"eval/{a}/greedy_acc": 0.5 for a in AGENTS},
            **{f"agent/{a}/version": v for a, v in versions.items()}, "timing/eval": 0.2}


def _config(run_dir: Path, mode: str) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(
        {"agents": [{"id": a} for a in AGENTS], "trainer": {"mode": mode, "steps": 2}}))


def make_async_run(run_dir: Path, seed: int = 0) -> None:
    """fast makes 4 updates while slow makes 2 (trainer.steps = 2): 6 updates in all, an evaluation after
    the 3rd (slow at version 1) and at the end (step 6, slow at 2)."""
    _config(run_dir, "async")
    lines = [
        {"step": 0, **{f"eval/{a}/greedy_acc": 0.1 for a in AGENTS}},
        _update(1, "fast", 1, idle=0.30, per_hour=900, stale_mean=0.0, stale_max=0, used={"fast": 8, "slow": 0}),
        _update(2, "fast", 2, idle=0.20, per_hour=950, stale_mean=0.5, stale_max=1, used={"fast": 8, "slow": 8}),
        _update(3, "slow", 1, idle=0.10, per_hour=400, stale_mean=0.0, stale_max=0, used={"fast": 16, "slow": 8}),
        _eval_line(3, {"fast": 2, "slow": 1}),
        _update(4, "fast", 3, idle=0.10, per_hour=1000, stale_mean=1.0, stale_max=1,
                used={"fast": 8, "slow": 0}),
        _update(5, "fast", 4, idle=0.05 + seed / 100, per_hour=1100, stale_mean=0.25, stale_max=2,
                used={"fast": 8, "slow": 8}),
        _update(6, "slow", 2, idle=0.04, per_hour=420, stale_mean=0.75, stale_max=1, used={"fast": 12, "slow": 4}),
        _eval_line(6, {"fast": 4, "slow": 2}),
    ]
    _write(run_dir / "metrics.jsonl", lines)
    _write(run_dir / "eval.jsonl", [{"step": s, "task": "add2", "agent": a, "n": 4, "greedy_acc": acc}
                                    for s, acc in ((0, 0.25), (3, 0.5), (6, 0.75)) for a in AGENTS])


def make_lockstep_run(run_dir: Path) -> None:
    """Two steps; per step the phases sum to 2 s (step 2: 3 s with its evaluation); fast busy 0.5 s and
    slow 1.5 s per step."""
    _config(run_dir, "lockstep")
    step = {"timing/data": 0.1, "timing/rollout": 0.6, "timing/reward": 0.1, "timing/capability": 0.0,
            "timing/update": 1.2, "timing/rollout_overlap": 1.3, "timing/update_overlap": 1.2,
            "timing/rollout/fast": 0.2, "timing/rollout/slow": 0.5, "timing/update/fast": 0.3,
            "timing/update/slow": 1.0, "timing/forward/slow": 0.4}
    _write(run_dir / "metrics.jsonl", [{"step": 0, **{f"eval/{a}/greedy_acc": 0.1 for a in AGENTS}},
                                       {"step": 1, **step}, {"step": 2, **step, "timing/eval": 1.0}])
    _write(run_dir / "eval.jsonl", [{"step": s, "task": "add2", "agent": a, "n": 4, "greedy_acc": 0.5}
                                    for s in (0, 2) for a in AGENTS])


def test_an_async_runs_pace_by_hand(tmp_path):
    make_async_run(tmp_path / "run")
    [d] = outputs_data([RunOutcome("hacpo", 0, tmp_path / "run", "reused", 1.0)],
                       load_config("tiny-test", None, ["trainer.steps=2"]))
    assert d.mode == "async"
    # the evaluation at step 3 merged into the update line at step 3, not in place of it
    assert d.metrics[3]["agent/slow/async/idle_frac"] == 0.10 and d.metrics[3]["timing/eval"] == 0.2
    fast = async_pace(d.metrics, "fast", AGENTS)
    # the last line's idle share and rate; staleness weighted by the answers used:
    # (0·8 + 0.5·16 + 1·8 + 0.25·16) / (8 + 16 + 8 + 16) = 20 / 48
    assert fast["idle"] == 0.05 and fast["updates_per_hour"] == 1100
    assert fast["staleness_mean"] == pytest.approx(20 / 48) and fast["staleness_max"] == 2
    assert fast["used"] == {"fast": 32, "slow": 16} and fast["updates"] == 4
    slow = async_pace(d.metrics, "slow", AGENTS)
    # (0·24 + 0.75·16) / 40 = 0.3
    assert (slow["idle"], slow["updates_per_hour"], slow["staleness_max"]) == (0.04, 420, 1)
    assert slow["staleness_mean"] == pytest.approx(0.3) and slow["used"] == {"fast": 28, "slow": 12}


def test_a_lockstep_runs_idle_share_from_its_timings(tmp_path):
    make_lockstep_run(tmp_path / "run")
    [d] = outputs_data([RunOutcome("hacpo", 0, tmp_path / "run", "reused", 1.0)],
                       load_config("tiny-test", None, ["trainer.steps=2"]))
    assert d.mode == "lockstep"
    # wall: 2.0 + 3.0 = 5 s (the overlaps and the per-agent sub-phases are not phases)
    assert lockstep_idle(d.metrics, "fast") == pytest.approx(1 - 1.0 / 5.0)  # busy 0.5 + 0.5
    assert lockstep_idle(d.metrics, "slow") == pytest.approx(1 - 3.0 / 5.0)  # busy 1.5 + 1.5
    assert lockstep_idle({1: {"timing/rollout": 1.0}}, "fast") is None  # nothing to measure it from


def test_async_evaluations_are_keyed_by_the_slowest_agents_version(tmp_path):
    make_async_run(tmp_path / "run")
    assert async_progress(tmp_path / "run") == {0: 0, 3: 1, 6: 2}
    assert _final_accuracies(tmp_path / "run", 2) == {"fast": 0.75, "slow": 0.75}  # logged at step 6
    [d] = outputs_data([RunOutcome("hacpo", 0, tmp_path / "run", "reused", 1.0)],
                       load_config("tiny-test", None, ["trainer.steps=2"]))
    assert d.evals == {(s, a): acc for s, acc in ((0, 0.25), (1, 0.5), (2, 0.75)) for a in AGENTS}
    assert max(d.metrics) == 6  # the update lines up to the final evaluation are all kept
    make_lockstep_run(tmp_path / "lock")
    assert async_progress(tmp_path / "lock") is None
    assert _final_accuracies(tmp_path / "lock", 2) == {"fast": 0.5, "slow": 0.5}


def test_an_async_checkpoints_progress_is_the_slowest_version(tmp_path):
    for name, manifest in (("step-000006", {"mode": "async", "versions": [4, 2], "step": 6}),
                           ("step-000002", {"step": 2})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps(manifest))
    assert checkpoint_step(tmp_path / "step-000006") == 2
    assert checkpoint_step(tmp_path / "step-000002") == 2


def test_the_pace_section_of_the_report(tmp_path):
    outcomes = []
    for seed in (0, 1):
        make_async_run(tmp_path / "async" / f"seed-{seed}", seed)
        make_lockstep_run(tmp_path / "lock" / f"seed-{seed}")
        outcomes += [RunOutcome("hacpo", seed, tmp_path / "async" / f"seed-{seed}", "reused", 1.0),
                     RunOutcome("gspo", seed, tmp_path / "lock" / f"seed-{seed}", "reused", 1.0)]
    cfg = load_config("tiny-test", None, ["trainer.steps=2", "agents.0.id=fast", "agents.1.id=slow"])
    meta = {"command": "hacrl compare ...", "preset": "tiny-test", "config_path": None, "overrides": [],
            "algorithms": ["hacpo", "gspo"], "seeds": [0, 1], "wall_s": 0.0, "created": "2027-01-01 00:00:00"}
    s = summarize(cfg, meta, outcomes)
    pace = s["pace"]
    assert pace["hacpo"]["mode"] == "async" and pace["gspo"]["mode"] == "lockstep"
    fast = pace["hacpo"]["agents"]["fast"]
    assert fast["idle"][0] == pytest.approx(0.055) and fast["used"] == {"fast": 32, "slow": 16}
    assert s["results"]["fast"]["hacpo"]["final"]["mean"] == 0.75  # found at trainer.steps
    assert s["results"]["fast"]["hacpo"]["optimizer_updates"] == 4 and \
        s["results"]["slow"]["hacpo"]["optimizer_updates"] == 2
    text = render_report(s)
    section = text.split("## Pace: idle share, updates, staleness")[1].split("## ")[0]
    assert "| hacpo | async | fast | 6% ± 1% | 1100 | 0.42 | 2 | 32 / 16 |" in section
    assert "| hacpo | async | slow | 4% ± 0% | 420 | 0.30 | 1 | 28 / 12 |" in section
    assert "| gspo | lock-step | fast | 80% ± 0% | — | — | — | — |" in section
    assert "| gspo | lock-step | slow | 40% ± 0% | — | — | — | — |" in section
    assert render_pace({}) == []


@pytest.mark.model
def test_a_comparison_of_async_runs_finds_their_final_accuracy_and_reuses_them(tmp_path):
    from hacrl.report.compare import run_comparison

    sets = ["trainer.mode=async", "trainer.eval_size=8", "trainer.batch_size=2", "rollout.rollouts_per_prompt=2",
            "run.tensorboard=false", "trainer.checkpoint_every=0"]
    lines: list[str] = []
    report = run_comparison("tiny-test", "hacpo", 1, sets, tmp_path / "cmp", log=lines.append)
    assert "(no final evaluation found)" not in "\n".join(lines)
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    for agent in ("qwen-char", "llama-bpe"):
        assert summary["results"][agent]["hacpo"]["final"]["mean"] is not None
        assert summary["pace"]["hacpo"]["agents"][agent]["updates_per_hour"] > 0
    text = report.read_text()
    assert "| hacpo | async | qwen-char |" in text
    assert "— (async: see Pace)" in text  # no phase wall times in async
    quality = text.split("## Format or correctness")[1].split("## Cost per run")[0]
    assert "→ n/a" not in quality and "| hacpo | " in quality  # the final records found by progress too
    lines.clear()
    run_comparison("tiny-test", "hacpo", 1, sets, tmp_path / "cmp", log=lines.append)  # reused, not refused
    assert any("reused (finished run" in line for line in lines)


def test_an_async_runs_omega_curve_is_read_against_each_agents_own_updates(tmp_path):
    # fast updated 4 times and slow twice over 6 logged steps: each agent's ω curve has one point per update of
    # its own (its version), as a lock-step run's has one per step, not one per logged line of the whole run
    outcomes = []
    for seed in (0, 1):
        make_async_run(tmp_path / f"seed-{seed}", seed)
        outcomes.append(RunOutcome("hacpo", seed, tmp_path / f"seed-{seed}", "reused", 1.0))
    cfg = load_config("tiny-test", None, ["trainer.steps=2", "agents.0.id=fast", "agents.1.id=slow"])
    meta = {"command": "hacrl compare ...", "preset": "tiny-test", "config_path": None, "overrides": [],
            "algorithms": ["hacpo"], "seeds": [0, 1], "wall_s": 0.0, "created": "2027-01-01 00:00:00"}
    diag = summarize(cfg, meta, outcomes)["diagnostics"]["hacpo"]
    fast, slow = diag["fast"]["omega"]["slow"]["curve"], diag["slow"]["omega"]["fast"]["curve"]
    assert fast["steps"] == [1, 2, 3, 4] and fast["mean"] == pytest.approx([1.1, 1.2, 1.3, 1.4])
    assert slow["steps"] == [1, 2] and slow["mean"] == pytest.approx([0.9, 0.8])
    assert fast["n"] == [2, 2, 2, 2]
    assert diag["fast"]["omega"]["slow"]["final"] == pytest.approx(1.4)
