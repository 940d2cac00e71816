"""TRL's batched reward contract and verl's compute_score beside hacrl's per-answer one: detection, the
columns reaching the reward, weights, the scorer's workers, and the one-line errors of a broken contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from hacrl.rewards import RewardScorer, RewardSet, detect_contract, trl_reward

HERE = Path(__file__).resolve().parent
FILE = HERE / "trl_rewards.py"


def spec(name: str) -> str:
    return f"{FILE}:{name}"


def sample(answer: str, **columns) -> dict:
    """A dataset row's sample: its columns, hacrl's fields (row, question), then prompt, answer, problem_id."""
    return {**columns, "row": 0, "question": "1+3=", "prompt": "1+3=", "answer": answer, "problem_id": "d/0"}


@pytest.mark.parametrize(("name", "contract"), [
    ("accuracy_reward", "trl"), ("reward_func", "trl"), ("no_kwargs", "trl"), ("format_reward_func", "trl"),
    ("compute_score", "verl"), ("per_answer_returns_list", "hacrl"), ("three_args", "hacrl")])
def test_the_contract_is_read_from_the_signature(name, contract):
    import trl_rewards

    assert detect_contract(getattr(trl_rewards, name)) == contract


def test_a_mark_decides_where_the_signature_cannot():
    class Scorer:  # a callable object whose __call__ takes *args: nothing to read
        def __call__(self, *args, **kwargs):
            return [1.0] * len(kwargs["completions"])

    assert detect_contract(Scorer()) == "hacrl"
    assert detect_contract(trl_reward(Scorer())) == "trl"
    assert RewardSet.build(Scorer(), contract="trl").rewards[0].contract == "trl"


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_trl_rewards_score_a_batch_with_the_rows_columns(timeout_s):
    samples = [sample("4", solution="4", ground_truth="4"), sample("4", solution="4", ground_truth="4"),
               sample("7", solution="7", ground_truth="7")]
    completions = ["4", r"so \boxed{4}", r"\boxed{7}"]
    with RewardScorer(spec("accuracy_reward"), timeout_s=timeout_s) as scorer:
        assert scorer.score(completions, samples).rewards == [1.0, 0.0, 0.0]
    with RewardScorer(spec("reward_func"), timeout_s=timeout_s) as scorer:
        assert scorer.score(completions, samples).rewards == [0.0, 1.0, 1.0]
    with RewardScorer(spec("no_kwargs"), timeout_s=timeout_s) as scorer:  # only the keywords it names
        assert scorer.score(completions, samples).rewards == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_an_extra_column_reaches_trl_and_verl_rewards(timeout_s):
    samples = [sample("4", difficulty="hard"), sample("4", difficulty="easy")]
    with RewardScorer(spec("hard_only"), timeout_s=timeout_s) as scorer:
        res = scorer.score(["4", "4"], samples)
    assert res.rewards == [1.0, None] and (res.ok, res.none) == (1, 1)
    # verl: ground_truth is the sample's answer; extra_info the sample's fields (a row's extra_info dict over them)
    with RewardScorer(spec("compute_score"), timeout_s=timeout_s) as scorer:
        assert scorer.score(["4", "4", "5"], [*samples, sample("4", extra_info={"difficulty": "hard"})]).rewards \
            == [1.5, 1.0, 0.5]  # 1 + 0.5 (hard), 1 + 0, 0 + 0.5 (hard, from extra_info)
    with RewardScorer(spec("compute_score_dict"), timeout_s=timeout_s) as scorer:
        assert scorer.score(["4", "5"], samples).rewards == [1.0, 0.0]  # a dict gives its "score"


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_weights_sum_rewards_as_trl_does(timeout_s):
    samples = [sample("4", solution="4"), sample("4", solution="4")]
    with RewardScorer([spec("accuracy_reward"), spec("length_reward"), "exact"], weights=[2.0, 0.5, 1.0],
                      timeout_s=timeout_s) as scorer:
        res = scorer.score(["4", "wrong answer!"], samples)
    # "4":             accuracy 1, length 1/10 = 0.1, exact 1 -> 2*1 + 0.5*0.1 + 1*1 = 3.05
    # "wrong answer!": accuracy 0, length min(13, 10)/10 = 1, exact 0 -> 0 + 0.5*1 + 0 = 0.5
    assert res.rewards == pytest.approx([3.05, 0.5])


def test_a_function_returning_none_is_left_out_of_the_sum_and_all_none_is_unscorable():
    samples = [sample("4", difficulty="hard", solution="4"), sample("4", difficulty="easy", solution="4")]
    rs = RewardSet.build([spec("hard_only"), spec("accuracy_reward")], weights=[1.0, 3.0])
    assert [o[:2] for o in rs.score_batch(["4", "5"], samples)] == [("ok", 4.0), ("ok", 0.0)]  # 1+3*1; None+3*0
    only = RewardSet.build([spec("hard_only")], weights=[2.0])
    assert only.score_batch(["5"], samples[1:])[0][:2] == ("none", None)


def test_a_batched_reward_is_called_once_per_batch():
    calls = []

    def counting(completions, **kwargs):
        calls.append(len(completions))
        return [0.5] * len(completions)

    res = RewardScorer(counting, timeout_s=None).score(["a"] * 5, [sample("4")] * 5)
    assert res.rewards == [0.5] * 5 and calls == [5]


def test_conversational_prompts_give_message_lists():
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+3="}]
    samples = [{**sample("4"), "chat_prompt": chat, "templated": True}] * 2
    with RewardScorer([spec("format_reward_func"), spec("sees_chat_prompts")], timeout_s=5.0) as scorer:
        res = scorer.score(["<think>x</think><answer>4</answer>", "4"], samples)
    assert res.rewards == [2.0, 1.0]


def test_a_hanging_batched_reward_times_out_its_chunk(tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text("import time\ndef slow(completions, **kwargs):\n    time.sleep(3600)\n")
    with RewardScorer(f"{slow}:slow", timeout_s=0.3) as scorer:
        res = scorer.score(["a", "b"], [sample("4")] * 2)
    assert res.rewards == [None, None] and res.timeout == 2


@pytest.mark.parametrize(("name", "message"), [
    ("returns_float", ("returned float, expected a list of 2 floats (one per completion: TRL's batched contract); "
                      "fix: return a list, or if it scores one answer as fn(completion, sample), set "
                      "task.reward_contract=hacrl")),
    ("wrong_length", "returned 1 values for 2 completions; fix: return one float (or None) per completion"),
    ("needs_difficulty", ("needs the keyword 'difficulty', which the rows do not have (they have: answer, "
                         "problem_id, question, row, solution); fix: add a 'difficulty' column to the data")),
    ("per_answer_returns_list", ("returned list, expected a float per answer (hacrl contract); fix: if it scores a "
                                "batch as TRL's rewards do, name its first parameter `completions` or set "
                                "task.reward_contract=trl")),
    ("three_args", "cannot be called as fn(completion, sample)"),
])
@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_a_broken_contract_is_one_line_at_the_check(name, message, timeout_s):
    with RewardScorer(spec(name), timeout_s=timeout_s) as scorer:
        with pytest.raises(ValueError) as info:
            scorer.check(sample("4", solution="4"))
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"reward {spec(name)} ") and message in text, text


def test_the_check_passes_good_rewards_and_leaves_ordinary_failures_to_training():
    for name in ("accuracy_reward", "compute_score", "no_kwargs"):
        RewardScorer(spec(name), timeout_s=None).check(sample("4", solution="4"))
    RewardScorer(f"{HERE / 'bad_rewards.py'}:always_raises", timeout_s=None).check(sample("4"))  # counted later


def test_a_missing_field_read_by_a_per_answer_reward_names_the_fields():
    def reads_difficulty(completion, sample):
        return float(sample["difficulty"] == "hard")

    with pytest.raises(ValueError, match=r"raised KeyError: 'difficulty' on the first training row, whose sample "
                                         r"holds answer, problem_id, prompt, question, row; fix"):
        RewardScorer(reads_difficulty, timeout_s=None).check(sample("4"))


def test_python_functions_without_a_spec_travel_to_workers_pickled():
    from hacrl.rewards import register_python

    threshold = 3

    def closure(completions, **kwargs):
        return [float(len(c) >= threshold) for c in completions]

    with pytest.raises(ValueError, match="cannot be sent to worker processes"):  # unchanged for a bare closure
        RewardScorer(closure, timeout_s=5.0)
    with RewardScorer(register_python(closure), timeout_s=5.0) as scorer:
        res = scorer.score(["abcd", "ab"], [sample("4")] * 2)
        assert res.rewards == [1.0, 0.0] and scorer.pids  # scored in a worker process


def test_an_explicit_contract_leaves_registered_rewards_per_answer():
    rs = RewardSet.build([spec("accuracy_reward"), "exact"], contract="trl")
    assert [r.contract for r in rs.rewards] == ["trl", "hacrl"]
    assert [o[:2] for o in rs.score_batch(["4"], [sample("4", solution="4")])] == [("ok", 2.0)]


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_verls_batch_form_and_async_trl_rewards(timeout_s):
    import trl_rewards

    assert detect_contract(trl_rewards.compute_score_batch) == "verl"
    assert RewardSet.build(trl_rewards.compute_score_batch).batched
    samples = [sample("4", solution="4"), sample("4", solution="4")]
    with RewardScorer([spec("compute_score_batch"), spec("async_accuracy")], weights=[1.0, 2.0],
                      timeout_s=timeout_s) as scorer:
        assert scorer.score(["4", "5"], samples).rewards == [3.0, 0.0]  # 1 + 2*1; 0 + 0


def test_numpy_scalars_are_floats_and_arrays_are_lists():
    np = pytest.importorskip("numpy")
    assert RewardSet.build(lambda c, s: np.float64(0.5)).score_one("x", sample("4")) == ("ok", 0.5, None)
    kind, _, message = RewardSet.build(lambda c, s: np.array([1.0])).score_one("x", sample("4"))
    assert kind == "error" and "returned ndarray, expected a float per answer" in message
    batch = RewardSet.build(lambda completions, **kw: np.ones(len(completions)))
    assert [o[:2] for o in batch.score_batch(["a", "b"], [sample("4")] * 2)] == [("ok", 1.0)] * 2
