"""bench/async_pace.py on a minimal setting (local backend, 2 steps, 8 held-out problems): one invocation prints
the step costs, the idle-share table and the sync/async accuracy table and writes the raw numbers; the slow
agent's identity layers leave the shipped model's function unchanged. Nothing here is timed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from async_pace import build_deep_model, main  # noqa: E402

pytestmark = pytest.mark.model


def test_the_deep_model_computes_the_shipped_models_function(tmp_path):
    from transformers import AutoModelForCausalLM

    from hacrl.backends.resolve import resolve_model_path

    info = build_deep_model(tmp_path / "deep", extra_layers=2)
    assert info["layers"] == [4, 6] and info["params"][1] > info["params"][0]
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:qwen2-char"))
    deep = AutoModelForCausalLM.from_pretrained(tmp_path / "deep")
    ids = torch.tensor([[5, 17, 40, 41, 3, 9]])
    with torch.no_grad():
        torch.testing.assert_close(deep(ids).logits, base(ids).logits, atol=1e-5, rtol=0)
    new = deep.model.layers[5]
    assert not new.self_attn.o_proj.weight.any() and not new.mlp.down_proj.weight.any()
    assert new.self_attn.q_proj.weight.any()  # the rest is the last layer's copy, so it can learn
    assert (tmp_path / "deep" / "tokenizer.json").is_file()


def test_one_invocation_prints_both_tables_and_writes_the_raw_numbers(tmp_path, capsys):
    smoke = tmp_path
    main(["--seeds", "1", "--steps", "2", "--eval-size", "8", "--backend", "local", "--extra-layers", "1",
          "--set", "trainer.batch_size=2", "--set", "rollout.rollouts_per_prompt=2", "--output", str(smoke)])
    text = capsys.readouterr().out
    assert "step cost: mean busy s" in text and "lock-step large/small: rollout" in text
    idle = text.split("idle share and updates")[1].split("held-out greedy accuracy")[0]
    rows = [line.split() for line in idle.splitlines() if line.startswith(("lockstep", "async"))]
    assert [(r[0], r[1]) for r in rows] == [("lockstep", "small"), ("lockstep", "large"), ("async", "small"),
                                            ("async", "large")]
    acc = text.split("held-out greedy accuracy")[1].split("raw numbers")[0]
    assert sum(line.startswith(("small ", "large ")) for line in acc.splitlines()) == 4
    assert "equal wall" in acc and "equal steps" in acc

    record = json.loads((smoke / "async_pace.json").read_text())
    assert record["command"].startswith("python bench/async_pace.py --seeds 1")
    assert record["environment"]["cpu_capability"] and record["deep_model"]["layers"] == [4, 5]
    [run] = record["runs"]
    for mode in ("lockstep", "async"):
        for agent in ("small", "large"):
            a = run[mode]["agents"][agent]
            assert 0.0 <= a["idle"] <= 1.0
            assert a["updates"] >= 2 and a["updates_at_wall"] <= a["updates"]
            assert len(a["at_wall"]["rewards"]) == 8 and len(a["at_steps"]["rewards"]) == 8
    assert len(set(record["eval_ids"])) == 8
    assert run["lockstep"]["agents"]["small"]["updates"] == 2
    assert {u["agent"] for u in run["async"]["updates"]} == {"small", "large"}
    assert [(r["agent"], r["point"]) for r in record["accuracy"]] == [
        ("small", "at_wall"), ("small", "at_steps"), ("large", "at_wall"), ("large", "at_steps")]
    assert all(r["interval"]["pairs"] == 8 for r in record["accuracy"])

    main(["--tables", str(smoke / "async_pace.json")])  # the saved numbers give the same tables again
    again = capsys.readouterr().out
    assert again.split("step cost: mean busy s")[1] == text.split("step cost: mean busy s")[1].split("\nraw numbers")[0]
