"""Built-in procedural tasks: determinism, a held-out split that training never sees, exact rewards."""

from __future__ import annotations

import itertools
import re

import pytest

from hacrl.data import TASKS, Problem, Task, get_task

ALL = ["add2", "add3", "mixed", "mul1x3"]


def take(task: Task, seed: int, n: int) -> list[Problem]:
    return list(itertools.islice(task.train_problems(seed), n))


def test_registry_lists_the_tasks():
    assert set(ALL) <= set(TASKS.names())
    with pytest.raises(KeyError, match="add2"):
        TASKS.get("no-such-task")


@pytest.mark.parametrize("name", ALL)
def test_task_protocol(name):
    task = get_task(name)
    assert isinstance(task, Task)
    assert task.name == name
    assert isinstance(task.max_new_tokens, int) and task.max_new_tokens > max(
        len(p.answer) for p in task.test_problems(200)
    )


@pytest.mark.parametrize("name", ALL)
def test_train_stream_is_deterministic_by_seed(name):
    a, b = get_task(name), get_task(name)
    assert take(a, 0, 300) == take(b, 0, 300)
    assert take(a, 0, 300) != take(a, 1, 300)
    # a fresh iterator restarts the stream
    assert take(a, 7, 50) == take(a, 7, 50)


@pytest.mark.parametrize("name", ALL)
def test_test_split_is_fixed_large_and_unique(name):
    task = get_task(name)
    test = task.test_problems()
    assert len(test) >= 1000
    assert len({p.id for p in test}) == len(test)
    assert task.test_problems(1000) == test
    assert task.test_problems(100) == test[:100]  # a prefix, whatever n is
    assert get_task(name).test_problems(1000) == test


@pytest.mark.parametrize("name", ALL)
def test_test_split_never_appears_in_training(name):
    task = get_task(name)
    test_ids = {p.id for p in task.test_problems()}
    test_prompts = {p.prompt for p in task.test_problems()}
    for seed in (0, 1):
        train = take(task, seed, 10_000)
        assert not test_ids & {p.id for p in train}
        assert not test_prompts & {p.prompt for p in train}


def _evaluate(prompt: str) -> int:
    m = re.fullmatch(r"(\d+)([+\-*])(\d+)=", prompt)
    assert m, prompt
    a, op, b = int(m[1]), m[2], int(m[3])
    return {"+": a + b, "-": a - b, "*": a * b}[op]


@pytest.mark.parametrize("name", ALL)
def test_answers_are_correct_and_prompts_well_formed(name):
    task = get_task(name)
    problems = take(task, 3, 500) + task.test_problems(500)
    for p in problems:
        assert p.answer == str(_evaluate(p.prompt))
        assert p.prompt.endswith("=") and " " not in p.prompt
        assert p.id == f"{name}/{p.prompt[:-1]}"
    # fixed-width operands: every prompt of a task has the same length
    assert len({len(p.prompt) for p in problems}) == 1


def test_examples():
    p = get_task("add2").test_problems(1)[0]
    a, b = p.prompt[:-1].split("+")
    assert len(a) == len(b) == 2 and p.answer == str(int(a) + int(b))
    assert all(len(x) == 3 for x in take(get_task("add3"), 0, 20)[0].prompt[:-1].split("+"))
    mixed = take(get_task("mixed"), 0, 2000)
    assert {"+", "-"} == {p.meta["op"] for p in mixed}
    assert any(p.answer.startswith("-") for p in mixed)


@pytest.mark.parametrize("name", ALL)
def test_reward_verdicts(name):
    task = get_task(name)
    problem = task.test_problems(1)[0]
    sample = problem.as_sample()  # the verifier is a reward function: (completion, sample)
    wrong = str(int(problem.answer) + 1)
    assert task.reward(problem.answer, sample) == 1.0
    assert task.reward(f"  {problem.answer}\n", sample) == 1.0
    assert task.reward(wrong, sample) == 0.0
    assert task.reward("0" + problem.answer, sample) == 0.0
    assert task.reward(problem.answer + problem.answer, sample) == 0.0
    assert task.reward(f"{problem.answer} {problem.answer}", sample) == 0.0
    assert task.reward("", sample) == 0.0
    assert task.reward("garbage ☃ <|eos|>", sample) == 0.0
    assert task.reward(None, sample) is None  # type: ignore[arg-type]


def test_problem_is_frozen_and_hashable():
    p = get_task("add2").test_problems(1)[0]
    with pytest.raises(AttributeError):
        p.answer = "0"  # type: ignore[misc]
    assert len({p, get_task("add2").test_problems(1)[0]}) == 1


def test_one_reward_contract_for_verifiers_and_specs():
    """A task's verifier and a reward spec are both ``fn(completion, sample)`` with ``sample`` =
    ``Problem.as_sample()``; task_scorer runs the task's own verifier inline and a spec by name."""
    from hacrl.config import ConfigError, TaskConfig
    from hacrl.data.factory import task_scorer
    from hacrl.rewards import RewardScorer

    task = get_task("add2")
    problems = task.test_problems(3)
    answers = [problems[0].answer, "x", f" {problems[2].answer}\n"]
    with task_scorer(task, TaskConfig()) as own:
        assert own.timeout_s is None and own.fn == task.reward  # the verifier itself, inline
        assert own.score_problems(answers, problems).rewards == [1.0, 0.0, 1.0]
    with task_scorer(task, TaskConfig(reward="exact", reward_timeout_s=None)) as by_name:
        assert by_name.spec == "exact" and by_name.score_problems(answers, problems).rewards == [1.0, 0.0, 1.0]
    with pytest.raises(ConfigError, match="task.reward: unknown reward 'no-such'"):
        task_scorer(task, TaskConfig(reward="no-such"))
    seen: list[dict] = []
    RewardScorer(lambda text, sample: seen.append(sample) or 1.0, timeout_s=None).score_problems(["1"], problems[:1])
    p = problems[0]
    assert seen == [{**p.meta, "prompt": p.prompt, "answer": p.answer, "problem_id": p.id}]
