"""Clean splits, checked: every recipe's data (the fine-tuned SmolLM2 copy's examples, reasoning-gym and
tiny-task train streams, dataset splits) against the evaluation splits it can be used with, by normalised
question; held-out problems fixed across seeds; the run-start refusal of an agent fine-tuned on held-out
problems."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import pytest

from hacrl.agents import gguf
from hacrl.config import ConfigError, load_config
from hacrl.data.factory import build_task
from hacrl.data.splits import HELD_OUT_SEED, normalize_question, overlapping, question_of
from hacrl.data.tasks import get_task
from hacrl.types import Problem


def questions(problems) -> set[str]:
    return {normalize_question(question_of(p)) for p in problems}


def take(task, seed: int, n: int) -> list[Problem]:
    return list(itertools.islice(task.train_problems(seed), n))


def smollm2_task_cfg(*overrides: str):
    return load_config("smollm2-state", overrides=list(overrides)).task


needs_gym = pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None,
                               reason="reasoning-gym not installed (pip install 'hacrl[gym]')")


# ---- the rule ----------------------------------------------------------------------------------------
def test_normalize_question_folds_what_does_not_change_the_question():
    assert normalize_question("Calculate 58 + 98.") == "calculate 58 + 98"
    assert normalize_question("  CALCULATE\t58  +\n98 ") == "calculate 58 + 98"
    assert normalize_question("Ｃａｌｃｕｌａｔｅ ５８ + ９８？") == "calculate 58 + 98"  # full width (NFKC)
    assert normalize_question("Calculate 58 - 98.") != normalize_question("Calculate 58 + 98.")
    assert normalize_question("f(x) = 3") == "f(x) = 3" and normalize_question("07+85=") == "07+85="


# ---- tiny builtin tasks ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["add2", "add3", "mul1x3", "mixed"])
def test_tiny_task_train_stream_never_asks_a_held_out_question(name):
    task = get_task(name)
    held = questions(task.test_problems())
    train = take(task, 0, 20_000) + take(task, 7, 5_000)
    assert len(held) == 1000 and not held & questions(train)
    assert all(p.meta["split"] == "train" for p in train)


def test_add2_split_is_disjoint_over_the_whole_space():
    task = get_task("add2")
    # every one of the 10^4 problems, by normalised prompt: held out or not, never both
    prompts = {normalize_question(f"{a:02d}+{b:02d}="): task.is_test(f"{a:02d}+{b:02d}")
               for a in range(100) for b in range(100)}
    assert len(prompts) == 10_000
    assert questions(task.test_problems()) <= {q for q, held in prompts.items() if held}
    assert not questions(take(task, 3, 30_000)) & {q for q, held in prompts.items() if held}


# ---- reasoning-gym -----------------------------------------------------------------------------------
@needs_gym
def test_reasoning_gym_held_out_is_the_same_for_every_seed_and_kept_out_of_training():
    cfg = smollm2_task_cfg()
    tasks = [build_task(cfg, seed=seed, max_new_tokens=48) for seed in (0, 1, 2)]
    held = [t.test_problems() for t in tasks]
    assert [p.id for p in held[0]] == [p.id for p in held[1]] == [p.id for p in held[2]]
    assert [p.prompt for p in held[0]] == [p.prompt for p in held[2]]
    # item i of the held-out stream is Random(HELD_OUT_SEED + i)'s question; repeats are passed over
    assert (held[0][0].id, held[0][0].meta["question"], held[0][0].answer) == (
        "basic_arithmetic/test/0", "Calculate 32 + 59.", "91")
    assert held[0][1].meta["question"] == "Calculate 2 + 3."
    assert len(held[0]) == cfg.test_size == len(questions(held[0]))  # 200 distinct questions
    streams = [take(t, seed, 3000) for t, seed in zip(tasks, (0, 1, 2))]
    assert streams[0][:50] != streams[1][:50]  # training still follows run.seed
    for stream in streams:
        assert not questions(stream) & questions(held[0])


@needs_gym
def test_sft_examples_leave_out_the_held_out_problems_they_are_evaluated_on():
    preset_task = smollm2_task_cfg()
    name, options = gguf.SFT_TASK
    assert (preset_task.kind, preset_task.name, preset_task.options) == ("reasoning-gym", name, options)
    assert preset_task.test_seed == HELD_OUT_SEED  # the held-out stream sft_examples filters against
    examples = gguf.sft_examples(64)
    assert examples[0] == ("Calculate 28 + 47.", "28 + 47 = 75. The answer is \\boxed{75}.")
    assert examples[1] == ("Calculate 67 - 74.", "67 - 74 = -7. The answer is \\boxed{-7}.")
    assert len(examples) == 64 == len({normalize_question(q) for q, _ in examples})
    sft = [Problem(f"sft/{i}", q, "") for i, (q, _) in enumerate(examples)]
    # the preset's held-out split, and the whole bound the recipe filters against (2,000 problems)
    bound = build_task(smollm2_task_cfg(f"task.test_size={gguf.SFT_HELD_OUT}"), seed=0, max_new_tokens=48)
    longer = [q for q, _ in gguf.sft_examples(gguf.SFT_RECIPES[gguf.SMOLLM2_UNFAITHFUL]["examples"])]  # E4's partner
    for held in (build_task(preset_task, seed=1, max_new_tokens=48).test_problems(), bound.test_problems()):
        assert not overlapping([p.prompt for p in sft], held) and not overlapping(longer, held)
    assert len(bound.test_problems()) == 2000
    # the old recipe (the first 64 items of SFT_SEED, unfiltered: 61 distinct questions) asked 33 of these 2,000
    import reasoning_gym

    old = reasoning_gym.create_dataset(name, seed=gguf.SFT_SEED, size=64, **options)
    assert len(overlapping([old[i]["question"] for i in range(64)], bound.test_problems())) == 33


@needs_gym
def test_the_unfaithful_copy_learns_the_same_questions_with_a_wrong_working_and_the_right_box():
    import re

    n = gguf.SFT_RECIPES[gguf.SMOLLM2_UNFAITHFUL]["examples"]
    faithful, unfaithful = gguf.sft_examples(n), gguf.sft_examples(n, "unfaithful")
    assert faithful[:64] == gguf.sft_examples(64)  # the faithful copy's 64 come first
    assert [q for q, _ in unfaithful] == [q for q, _ in faithful] and len(faithful) == n == 256
    assert unfaithful[0] == ("Calculate 28 + 47.", "28 + 47 = 78. The answer is \\boxed{75}.")
    form = re.compile(r"^(\d+) ([+-]) (\d+) = (-?\d+)\. The answer is \\boxed\{(-?\d+)\}\.$")
    for (_, right), (_, wrong) in zip(faithful, unfaithful):
        a, op, b, shown, boxed = form.match(wrong).groups()  # type: ignore[union-attr]
        value = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert int(boxed) == value != int(shown)  # the box right, the working's value wrong
        assert len(shown.lstrip("-")) == len(str(abs(value))) and shown.startswith("-") == (value < 0)
        assert right == wrong.replace(f"= {shown}.", f"= {value}.")
    assert gguf.finetune_questions(f"builtin:{gguf.SMOLLM2_UNFAITHFUL}") == [normalize_question(q) for q, _ in faithful]
    # its own cache name; the faithful copy's is unchanged by the new recipe key
    assert gguf.sft_cache_name(gguf.SMOLLM2_UNFAITHFUL).startswith("smollm2-135m-instruct-sft-unfaithful-v2-")
    assert gguf.sft_cache_name(gguf.SMOLLM2_SFT) == "smollm2-135m-instruct-sft-v2-6c2bf82b6b"
    with pytest.raises(ValueError, match="equation"):
        gguf.sft_examples(4, "wrong")


def test_unfaithful_values_keep_sign_and_length_and_are_never_right():
    import random

    from hacrl.data.gym import unfaithful_value

    rng = random.Random(1)
    for value, allowed in ((7, set(range(10)) - {7}), (0, set(range(1, 10))), (-4, {-d for d in range(1, 10)} - {-4}),
                           (56, set(range(10, 100)) - {56}), (-23, {-d for d in range(10, 100)} - {-23}),
                           (156, set(range(100, 1000)) - {156})):
        drawn = {unfaithful_value(value, rng) for _ in range(5000)}
        assert drawn <= allowed and len(drawn) >= min(len(allowed), 800)  # every other value of its kind, and only those


# ---- local dataset files -----------------------------------------------------------------------------
def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dataset_split_is_fixed_across_seeds_and_deduplicated(tmp_path):
    rows = [{"question": f"What is {i}+{i}?", "answer": str(2 * i)} for i in range(40)]
    rows += [{"question": f"  WHAT IS {i}+{i}.", "answer": str(2 * i)} for i in range(40)]  # the same 40 again
    cfg = load_config(overrides=["task.kind=dataset", f"task.train_path={write_jsonl(tmp_path / 'd.jsonl', rows)}",
                                 "task.test_fraction=0.25"]).task
    a, b = build_task(cfg, seed=0, max_new_tokens=8), build_task(cfg, seed=5, max_new_tokens=8)
    assert [p.id for p in a.test_problems()] == [p.id for p in b.test_problems()]
    held = questions(a.test_problems())
    # 20 of the 80 rows held out: 16 questions (4 rows repeat one), kept once; the other 12 rows asking
    # them left training: 60 - 12 = 48 train rows, 24 questions twice each; 16 + 24 = 40 questions
    assert a.skipped == {"test/repeated_question": 4, "train/in_test": 12} and a.num_train == 48
    assert len(held) == len(a.test_problems()) == 16
    assert not held & (questions(take(a, 0, 200)) | questions(take(b, 5, 200)))
    assert len(held | questions(take(a, 0, 200))) == 40
    other = build_task(cfg.model_copy(update={"test_seed": 1}), seed=0, max_new_tokens=8)
    assert [p.id for p in other.test_problems()] != [p.id for p in a.test_problems()]


# ---- fine-tuning questions against evaluation problems, at run start ------------------------------------
class Spec:
    def __init__(self, id: str, model: str) -> None:
        self.id, self.model = id, model


def recorded_model(tmp_path: Path, questions_: list[str]) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / gguf._MARKER).write_text(json.dumps({gguf.FINETUNE_KEY: questions_}))
    return model


def test_check_finetune_overlap_names_the_agent_the_count_and_the_fix(tmp_path):
    model = recorded_model(tmp_path, ["what is 1+1", "what is 9+9"])
    held = [Problem("t/0", "What is 1+1? Think.", "2", {"question": "What is 1+1?"}),
            Problem("t/1", "What is 2+2? Think.", "4", {"question": "What is 2+2?"})]
    gguf.check_finetune_overlap([Spec("plain", str(tmp_path))], held)  # nothing recorded: nothing to check
    gguf.check_finetune_overlap([Spec("a", str(model))], held[1:])
    with pytest.raises(ConfigError) as err:
        gguf.check_finetune_overlap([Spec("a", str(model))], held[1:], held[:1])  # a benchmark suite
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"agents.a.model={model}: 1 of the run's 2 evaluation problems are among its 2 "
                              "fine-tuning questions (first: t/0); fix: evaluate on problems")


@needs_gym
def test_builtin_copy_not_made_yet_is_checked_from_its_recipe(tmp_path, monkeypatch):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path))  # nothing cached: the questions come from sft_examples
    spec = Spec("sft", f"builtin:{gguf.SMOLLM2_SFT}")
    question = gguf.sft_examples(64)[5][0]
    gguf.check_finetune_overlap([spec], build_task(smollm2_task_cfg(), seed=0, max_new_tokens=48).test_problems())
    with pytest.raises(ConfigError, match=r"agents\.sft\.model=builtin:smollm2-135m-instruct-sft: 1 of the run's 1 "):
        gguf.check_finetune_overlap([spec], [Problem("x", question.upper(), "0")])
    assert gguf.finetune_questions(f"builtin:{gguf.SMOLLM2}") is None


@pytest.mark.model
def test_trainer_refuses_an_agent_fine_tuned_on_held_out_problems(tmp_path):
    from hacrl.trainer.trainer import Trainer

    leaked = get_task("add2").test_problems(3)[2].prompt
    model = recorded_model(tmp_path, [normalize_question(leaked)])
    cfg = load_config("tiny-model", overrides=[f"agents.qwen-char.model={model}"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(ConfigError, match=r"^agents\.qwen-char\.model=.*: 1 of the run's 1000 evaluation problems"):
        Trainer(cfg, run_dir, sinks=False)


# ---- the cache key of the fine-tuned copies --------------------------------------------------------------
def test_an_older_cached_copy_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("HACRL_CACHE", str(tmp_path))
    old = tmp_path / "models" / gguf.SMOLLM2_SFT  # where the unfiltered recipe's copy was cached
    old.mkdir(parents=True)
    (old / gguf._MARKER).write_text("{}")
    assert gguf._cached(gguf.SMOLLM2_SFT) is None
    names = {gguf.sft_cache_name(n) for n in gguf.SFT_RECIPES}
    assert len(names) == len(gguf.SFT_RECIPES) and all(n.split("-v2-")[0] in gguf.SFT_RECIPES for n in names)
    new = tmp_path / "models" / gguf.sft_cache_name(gguf.SMOLLM2_SFT)
    new.mkdir()
    (new / gguf._MARKER).write_text(json.dumps({gguf.FINETUNE_KEY: ["calculate 1 + 1"]}))
    assert gguf._cached(gguf.SMOLLM2_SFT) == new
    assert gguf.finetune_questions(f"builtin:{gguf.SMOLLM2_SFT}") == ["calculate 1 + 1"]
