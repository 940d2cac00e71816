"""Local data files → Problems (every format, dotted fields, bad rows) and the DatasetTask over them."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hacrl.data.datasets import PAPER_TEMPLATE, DatasetTask, load_problems, make_dataset_task
from hacrl.data.gym import reasoning_gym_task
from hacrl.data.rows import LoadResult
from hacrl.errors import InputError
from hacrl.types import Problem

FIXTURES = Path(__file__).parent / "fixtures"
GOOD = [("What is 1+1?", "2"), ("What is 2*3?", "6"), ("Half of 1?", "0.5"), ("What is 10-3?", "7")]
VERL_ROWS = [
    {"data_source": "DigitalLearningGmbH/MATH-lighteval", "ability": "math",
     "prompt": [{"role": "system", "content": "You are a careful solver."},
                {"role": "user", "content": f"{q} Let's think step by step and output the final answer "
                                            "within \\boxed{}."}],
     "reward_model": {"style": "rule", "ground_truth": a}, "extra_info": {"split": "train", "index": i}}
    for i, (q, a) in enumerate(GOOD)
] + [{"data_source": "x", "ability": "math", "prompt": [{"role": "user", "content": "no truth"}],
      "reward_model": {"style": "rule", "ground_truth": None}, "extra_info": {"split": "train", "index": 9}}]


def qa(result: LoadResult) -> list[tuple[str, str]]:
    return [(p.prompt, p.answer) for p in result.problems]


def take(task, seed: int, n: int) -> list[Problem]:
    return list(itertools.islice(task.train_problems(seed), n))


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---- formats ----------------------------------------------------------------------------------------
def test_jsonl_skips_and_counts_every_kind_of_bad_row():
    result = load_problems(FIXTURES / "rows.jsonl", max_line_bytes=1000)
    assert qa(result) == GOOD
    # ids are {stem}/{row}: bad rows count, the blank line does not
    assert [p.id for p in result.problems] == ["rows/0", "rows/1", "rows/9", "rows/10"]
    assert result.skipped == {"bad_json": 1, "bad_type_answer": 1, "empty_question": 1, "line_too_long": 1,
                              "missing_answer": 1, "not_an_object": 1, "not_utf8": 1}


def test_prompt_too_long_is_counted():
    result = load_problems(FIXTURES / "rows.jsonl", max_prompt_chars=1000)  # the 3000-char line is read
    assert result.skipped["prompt_too_long"] == 1 and "line_too_long" not in result.skipped
    assert qa(result) == GOOD


@pytest.mark.parametrize("name", ["rows_list.json", "rows_data.json"])
def test_json_list_and_data_object(name):
    result = load_problems(FIXTURES / name)
    assert qa(result) == GOOD and result.skipped == {}


def test_json_lines_named_json(tmp_path):
    path = tmp_path / "to_json.json"  # what datasets' Dataset.to_json writes by default
    write_jsonl(path, json.loads((FIXTURES / "rows_list.json").read_text()))
    assert qa(load_problems(path)) == GOOD


def test_dotted_fields_ids_and_duplicates():
    result = load_problems(FIXTURES / "nested.jsonl", question_field="q.text",
                           answer_field="reward_model.ground_truth", id_field="uid")
    assert [(p.id, p.prompt, p.answer) for p in result.problems] == [("a", "What is 3+4?", "7"),
                                                                     ("b", "What is 5+5?", "10")]
    assert result.skipped == {"missing_answer": 1, "duplicate_id": 1}


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [{"problem": q, "solution": a, "level": 3} for q, a in GOOD] + [{"problem": "", "solution": "1",
                                                                             "level": 1}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "math.parquet")
    result = load_problems(tmp_path / "math.parquet", question_field="problem", answer_field="solution")
    assert qa(result) == GOOD and result.skipped == {"empty_question": 1}
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="cannot read .*broken.parquet as parquet"):
        load_problems(tmp_path / "broken.parquet")


def test_verl_parquet_is_detected(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(VERL_ROWS), tmp_path / "train.parquet")
    result = load_problems(tmp_path / "train.parquet")
    assert [p.answer for p in result.problems] == [a for _, a in GOOD]
    first = result.problems[0]
    assert first.prompt.startswith("What is 1+1? Let's think") and first.prompt.endswith("\\boxed{}.")
    assert first.meta["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert first.meta["templated"] and first.meta["system"] == "You are a careful solver."
    assert result.skipped == {"missing_answer": 1}
    # the verl prompt is already a full prompt: the default template leaves it alone
    task = DatasetTask(result.problems, result.problems[:1])
    assert task.test_problems()[0].prompt == first.prompt


def test_saved_hf_dataset_and_dataset_dict(tmp_path):
    hf = pytest.importorskip("datasets")
    rows = [{"question": q, "answer": a} for q, a in GOOD]
    hf.Dataset.from_list(rows).save_to_disk(str(tmp_path / "single"))
    assert qa(load_problems(tmp_path / "single")) == GOOD
    splits = {"train": hf.Dataset.from_list(rows[:3]), "test": hf.Dataset.from_list(rows[3:])}
    hf.DatasetDict(splits).save_to_disk(str(tmp_path / "dict"))
    result = load_problems(tmp_path / "dict", split="test")
    assert qa(result) == GOOD[3:] and result.problems[0].id == "dict/test/0"
    with pytest.raises(InputError, match="holds splits train, test"):
        load_problems(tmp_path / "dict")


# ---- errors -----------------------------------------------------------------------------------------
def test_nothing_usable_names_file_fields_counts_and_fix():
    with pytest.raises(InputError) as info:
        load_problems(FIXTURES / "unusable.jsonl")
    msg = str(info.value)
    assert "\n" not in msg and "unusable.jsonl" in msg
    assert "question field 'question'" in msg and "answer field 'answer'" in msg
    assert "missing_question=2" in msg and "bad_json=1" in msg
    assert "question_field" in msg and "fields problem, solution" in msg
    # and the fix works
    assert qa(load_problems(FIXTURES / "unusable.jsonl", question_field="problem",
                            answer_field="solution")) == [("p1", "s"), ("p2", "s")]


def test_missing_file_and_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="not found: .*nope.jsonl"):
        load_problems(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="unknown format '.csv'"):
        (tmp_path / "a.csv").write_text("question,answer\n")
        load_problems(tmp_path / "a.csv")
    with pytest.raises(InputError, match="line 1 column"):
        (tmp_path / "bad.json").write_text("[{")
        load_problems(tmp_path / "bad.json")
    with pytest.raises(InputError, match="has no rows"):
        load_problems(write_jsonl(tmp_path / "empty.jsonl", []))
    with pytest.raises(InputError, match="not one saved with datasets"):
        load_problems(tmp_path)
    assert issubclass(InputError, ValueError)


def test_missing_optional_packages_say_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import now raises ImportError
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(InputError, match=r"pip install 'hacrl\[data\]'"):
        (tmp_path / "x.parquet").touch()
        load_problems(tmp_path / "x.parquet")
    with pytest.raises(InputError, match=r"pip install 'hacrl\[gym\]'"):
        reasoning_gym_task("basic_arithmetic", seed=0, size=5, test_size=2)


def test_import_is_light():
    code = ("import sys, hacrl.data.rows, hacrl.data.datasets, hacrl.data.gym, hacrl.data.benchmarks; "
            "print(sorted(m for m in ('datasets', 'pyarrow', 'reasoning_gym') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- DatasetTask ------------------------------------------------------------------------------------
def many(n: int) -> list[Problem]:
    return [Problem(f"p{i}", f"What is {i}+{i}?", str(2 * i)) for i in range(n)]


def test_held_out_split_is_disjoint_and_seeded():
    task = DatasetTask(many(100), test_fraction=0.2, split_seed=3)
    test_ids = {p.id for p in task.test_problems()}
    train_ids = {p.id for p in take(task, 0, 400)}
    assert len(test_ids) == 20 and len(train_ids) == 80 and not test_ids & train_ids
    again = DatasetTask(many(100), test_fraction=0.2, split_seed=3)
    assert [p.id for p in again.test_problems()] == [p.id for p in task.test_problems()]
    other = DatasetTask(many(100), test_fraction=0.2, split_seed=4)
    assert {p.id for p in other.test_problems()} != test_ids
    # the first n do not depend on n
    assert task.test_problems(5) == task.test_problems()[:5] and len(task.test_problems(500)) == 20


def test_train_stream_is_deterministic_epochs_reshuffle():
    a, b = DatasetTask(many(30)), DatasetTask(many(30))
    assert take(a, 0, 200) == take(b, 0, 200)
    assert take(a, 0, 50) != take(a, 1, 50)
    stream = take(a, 7, 3 * a.num_train)
    epochs = [stream[i * a.num_train:(i + 1) * a.num_train] for i in range(3)]
    assert all(sorted(p.id for p in e) == sorted(p.id for p in epochs[0]) for e in epochs)  # each epoch once
    assert epochs[0] != epochs[1]


def test_train_questions_seen_in_test_are_dropped():
    train = many(10) + [Problem("dup", "What is  3+3?", "6")]  # same question as p3, other spacing
    task = DatasetTask(train, [Problem("t", "What is 3+3?", "6")])
    assert task.skipped == {"train/in_test": 2} and task.num_train == 9


def test_prompt_template_default_custom_and_validated():
    task = DatasetTask(many(4), test_fraction=0.5)
    p = task.test_problems(1)[0]
    i = int(p.id[1:])
    assert p.prompt == PAPER_TEMPLATE.replace("{question}", f"What is {i}+{i}?")
    assert p.prompt.endswith("Let's think step by step and output the final answer within \\boxed{}.")
    custom = DatasetTask(many(4), test_fraction=0.5, prompt_template="Q: {question}\nA: {braces} stay")
    prompt = custom.test_problems(1)[0].prompt
    assert prompt.startswith("Q: What is") and "{braces}" in prompt
    for bad in ["no placeholder", "{question} {question}"]:
        with pytest.raises(InputError, match="exactly once"):
            DatasetTask(many(4), prompt_template=bad)


def test_reward_default_math_and_spec():
    task = DatasetTask(many(4), test_fraction=0.5)
    p = task.test_problems(1)[0]
    assert task.reward_spec == "math"
    sample = p.as_sample()
    assert task.reward(f"so \\boxed{{{p.answer}}}", sample) == 1.0 and task.reward("\\boxed{-1}", sample) == 0.0
    assert DatasetTask(many(4), test_fraction=0.5, reward="numeric").reward(f"it is {p.answer}", sample) == 1.0
    with pytest.raises(InputError, match="task reward"):
        DatasetTask(many(4), reward="no-such-reward")


def test_make_dataset_task_from_files(tmp_path):
    rows = [{"problem": f"Q{i}?", "solution": str(i)} for i in range(20)] + [{"problem": "no solution"}]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    test = write_jsonl(tmp_path / "test.jsonl", [{"problem": "Q3?", "solution": "3"},
                                                 {"problem": "T?", "solution": "1"},
                                                 {"problem": "A longer test question?", "solution": "2"}])
    fields = {"question_field": "problem", "answer_field": "solution"}
    task = make_dataset_task(train_path=train, test_path=test, max_new_tokens=64, **fields)
    assert task.name == "train" and task.max_new_tokens == 64 and task.num_train == 19
    assert task.skipped == {"train/missing_answer": 1, "train/in_test": 1}
    assert sorted(p.answer for p in task.test_problems()) == ["1", "2", "3"]
    # max_prompt_chars bounds the rendered prompt
    short = make_dataset_task(train_path=train, test_path=test, prompt_template="Q {question}",
                              max_prompt_chars=5, **fields)
    assert all(len(p.prompt) <= 5 for p in take(short, 0, 40)) and short.num_train == 9  # "Q Q0?" .. "Q Q9?"
    assert short.skipped["train/prompt_too_long"] == 10 and short.skipped["test/prompt_too_long"] == 1


def test_make_dataset_task_with_benchmark_test_set(tmp_path):
    rows = [{"question": f"Q{i}?", "answer": str(i)} for i in range(9)]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    task = make_dataset_task(train_path=train, test_path=FIXTURES / "benchmarks" / "gsm8k.jsonl",
                             test_benchmark="gsm8k")
    assert sorted(p.answer for p in task.test_problems()) == ["14400", "5", "72"]
    assert task.skipped == {"test/no_final_answer": 1}
    assert all(p.prompt.endswith("\\boxed{}.") for p in task.test_problems())
    assert all(p.meta["benchmark"] == "gsm8k" for p in task.test_problems())
    with pytest.raises(InputError, match="test_path"):
        make_dataset_task(train_path=train, test_benchmark="gsm8k")


def test_too_few_rows_to_hold_out():
    with pytest.raises(InputError, match="too few to hold out"):
        DatasetTask(many(1))


# ---- reasoning-gym ----------------------------------------------------------------------------------
def test_reasoning_gym_task():
    pytest.importorskip("reasoning_gym", reason="reasoning-gym not installed (pip install 'hacrl[gym]')")
    task = reasoning_gym_task("basic_arithmetic", seed=5, size=50, test_size=10, max_new_tokens=32)
    test = task.test_problems()
    assert len(test) == 10 and task.test_problems(3) == test[:3] and task.max_new_tokens == 32
    stream = take(task, 0, 100)
    assert stream == take(reasoning_gym_task("basic_arithmetic", seed=5, size=50, test_size=10), 0, 100)
    assert stream[:40] != take(task, 1, 40)
    assert not {p.meta["question"] for p in stream} & {p.meta["question"] for p in test}
    p = test[0]
    assert p.prompt.endswith("\\boxed{}.") and task.reward(f"\\boxed{{{p.answer}}}", p.as_sample()) == 1.0
    assert task.reward(f"it is {float(p.answer) + 1}", p.as_sample()) == 0.0  # numeric: last number
    fractions = reasoning_gym_task("fraction_simplification", seed=0, size=20, test_size=5)
    f = fractions.test_problems(1)[0]
    assert "/" in f.answer and fractions.reward(f"\\boxed{{{f.answer}}}", f.as_sample()) == 1.0
    with pytest.raises(InputError, match="did you mean: basic_arithmetic"):
        reasoning_gym_task("basic_arithmetc", seed=0, size=5, test_size=2)
    with pytest.raises(InputError, match="rejected its config"):
        reasoning_gym_task("basic_arithmetic", seed=0, size=5, test_size=2, config={"no_such_option": 1})
