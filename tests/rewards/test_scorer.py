"""RewardScorer: misbehaving rewards are counted, never stall the caller, and leave no processes behind."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from pathlib import Path

import pytest

from hacrl.rewards import RewardScorer, ScoreResult

HERE = Path(__file__).resolve().parent
MIXED = f"{HERE / 'bad_rewards.py'}:mixed"  # file-path form: importable by workers whatever sys.path is
SLACK_S = 5.0  # worker start-ups and restarts on a loaded 2-core machine

# answer mode -> (completion, expected reward, expected kind); see bad_rewards.mixed
CASES = [
    ("a", "a", 1.0, "ok"),
    ("sleep", "x", None, "timeout"),
    ("b", "wrong", 0.0, "ok"),
    ("raise", "x", None, "error"),
    ("nan", "x", None, "nan"),
    ("none", "x", None, "none"),
    ("str", "x", None, "error"),
    ("inf", "x", None, "nan"),
    ("print", "print", 1.0, "ok"),
    ("spin", "x", None, "timeout"),
    ("exit", "x", None, "error"),
    ("c", "c", 1.0, "ok"),
]


def _batch(cases: list[tuple[str, str, float | None, str]]) -> tuple[list[str], list[dict]]:
    return [c[1] for c in cases], [{"answer": c[0]} for c in cases]


def _expected_counts(cases: list[tuple[str, str, float | None, str]]) -> dict[str, int]:
    counts = dict.fromkeys(("ok", "none", "error", "nan", "timeout"), 0)
    for case in cases:
        counts[case[3]] += 1
    return counts


def _assert_gone(pids: list[int]) -> None:
    for pid in pids:
        with pytest.raises(ProcessLookupError):  # killed *and* reaped (a zombie would still answer)
            os.kill(pid, 0)


def _check(res: ScoreResult, cases: list) -> None:
    assert res.rewards == [c[2] for c in cases]
    assert res.counts() == _expected_counts(cases)


@pytest.mark.parametrize("workers", [1, 2])
def test_mixed_batch_is_bounded_and_counted(workers: int) -> None:
    limit = 1.0
    completions, samples = _batch(CASES)
    with RewardScorer(MIXED, timeout_s=limit, workers=workers) as scorer:
        start = time.monotonic()
        res = scorer.score(completions, samples)
        elapsed = time.monotonic() - start
        pids = scorer.pids
    _check(res, CASES)
    assert elapsed < limit * 2 * 1.5 + SLACK_S  # two answers run past the limit
    assert res.elapsed_s <= elapsed
    assert "ZeroDivisionError: bad reward" in res.first_message["error"]
    assert res.first_message["timeout"].startswith("answer 1: ran past the 1.0 s limit")
    assert res.first_message["nan"] == "answer 4: returned nan"
    _assert_gone(pids)


def test_parallel_timeouts_overlap() -> None:
    limit, n = 1.0, 3
    with RewardScorer(MIXED, timeout_s=limit, workers=n) as scorer:
        scorer.score(["a"], [{"answer": "a"}])  # start the workers first
        start = time.monotonic()
        res = scorer.score(["x"] * n, [{"answer": "sleep"}] * n)
        elapsed = time.monotonic() - start
    assert res.timeout == n and res.rewards == [None] * n
    assert elapsed < limit * 1.5 + SLACK_S / 2  # side by side, not n x limit


def test_timed_out_workers_are_killed_and_replaced() -> None:
    scorer = RewardScorer(MIXED, timeout_s=0.5)
    try:
        scorer.score(["a"], [{"answer": "a"}])
        first = scorer.pids
        res = scorer.score(["x", "a"], [{"answer": "sleep"}, {"answer": "a"}])
        assert res.rewards == [None, 1.0]
        _assert_gone(first)
        assert scorer.pids and scorer.pids != first
        second = scorer.pids
    finally:
        scorer.close()
    _assert_gone(second)
    assert scorer.pids == []
    assert scorer.score(["a"], [{"answer": "a"}]).rewards == [1.0]  # usable again after close()
    scorer.close()


def test_from_a_non_main_thread() -> None:
    cases = [CASES[0], CASES[1], CASES[3], CASES[11]]
    out: list[ScoreResult] = []
    with RewardScorer(MIXED, timeout_s=0.5) as scorer:
        t = threading.Thread(target=lambda: out.append(scorer.score(*_batch(cases))))
        t.start()
        t.join(30)
        assert not t.is_alive()
        pids = scorer.pids
    _check(out[0], cases)
    _assert_gone(pids)


def _score_in_child(scorer: RewardScorer | None, queue: mp.Queue) -> None:
    own = scorer is None
    scorer = scorer or RewardScorer(MIXED, timeout_s=0.5)
    res = scorer.score(*_batch([CASES[0], CASES[1], CASES[11]]))
    pids = scorer.pids
    if own:
        scorer.close()
    queue.put((res.rewards, res.timeout, pids))


@pytest.mark.parametrize("share", [False, True], ids=["own-scorer", "inherited-scorer"])
def test_inside_a_daemonic_worker_process(share: bool) -> None:
    """multiprocessing daemons may not have multiprocessing children; the scorer's workers are plain
    subprocesses. A scorer inherited through fork starts its own workers and leaves the parent's alone."""
    ctx = mp.get_context("fork")
    parent = RewardScorer(MIXED, timeout_s=0.5)
    try:
        parent.score(["a"], [{"answer": "a"}])
        parent_pids = parent.pids
        queue = ctx.Queue()
        child = ctx.Process(target=_score_in_child, args=(parent if share else None, queue), daemon=True)
        child.start()
        rewards, timeouts, child_pids = queue.get(timeout=60)
        child.join(10)
        assert rewards == [1.0, None, 1.0] and timeouts == 1
        assert not set(child_pids) & set(parent_pids)
        assert parent.pids == parent_pids  # untouched by the child
        assert parent.score(["a"], [{"answer": "a"}]).rewards == [1.0]
    finally:
        parent.close()
    if not share:
        _assert_gone(child_pids)


def test_inline_same_semantics_without_timeouts() -> None:
    cases = [c for c in CASES if c[0] not in ("sleep", "spin", "exit")]
    with RewardScorer(MIXED, timeout_s=None) as scorer:
        res = scorer.score(*_batch(cases))
        assert scorer.pids == []
    _check(res, cases)


def test_inline_accepts_lambdas_but_workers_need_a_spec() -> None:
    fn = lambda c, s: 0.5  # noqa: E731
    assert RewardScorer(fn, timeout_s=None).score(["x"], [{}]).rewards == [0.5]
    with pytest.raises(ValueError, match="cannot be sent to worker processes.*timeout_s=None"):
        RewardScorer(fn, timeout_s=1.0)


def test_module_level_function_is_sent_by_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    import bad_rewards

    with RewardScorer(bad_rewards.mixed, timeout_s=2.0) as scorer:
        assert scorer.spec == "bad_rewards:mixed"
        assert scorer.score(["a", "x"], [{"answer": "a"}, {"answer": "raise"}]).rewards == [1.0, None]


def test_unpicklable_sample_is_an_error_for_that_answer_only() -> None:
    samples = [{"answer": "a"}, {"answer": "a", "bad": threading.Lock()}, {"answer": "c"}]
    with RewardScorer(MIXED, timeout_s=2.0) as scorer:
        res = scorer.score(["a", "a", "c"], samples)
    assert res.rewards == [1.0, None, 1.0] and res.error == 1
    assert "cannot be sent to a worker" in res.first_message["error"]


def test_math_reward_that_hangs_sympy_times_out() -> None:
    """math-verify can take minutes on a power tower; the scorer bounds it (its own alarm is off)."""
    completions = [r"\boxed{\frac12}", r"\boxed{9^{9^{9^{9}}}}", r"\boxed{0.5}", r"\boxed{2}"]
    limit = 2.0
    with RewardScorer("math", timeout_s=limit) as scorer:
        start = time.monotonic()
        res = scorer.score(completions, [{"answer": "0.5"}] * 4)
        elapsed = time.monotonic() - start
    assert res.rewards == [1.0, None, 1.0, 0.0] and res.timeout == 1
    assert elapsed < limit * 1.5 + SLACK_S + 5.0  # + importing sympy in the worker's warm-up


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        RewardScorer("exact", timeout_s=0)
    with pytest.raises(ValueError, match="workers"):
        RewardScorer("exact", workers=0)
    with pytest.raises(ValueError, match="unknown reward"):
        RewardScorer("nope")
    with pytest.raises(ValueError, match="2 completions but 1 samples"):
        RewardScorer("exact", timeout_s=None).score(["a", "b"], [{}])


def test_empty_batch() -> None:
    with RewardScorer("exact", timeout_s=1.0) as scorer:
        res = scorer.score([], [])
        assert res.rewards == [] and scorer.pids == []  # nothing to do, nothing started


def test_inline_overhead_is_negligible() -> None:
    n = 1000
    completions, samples = ["42"] * n, [{"answer": "42"}] * n
    scorer = RewardScorer("exact", timeout_s=None)
    scorer.score(completions, samples)
    start = time.perf_counter()
    res = scorer.score(completions, samples)
    assert res.ok == n and time.perf_counter() - start < 0.05  # ~2 us per answer in practice


def test_garbage_collected_scorer_reaps_its_workers() -> None:
    import gc

    scorer = RewardScorer(MIXED, timeout_s=1.0, workers=2)
    scorer.score(["a", "b"], [{"answer": "a"}, {"answer": "b"}])
    pids = scorer.pids
    del scorer
    gc.collect()
    _assert_gone(pids)


def test_worker_that_cannot_load_the_reward_raises_clearly() -> None:
    scorer = RewardScorer(MIXED, timeout_s=1.0)
    scorer.spec = "no_such_module_xyz:f"  # resolvable in the parent, not in the worker
    with pytest.raises(RuntimeError, match="could not load 'no_such_module_xyz:f'.*cannot import module"):
        scorer.score(["a"], [{"answer": "a"}])
    assert scorer.pids == []


def test_worker_start_up_is_bounded(tmp_path: Path) -> None:
    slow = tmp_path / "slow_import.py"  # hangs at import, but only inside a worker (started with -c)
    slow.write_text("import sys, time\nif sys.argv[0] == '-c':\n    time.sleep(60)\n"
                    "def f(c, s):\n    return 1.0\n")
    scorer = RewardScorer(f"{slow}:f", timeout_s=1.0, startup_timeout_s=1.0)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start within 1.0 s"):
        scorer.score(["a"], [{}])
    assert time.monotonic() - start < 1.0 + SLACK_S
    assert scorer.pids == []


def test_a_reward_that_never_returns_gives_up_after_a_few_timeouts() -> None:
    """(#17) Every answer hangs: HANGS_AFTER timeouts (answers spread over the batch), not one per answer;
    a later call gives up at its first timeout."""
    from hacrl.rewards.scorer import HANGS_AFTER

    limit, n = 0.2, 40
    with RewardScorer(MIXED, timeout_s=limit) as scorer:
        start = time.monotonic()
        first = scorer.score(["x"] * n, [{"answer": "sleep"}] * n)
        first_s = time.monotonic() - start
        start = time.monotonic()
        again = scorer.score(["x"] * n, [{"answer": "sleep"}] * n)
        again_s = time.monotonic() - start
    assert first.timeout == again.timeout == n and first.rewards == [None] * n
    assert first_s < HANGS_AFTER * (limit + 0.5) + SLACK_S  # one per answer: 40 x (limit + a restart)
    assert again_s < limit + SLACK_S


def test_a_reward_that_hangs_on_the_first_answers_only_still_scores_the_rest() -> None:
    # answers 0-3 hang, 4-7 score: tried spread over the batch, an early one returns before HANGS_AFTER
    answers = ["sleep"] * 4 + ["a"] * 4
    with RewardScorer(MIXED, timeout_s=0.2) as scorer:
        res = scorer.score(["a"] * 8, [{"answer": a} for a in answers])
    assert res.rewards == [None] * 4 + [1.0] * 4 and res.timeout == 4
