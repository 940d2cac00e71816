"""Format or correctness (hacrl.report.answers): the finished share, accuracy among finished answers, solved
(right and finished) and the longer budget's accuracy, computed by hand on constructed run directories, paired
against a baseline by problem id, and rendered in the report's own section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hacrl.report.answers import answer_quality, record_measures, render_answer_quality
from hacrl.report.runs import RunOutcome

IDS = ["p0", "p1", "p2", "p3"]


def record(step, agent, reward, finished, budget=None):
    rec = {"step": step, "agent": agent, "task": "t", "ids": IDS, "reward": reward, "unscorable": [],
           "finished": finished, "tokens": [4 if f else 8 for f in finished], "texts": []}
    return {**rec, "budget": budget} if budget else rec


def run_dir(tmp_path: Path, algo: str, seed: int, records: list[dict]) -> RunOutcome:
    d = tmp_path / algo / f"seed-{seed}"
    d.mkdir(parents=True)
    (d / "eval_problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return RunOutcome(algo, seed, d, "reused", None)


START = [record(0, "a", [0, 0, 1, 0], [False, False, True, False]),
         record(0, "a", [1, 0, 1, 0], [True, False, True, True], budget=16)]


@pytest.fixture
def outcomes(tmp_path):
    # "learned to stop": hacpo finishes everything at step 2 but is right only where it was right at length;
    # gspo still rambles (two of its right answers are cut off, scored right by a lenient reward)
    hacpo = [*START, record(1, "a", [1, 1, 1, 1], [True] * 4),  # step 1 is not read
             record(2, "a", [1, 0, 1, 0], [True] * 4),
             record(2, "a", [1, 0, 1, 0], [True] * 4, budget=16),
             {"step": 2, "agent": "a", "benchmark": "b", "ids": IDS, "reward": [1] * 4, "finished": [True] * 4}]
    gspo = [*START, record(2, "a", [1, 1, 1, 0], [False, False, True, False]),
            record(2, "a", [1, 1, 1, 0], [True, True, True, False], budget=16)]
    return [run_dir(tmp_path, "hacpo", 0, hacpo), run_dir(tmp_path, "gspo", 0, gspo)]


def test_measures_by_hand(outcomes):
    q = answer_quality(outcomes, ["a"], ["hacpo", "gspo"], ["gspo"], [0], steps=2, budget=16)
    start, hacpo, gspo = q["agents"]["a"]["hacpo"]["start"], q["agents"]["a"]["hacpo"]["final"], \
        q["agents"]["a"]["gspo"]["final"]
    # start: 1 of 4 finished, and it is right; at 16 tokens 2 of 4 right, 3 of 4 finished
    assert (start["finished"], start["acc_finished"], start["solved"]) == (0.25, 1.0, 0.25)
    assert (start["acc_budget"], start["finished_budget"], start["tokens"]) == (0.5, 0.75, 7.0)
    # hacpo learned to stop: all finished, right on 2 of 4 = the start's accuracy at length, no more
    assert (hacpo["finished"], hacpo["acc_finished"], hacpo["solved"], hacpo["acc_budget"]) == (1.0, 0.5, 0.5, 0.5)
    # gspo: 3 of 4 "right" at 8 tokens, but only p2 finished: solved 1/4; at length 3 of 4 right
    assert (gspo["finished"], gspo["acc_finished"], gspo["solved"], gspo["acc_budget"]) == (0.25, 1.0, 0.25, 0.75)
    vs = q["agents"]["a"]["hacpo"]["vs"]["gspo"]
    # paired by problem: solved hacpo [1,0,1,0] − gspo [0,0,1,0] = +1/4; at 16 tokens [1,0,1,0] − [1,1,1,0] = −1/4
    assert vs["solved"]["mean"] == 0.25 and vs["acc_budget"]["mean"] == -0.25
    assert vs["solved"]["pairs"] == vs["acc_budget"]["pairs"] == 4 and vs["seeds"] == [0]
    assert q["agents"]["a"]["gspo"]["vs"] == {}  # no Δ of a baseline against itself


def test_render_names_the_longer_budget_and_the_interval(outcomes):
    q = answer_quality(outcomes, ["a"], ["hacpo", "gspo"], ["gspo"], [0], steps=2, budget=16)
    text = "\n".join(render_answer_quality(q, ["gspo"]))
    assert "| algorithm | finished | right \\| finished | solved | @16 | Δ @16 vs gspo |" in text
    row = next(line for line in text.splitlines() if line.startswith("| hacpo |"))
    assert row.startswith("| hacpo | 0.250 → 1.000 | 1.000 → 0.500 | 0.250 → 0.500 | 0.500 → 0.500 | -0.250 [")
    assert render_answer_quality(None, ["gspo"]) == []


def test_no_budget_pairs_solved_and_runs_without_flags_give_none(tmp_path, outcomes):
    q = answer_quality(outcomes, ["a"], ["hacpo", "gspo"], ["gspo"], [0], steps=2, budget=0)
    text = "\n".join(render_answer_quality(q, ["gspo"]))
    assert "Δ solved vs gspo" in text and "@16" not in text
    old = run_dir(tmp_path / "old", "hacpo", 0, [])  # a run from before per-problem records
    assert answer_quality([old], ["a"], ["hacpo"], [], [0], steps=2, budget=0) is None


def test_a_right_answer_cut_off_is_not_counted_among_finished_ones():
    m = record_measures(record(2, "a", [1, 1, 0, 0], [False, False, False, False]), None)
    assert (m["finished"], m["acc_finished"], m["solved"], m["acc_budget"]) == (0.0, None, 0.0, None)
