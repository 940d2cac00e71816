"""``trainer.eval_k``: the trainer's evaluation samples k answers per held-out problem and records avg@k
and pass@k beside greedy accuracy, consistent with each other and with the answers it scored."""

from __future__ import annotations

import json

import pytest

from hacrl.config import load_config
from hacrl.trainer.trainer import Trainer

pytestmark = pytest.mark.model


def test_eval_k_records_sampled_accuracy(tmp_path):
    cfg = load_config("tiny-test", overrides=["trainer.steps=1", "trainer.eval_k=3", "trainer.eval_size=20"])
    (tmp_path / "run").mkdir()
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        metrics = trainer.evaluate()
    finally:
        trainer.close()
    lines = [json.loads(x) for x in (tmp_path / "run" / "eval.jsonl").read_text().splitlines()]
    assert {r["agent"] for r in lines} == {"qwen-char", "llama-bpe"}
    for r in lines:
        assert r["k"] == 3 and r["n"] == 20
        # avg@k ≤ pass@k, both fractions; pass@k is a multiple of 1/n and avg@k of 1/(n·k)
        assert 0.0 <= r["sampled_avg"] <= r["sampled_pass"] <= 1.0
        assert abs(r["sampled_pass"] * 20 - round(r["sampled_pass"] * 20)) < 1e-9
        assert abs(r["sampled_avg"] * 60 - round(r["sampled_avg"] * 60)) < 1e-9
        assert metrics[f"eval/{r['agent']}/sampled_avg@3"] == r["sampled_avg"]
    # the warm-started tiny models are not at 0 or 1: sampling at T=1 gives answers of both kinds
    assert any(0.0 < r["sampled_avg"] < 1.0 for r in lines)


def test_eval_k_zero_is_greedy_only(tmp_path):
    (tmp_path / "run").mkdir()
    trainer = Trainer(load_config("tiny-test", overrides=["trainer.eval_size=5"]), tmp_path / "run")
    try:
        metrics = trainer.evaluate()
    finally:
        trainer.close()
    assert not any("sampled" in k for k in metrics)
    assert all("sampled_avg" not in json.loads(x) or json.loads(x)["sampled_avg"] is None
               for x in (tmp_path / "run" / "eval.jsonl").read_text().splitlines())
