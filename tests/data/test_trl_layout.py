"""Data sets in TRL's layout (prompt + solution + any columns): the prompt as written, every column reaching
the reward, conversational prompts, and the reward's contract checked before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hacrl.config import ConfigError, load_config
from hacrl.data.datasets import PAPER_TEMPLATE, load_problems, make_dataset_task
from hacrl.data.factory import build_task, task_scorer

REWARDS = Path(__file__).resolve().parents[1] / "rewards" / "trl_rewards.py"


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def trl_rows(n: int = 12) -> list[dict]:
    return [{"prompt": f"{i:02d}+{i + 1:02d}=", "solution": str(2 * i + 1),
             "difficulty": "hard" if i % 2 else "easy"} for i in range(n)]


def test_a_trl_layout_is_read_with_its_prompt_as_written(tmp_path):
    path = write_rows(tmp_path / "trl.jsonl", trl_rows())
    loaded = load_problems(path)
    first = loaded.problems[0]
    assert (first.prompt, first.answer) == ("00+01=", "1")
    assert first.meta["difficulty"] == "easy" and first.meta["solution"] == "1" and first.meta["templated"]
    task = make_dataset_task(train_path=path, test_fraction=0.25)
    for p in task.test_problems() + [next(task.train_problems(0))]:
        assert p.prompt.endswith("=") and "step by step" not in p.prompt  # no paper suffix on a prompt column
    # a template given on purpose is still applied
    templated = make_dataset_task(train_path=path, test_fraction=0.25, prompt_template="Q: {question}")
    assert templated.test_problems()[0].prompt.startswith("Q: ")


def test_a_question_column_keeps_the_paper_template(tmp_path):
    path = write_rows(tmp_path / "q.jsonl", [{"question": f"{i}+1", "answer": str(i + 1)} for i in range(4)])
    task = make_dataset_task(train_path=path, test_fraction=0.25)
    assert task.test_problems()[0].prompt == PAPER_TEMPLATE.replace("{question}", task.test_problems()[0].meta["question"])


def test_every_column_reaches_the_sample(tmp_path):
    path = write_rows(tmp_path / "trl.jsonl", trl_rows())
    sample = load_problems(path).problems[3].as_sample()
    assert {k: sample[k] for k in ("difficulty", "solution", "row", "answer", "prompt")} == \
        {"difficulty": "hard", "solution": "7", "row": 3, "answer": "7", "prompt": "03+04="}


def test_conversational_prompts_keep_their_messages(tmp_path):
    chat = [{"role": "system", "content": "Answer with the number."}, {"role": "user", "content": "2+2="}]
    path = write_rows(tmp_path / "chat.jsonl", [{"prompt": chat, "solution": "4"}, {"prompt": chat[1:], "solution": "5"}])
    first = load_problems(path).problems[0]
    assert first.prompt == "2+2=" and first.meta["chat_prompt"] == chat and first.meta["system"] == chat[0]["content"]


def dataset_cfg(path: Path, *overrides: str):
    return load_config("tiny-test", overrides=["task.kind=dataset", f"task.train_path={path}",
                                               "task.reward_timeout_s=5", *overrides])


def test_the_reward_contract_is_checked_before_any_model_loads(tmp_path):
    path = write_rows(tmp_path / "trl.jsonl", trl_rows())
    cfg = dataset_cfg(path, f"task.reward={REWARDS}:returns_float")
    task = build_task(cfg.task, seed=0, max_new_tokens=4)
    with pytest.raises(ConfigError) as info:
        task_scorer(task, cfg.task)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"task.reward: reward {REWARDS}:returns_float returned float, expected "
                                              f"a list of 2 floats")


def test_weights_and_an_explicit_contract_come_from_the_config(tmp_path):
    path = write_rows(tmp_path / "trl.jsonl", trl_rows())
    cfg = dataset_cfg(path, f"task.reward=[{REWARDS}:accuracy_reward, {REWARDS}:hard_only]",
                      "task.reward_weights=[1.0, 0.5]")
    task = build_task(cfg.task, seed=0, max_new_tokens=4)
    problems = task.test_problems()
    with task_scorer(task, cfg.task) as scorer:
        res = scorer.score_problems([p.answer for p in problems], problems)
    # right answers: accuracy 1; hard rows add 0.5 * 1 (a non-empty answer), easy rows' hard_only is None
    assert res.rewards == [1.5 if p.meta["difficulty"] == "hard" else 1.0 for p in problems]
    with pytest.raises(ConfigError, match="reward_weights has 1 weights for 2 rewards"):
        dataset_cfg(path, f"task.reward=[{REWARDS}:accuracy_reward, exact]", "task.reward_weights=[1.0]")
    forced = dataset_cfg(path, f"task.reward={REWARDS}:per_answer_returns_list", "task.reward_contract=trl")
    with pytest.raises(ConfigError, match="needs the keyword 'completion', which the rows do not have"):
        task_scorer(build_task(forced.task, seed=0, max_new_tokens=4), forced.task)


def test_a_conversational_data_set_gives_trl_rewards_message_lists(tmp_path):
    chat = [{"role": "system", "content": "Answer with the number."}]
    rows = [{"prompt": [*chat, {"role": "user", "content": f"{i}+1="}], "solution": str(i + 1)} for i in range(8)]
    cfg = dataset_cfg(write_rows(tmp_path / "chat.jsonl", rows),
                      f"task.reward=[{REWARDS}:sees_chat_prompts, {REWARDS}:format_reward_func]")
    task = build_task(cfg.task, seed=0, max_new_tokens=4)
    problems = task.test_problems()
    assert problems[0].prompt.endswith("+1=")  # the agents get the user message (and the system one, kept)
    with task_scorer(task, cfg.task) as scorer:
        res = scorer.score_problems(["<think>a</think><answer>2</answer>"] * len(problems), problems)
    assert res.rewards == [2.0] * len(problems)  # 1 (prompts are messages, completions assistant messages) + 1
