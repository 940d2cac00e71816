"""``task.fewshot``: the same k worked examples, from the train side, before every prompt, in each task's
answer format; refused in one line where a task cannot write them."""

from __future__ import annotations

import importlib.util
import itertools

import pytest

from hacrl.config import ConfigError, load_config
from hacrl.data.datasets import DatasetTask
from hacrl.data.factory import build_task
from hacrl.data.fewshot import with_fewshot
from hacrl.data.splits import normalize_question, question_of
from hacrl.data.tasks import get_task
from hacrl.errors import InputError
from hacrl.types import Problem

BOXED = "Let's think step by step and output the final answer within \\boxed{}."


def first_train(task, seed: int = 0) -> Problem:
    return next(iter(task.train_problems(seed)))


def test_add2_prompts_start_with_two_worked_sums_from_the_train_side():
    plain, task = get_task("add2"), with_fewshot(get_task("add2"), 2)
    held, train = task.test_problems(1)[0], first_train(task)
    # 27+96 = 123 and 6+79 = 85: the task's own format, prompt then answer, one per line
    assert held.prompt == "27+96=123\n06+79=85\n14+96="
    assert train.prompt == "27+96=123\n06+79=85\n80+32="
    assert (held.id, held.answer, question_of(held)) == ("add2/14+96", "110", "14+96=")
    assert held.id == plain.test_problems(1)[0].id  # the same problem: results pair with a plain run
    assert not plain.is_test("27+96") and not plain.is_test("06+79")
    assert task.reward("110", held.as_sample()) == 1.0 and task.name == "add2" and task.max_new_tokens == 6
    # the same prefix for every prompt of every seed
    prompts = [p.prompt for p in itertools.islice(task.train_problems(5), 50)] + [p.prompt for p in task.test_problems()]
    assert all(p.startswith("27+96=123\n06+79=85\n") and p.count("\n") == 2 for p in prompts)
    assert with_fewshot(plain, 0) is plain


def test_dataset_examples_show_the_boxed_answer_and_stay_out_of_the_held_out_split():
    problems = [Problem(f"p{i}", f"What is {i}+{i}?", str(2 * i)) for i in range(10)]
    task = with_fewshot(DatasetTask(problems, test_fraction=0.2, prompt_template="Q: {question}"), 1)
    assert [p.id for p in task.test_problems()] == ["p1", "p0"]
    assert task.test_problems()[0].prompt == "Q: What is 2+2?\nThe answer is \\boxed{4}.\n\nQ: What is 1+1?"
    assert question_of(task.test_problems()[0]) == "What is 1+1?"
    with pytest.raises(InputError) as err:
        with_fewshot(DatasetTask(problems, test_fraction=0.2, reward="exact"), 1)
    assert "\n" not in str(err.value) and str(err.value).startswith("task.fewshot: the worked examples of dataset")
    assert "fix: task.reward=math" in str(err.value)
    with pytest.raises(InputError, match=r"^task.fewshot=9: dataset 'dataset' has 8 train problems; fix: a smaller"):
        with_fewshot(DatasetTask(problems, test_fraction=0.2), 9)


def test_too_many_examples_for_a_builtin_task_is_one_line():
    with pytest.raises(InputError, match=r"^task.fewshot=5000: task 'add2' has about 8500 training problems; "
                                         r"asked for 5000 worked examples; fix: a smaller task.fewshot$"):
        with_fewshot(get_task("add2"), 5000)
    with pytest.raises(ConfigError, match="task.fewshot"):
        load_config(overrides=["task.fewshot=-1"])


@pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym not installed")
def test_basic_arithmetic_examples_are_written_as_the_fine_tuned_copy_answers():
    from hacrl.agents import gguf

    cfg = load_config("smollm2-state", overrides=["task.fewshot=2"]).task
    task, plain = build_task(cfg, seed=0, max_new_tokens=48), build_task(cfg.model_copy(update={"fewshot": 0}),
                                                                        seed=0, max_new_tokens=48)
    # 2 - 22 = -20 and 26 - 84 = -58, each in the exact form sft_examples trains the SmolLM2 copy on
    assert task.prefix == (f"Calculate 2 - 22. {BOXED}\n2 - 22 = -20. The answer is \\boxed{{-20}}.\n\n"
                           f"Calculate 26 - 84. {BOXED}\n26 - 84 = -58. The answer is \\boxed{{-58}}.\n\n")
    question, answer = gguf.sft_examples(1)[0]
    assert answer == "28 + 47 = 75. The answer is \\boxed{75}." and question == "Calculate 28 + 47."
    held = task.test_problems()
    assert held[0].prompt == task.prefix + f"Calculate 32 + 59. {BOXED}" and held[0].id == "basic_arithmetic/test/0"
    assert [p.id for p in held] == [p.id for p in plain.test_problems()]
    held_questions = {normalize_question(question_of(p)) for p in held}
    assert not {"calculate 2 - 22", "calculate 26 - 84"} & held_questions
    train = first_train(task, 3)
    assert train.prompt.startswith(task.prefix) and task.reward(f"\\boxed{{{train.answer}}}", train.as_sample()) == 1.0


def test_compare_variant_sets_fewshot():
    from hacrl.report.compare import parse_variant

    assert parse_variant("gspo@task.fewshot=3") == ("gspo", ["task.fewshot=3"])
    assert load_config("tiny-model", overrides=parse_variant("gspo@task.fewshot=3")[1]).task.fewshot == 3


@pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym not installed")
def test_reasoning_gym_examples_skip_held_out_questions():
    import reasoning_gym

    from hacrl.data.gym import ReasoningGymTask

    ds = reasoning_gym.create_dataset("basic_arithmetic", seed=3, size=30, min_terms=2, max_terms=2)
    # worked examples drawn from the held-out stream itself: every one is a held-out question
    task = ReasoningGymTask("basic_arithmetic", ds, ds, examples_ds=ds)
    with pytest.raises(InputError, match=r"^task.fewshot=1: reasoning-gym 'basic_arithmetic' gives only 0 worked "
                                         r"examples outside the held-out split; fix: a smaller task.fewshot$"):
        with_fewshot(task, 1)

