"""``add2-trace``: add2's problems and held-out split with a worked answer; the reward reads the sum alone, the
trace check reads the working (the mechanism study's "right answer, wrong reasoning")."""

from __future__ import annotations

from hacrl.data.tasks import TASKS, add2_trace_answer, trace_consistent


def test_same_problems_and_split_as_add2():
    trace, add2 = TASKS.get("add2-trace")(), TASKS.get("add2")()
    keys = [p.id.split("/", 1)[1] for p in trace.test_problems(300)]
    assert keys == [p.id.split("/", 1)[1] for p in add2.test_problems(300)]
    assert all(trace.is_test(k) == add2.is_test(k) for k in (f"{a:02d}+{b:02d}" for a in range(100) for b in range(0, 100, 7)))
    first = next(trace.train_problems(0))
    assert first.prompt == next(add2.train_problems(0)).prompt and first.answer.endswith(">" + str(
        first.meta["a"] + first.meta["b"]))


def test_the_reward_reads_only_the_sum():
    task = TASKS.get("add2-trace")()
    sample = next(p for p in task.test_problems(50) if p.meta["a"] == 7 or True).as_sample()
    a, b = sample["a"], sample["b"]
    right, total = add2_trace_answer(a, b), str(a + b)
    assert task.reward(right, sample) == 1.0
    assert task.reward(f"0+0=0,0+0+0=0>{total}", sample) == 1.0  # garbage working, right sum: full reward
    assert task.reward(right.replace(f">{total}", f">{a + b + 1}"), sample) == 0.0
    assert task.reward(total, sample) == 0.0  # no worked answer: no '>' to read
    assert trace_consistent(right, a, b) and not trace_consistent(f"0+0=0,0+0+0=0>{total}", a, b)


def test_every_gold_answer_is_consistent_and_fits_the_budget():
    task = TASKS.get("add2-trace")()
    for p in task.test_problems(1000):
        assert trace_consistent(p.answer, p.meta["a"], p.meta["b"])
        assert len(p.answer) + 1 <= task.max_new_tokens  # one character token each, plus EOS
