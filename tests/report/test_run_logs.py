"""A run's logs read back in one place (``hacrl.run.sinks``): the evaluation keys the trainer writes
parse back, and eval.jsonl (or, for runs without one, metrics.jsonl) gives the held-out accuracies."""

from __future__ import annotations

import json

from hacrl.run.sinks import eval_key, parse_eval_key, phase_times, read_evals


def _write(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_eval_keys_parse_back():
    for agent, metric, bench in [("qwen-char", "greedy_acc", None), ("a.b_c", "sampled_pass@4", "math500")]:
        assert parse_eval_key(eval_key(agent, metric, bench)) == (agent, bench, metric)
    assert parse_eval_key("agent/a/reward") is None and parse_eval_key("eval/a") is None


def test_read_evals_from_eval_jsonl_skips_benchmarks_and_cut_lines(tmp_path):
    _write(tmp_path / "eval.jsonl", [
        {"step": 0, "task": "add2", "agent": "a", "n": 5, "greedy_acc": 0.2},
        {"step": 0, "benchmark": "gsm8k", "agent": "a", "n": 3, "greedy_acc": 0.9},
        {"step": 2, "task": "add2", "agent": "a", "n": 5, "greedy_acc": 0.6}], tail='{"step": 4, "agent": "a", "gr')
    _write(tmp_path / "metrics.jsonl", [{"step": 0, "eval/a/greedy_acc": 0.0}])  # eval.jsonl wins
    assert read_evals(tmp_path) == {(0, "a"): 0.2, (2, "a"): 0.6}


def test_read_evals_falls_back_to_metrics_jsonl(tmp_path):
    _write(tmp_path / "metrics.jsonl", [
        {"step": 0, eval_key("a"): 0.25, eval_key("a", benchmark="gsm8k"): 1.0, "timing/eval": 3.0},
        {"step": 1, "agent/a/reward": 0.5},
        {"step": 2, eval_key("a"): 0.5, eval_key("b"): None}])
    assert read_evals(tmp_path) == {(0, "a"): 0.25, (2, "a"): 0.5}
    assert read_evals(tmp_path / "missing") == {}


def test_phase_times_take_totals_only():
    metrics = {"timing/rollout": 1.0, "timing/rollout/a": 0.6, "timing/update": 2.0, "timing/update_overlap": 1.5,
               "timing/eval": None, "agent/a/reward": 1.0}
    assert phase_times(metrics) == {"rollout": 1.0, "update": 2.0}
