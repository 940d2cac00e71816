"""examples/my-pair.yaml, "my two Hub models on my GSM8K-style file": it is the `hub-pair-gsm8k` preset, and it
trains end to end with the tiny builtin models swapped in for the Hub ones (no Hub, no GPU here)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml

from hacrl.cli import main
from hacrl.config import load_config

EXAMPLE = Path(__file__).parents[2] / "examples" / "my-pair.yaml"


def gsm_file(path: Path, n: int, start: int = 0) -> Path:
    """``n`` GSM8K-style rows: a question and an answer whose number follows ####."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"question": f"What is {a} + {a % 7}?", "answer": f"{a} + {a % 7} = {a + a % 7}\n#### {a + a % 7}"}
            for a in range(start, start + n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tiny_overrides(data: Path) -> list[str]:
    """The example's GPU pair swapped for the tiny CPU models; everything else as the example has it."""
    out = [f"task.train_path={data / 'train.jsonl'}", f"task.test_path={data / 'test.jsonl'}",
           "agents.qwen3.model=builtin:qwen2-char", "agents.llama.model=builtin:llama-bpe",
           "rollout.max_new_tokens=8", "rollout.rollouts_per_prompt=2",
           "trainer.steps=2", "trainer.batch_size=2", "trainer.micro_batch_size=8", "trainer.eval_size=4",
           "trainer.eval_every=0", "trainer.checkpoint_every=0", "trainer.log_samples=1", "trainer.threads=1",
           "task.reward_timeout_s=null"]
    for agent in ("qwen3", "llama"):  # the tiny models: CPU, float32 compute, no chat template, 256 positions
        out += [f"agents.{agent}.device=cpu", f"agents.{agent}.autocast=null", f"agents.{agent}.template=plain",
                f"agents.{agent}.max_prompt_tokens=160"]
    return out


def test_the_example_is_the_hub_pair_preset_with_comments():
    example, preset = load_config(path=EXAMPLE), load_config("hub-pair-gsm8k")
    assert example == preset
    assert [a.model for a in example.agents] == ["Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B-Instruct"]
    assert example.task.kind == "dataset" and example.task.reward == "numeric" and example.task.name == "gsm8k"
    assert all(a.dtype == "float32" and a.autocast == "bfloat16" and a.template == "chat" for a in example.agents)


@pytest.mark.model
def test_the_example_trains_two_steps_with_the_tiny_models_swapped_in(tmp_path, capsys):
    data = tmp_path / "gsm8k-mini"
    gsm_file(data / "train.jsonl", 40)
    gsm_file(data / "test.jsonl", 8, start=100)
    out = tmp_path / "run"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc = main(["train", "--config", str(EXAMPLE), *[x for o in tiny_overrides(data) for x in ("--set", o)],
                   "--output", str(out), "-q"])
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    # a dataset task without task.name is named after its folder (the file is only "train"), everywhere
    assert "finished 2 steps of hacpo; held-out greedy accuracy on 4 gsm8k-mini problems:" in stdout
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["task"]["name"] == "gsm8k-mini" and saved["algorithm"]["name"] == "hacpo"
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2]
    # both learned from the shared pool: each saw the other's answers (hacpo's cross terms) in both updates
    assert all(x["agent/qwen3/count/cross"] > 0 and x["agent/llama/count/cross"] > 0 for x in lines[1:])
    # gradient checkpointing is on in the example: no transformers FutureWarning about it
    assert not [w for w in caught if issubclass(w.category, FutureWarning) and "checkpointing" in str(w.message)]
