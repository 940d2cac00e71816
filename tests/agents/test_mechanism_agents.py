"""The mechanism study's agents (issue #45): ``builtin:<name>`` finds a generated agent in ``$HACRL_CACHE/tiny``
and says how to make a missing one; the corrupted traces and operator-filtered streams its warm starts use;
the plans of scripts/make_mechanism_agents.py."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from hacrl.agents.tiny import (
    corrupt_trace,
    corrupted_trace_stream,
    operator_stream,
    tiny_agent_path,
    tiny_cache_dir,
)
from hacrl.backends.resolve import resolve_model_path
from hacrl.data import get_task
from hacrl.data.tasks import add2_trace_answer, final_number, trace_consistent


@pytest.fixture
def script(load_script):
    return load_script("scripts/make_mechanism_agents.py", "make_mechanism_agents")


# ---------------------------------------------------------------- where the agents live


def test_generated_agent_resolves_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path))
    agent = tmp_path / "tiny" / "trace-f-weak"
    agent.mkdir(parents=True)
    (agent / "config.json").write_text("{}")
    assert tiny_cache_dir() == tmp_path / "tiny"
    assert tiny_agent_path("trace-f-weak") == agent
    assert resolve_model_path("builtin:trace-f-weak") == agent


def test_shipped_agent_wins_over_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path))
    (tmp_path / "tiny" / "qwen2-char").mkdir(parents=True)
    (tmp_path / "tiny" / "qwen2-char" / "config.json").write_text("{}")
    assert tmp_path not in tiny_agent_path("qwen2-char").parents


def test_missing_agent_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path))
    (tmp_path / "tiny" / "half-made").mkdir(parents=True)  # a directory without config.json is not an agent
    for name in ("mixed-plus", "half-made"):
        with pytest.raises(FileNotFoundError) as info:
            tiny_agent_path(name)
        message = str(info.value)
        assert "\n" not in message
        assert f"python scripts/make_mechanism_agents.py --only {name}" in message
        assert str(tmp_path / "tiny") in message and "qwen2-char" in message


def test_default_cache_is_under_home(monkeypatch):
    monkeypatch.delenv("HACRL_CACHE", raising=False)
    assert tiny_cache_dir() == Path("~/.cache/hacrl/tiny").expanduser()


# ---------------------------------------------------------------- corrupted traces


def _trace_problems(n: int):
    return list(itertools.islice(get_task("add2-trace").train_problems(0), n))


def test_rho_zero_is_the_faithful_answer():
    for p in _trace_problems(300):
        assert corrupt_trace(p.answer, 0.0, p.id) == p.answer == add2_trace_answer(p.meta["a"], p.meta["b"])


def test_rho_one_redraws_every_trace_digit_and_keeps_the_sum():
    task = get_task("add2-trace")
    same = total = consistent = 0
    for p in _trace_problems(500):
        bad = corrupt_trace(p.answer, 1.0, p.id)
        trace, final = bad.rsplit(">", 1)
        gold_trace, gold_final = p.answer.rsplit(">", 1)
        assert final == gold_final and final_number(bad) == str(p.meta["a"] + p.meta["b"])
        assert task.reward(bad, p.as_sample()) == 1.0  # the reward reads only the sum
        assert len(trace) == len(gold_trace)
        assert [c for c in trace if not c.isdigit()] == [c for c in gold_trace if not c.isdigit()]
        digits = [(c, g) for c, g in zip(trace, gold_trace) if g.isdigit()]
        assert all(c.isdigit() for c, _ in digits)
        same += sum(c == g for c, g in digits)
        total += len(digits)
        consistent += trace_consistent(bad, p.meta["a"], p.meta["b"])
    # a uniform redraw keeps the old digit 1 time in 10: 500 problems x ~11 digits
    assert 0.07 < same / total < 0.13
    assert consistent / 500 < 0.01


def test_corruption_is_seeded_per_problem_and_nested_in_rho():
    p, q = _trace_problems(2)
    assert corrupt_trace(p.answer, 1.0, p.id) == corrupt_trace(p.answer, 1.0, p.id)
    assert corrupt_trace(p.answer, 1.0, p.id) != corrupt_trace(p.answer, 1.0, "another/key")
    # the draws do not depend on rho: at 0.5 each digit is either the faithful one or the rho-1 one
    for p in _trace_problems(100):
        half, full = corrupt_trace(p.answer, 0.5, p.id), corrupt_trace(p.answer, 1.0, p.id)
        assert all(h in (g, f) for h, g, f in zip(half, p.answer, full))
    with pytest.raises(ValueError, match="worked answer"):
        corrupt_trace("92", 1.0, "add2/07+85")


def test_corrupted_trace_stream_follows_the_task_stream():
    task = get_task("add2-trace")
    plain = list(itertools.islice(task.train_problems(3), 50))
    faithful = list(itertools.islice(corrupted_trace_stream(task, 3, 0.0), 50))
    garbage = list(itertools.islice(corrupted_trace_stream(task, 3, 1.0), 50))
    assert [p.answer for p in faithful] == [p.answer for p in plain]
    assert [p.id for p in garbage] == [p.id for p in plain]
    assert [final_number(p.answer) for p in garbage] == [final_number(p.answer) for p in plain]
    assert sum(g.answer != p.answer for g, p in zip(garbage, plain)) >= 45


# ---------------------------------------------------------------- operator-filtered streams


@pytest.mark.parametrize(("op", "share"), [("+", 1.0), ("-", 1.0), ("+", 0.8), ("-", 0.5)])
def test_operator_stream_share(op, share):
    task = get_task("mixed")
    problems = list(itertools.islice(operator_stream(task, 0, op, share), 2000))
    own = sum(p.meta["op"] == op for p in problems) / len(problems)
    assert own == 1.0 if share == 1.0 else abs(own - share) < 0.03
    assert all(p.meta["split"] == "train" for p in problems)
    again = list(itertools.islice(operator_stream(task, 0, op, share), 2000))
    assert [p.id for p in again] == [p.id for p in problems]


# ---------------------------------------------------------------- the script's plans


def test_plans_cover_the_study_and_list(script, capsys):
    names = [n for plan in script.PLANS for n in plan.targets]
    assert len(names) == len(set(names))
    for name in ("trace-f-weak", "trace-f-strong", "trace-c0-weak", "trace-c0-strong", "trace-c1-weak",
                 "trace-c1-strong", "mixed-plus", "mixed-minus", "mixed-minus-weak", "mixed-plus80", "mixed-gen-a",
                 "mixed-gen-b", "add2-qwen-high", "add2-llama-eq", "add2-low-a", "add2-low-b"):
        assert name in names
        assert f"``{name}``" in script.__doc__  # the docstring's table names every agent
    for plan in script.PLANS:
        assert plan.task in ("add2", "add2-trace", "mixed")
        assert plan.stream[0] in ("curriculum", "trace", "operators")
    script.main(["--list"])
    assert len(capsys.readouterr().out.strip().splitlines()) == len(script.PLANS)
    with pytest.raises(SystemExit):
        script.main(["--only", "no-such-agent"])


@pytest.mark.model
@pytest.mark.parametrize(("task", "stream"), [("add2-trace", ("trace", 1.0)), ("mixed", ("operators", "-", 0.8))])
def test_a_short_plan_writes_an_agent_builtin_finds(task, stream, script, tmp_path, monkeypatch):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path))
    plan = script.Plan(task=task, arch="qwen2-small", tokenizer="char", lr=1e-2, stream=stream,
                       targets={"short": 0.99}, max_steps=4, eval_every=2)
    (manifest,) = script.run_plan(plan, 0, tiny_cache_dir(), "pytest", n_val=16, n_test=24)
    path = tiny_agent_path("short")
    assert path == tmp_path / "tiny" / "short" and (path / "model.safetensors").is_file()
    assert manifest["task"] == task and manifest["warm_start"]["steps"] == 4  # never reached: the last state
    assert manifest["warm_start"]["val_accuracy"] is None and manifest["n_test"] == 24
    assert manifest["warm_start"]["stream"] == list(stream)
    if task == "mixed":
        assert set(manifest["test_accuracy_by_operator"]) == {"+", "-"}
        assert manifest["test_trace_consistency"] is None
    else:
        assert manifest["test_accuracy_by_operator"] is None
        assert 0.0 <= manifest["test_trace_consistency"] <= 1.0
