"""bench/gpu_check.py --tiny: the GPU check's code path (models and tokenizers built on the spot, bf16
autocast, gradient checkpointing, HACPO steps through the Trainer, the numbers it prints) on the CPU with
tiny shapes, so that the GPU check cannot rot on machines without a GPU. About 20-40 s on 2 cores."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from gpu_check import build_tokenizer, synthetic_merges  # noqa: E402


def test_synthetic_tokenizers_have_their_size_and_round_trip() -> None:
    vocab, merges = synthetic_merges(1000, 1, seed=0)
    assert len(vocab) == 999 and len(merges) == 999 - 256 and len(set(vocab.values())) == len(vocab)
    text = "Question: 07 + 85 = ?\nAnswer: 92 ☃ é"
    qwen, llama = build_tokenizer("qwen3", 1024, 0), build_tokenizer("llama", 768, 1)
    assert (len(qwen), len(llama)) == (1024, 768)
    for tok in (qwen, llama):
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    # different merges: the agents split the same text differently
    ids = [tok(text, add_special_tokens=False)["input_ids"] for tok in (qwen, llama)]
    assert ids[0] != ids[1]


@pytest.mark.model
def test_gpu_check_tiny_runs_the_same_path_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--tiny", "--threads", "1", "--tmp",
                           str(tmp_path), "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "gpu_check: mean of steps 2..2: rollout" in proc.stdout
    s = json.loads(out.read_text())
    assert s["shapes"] == "tiny" and s["steps"] == 2 and set(s["params"]) == {"qwen3-tiny", "llama-tiny"}
    assert s["rollout_tok_s"] > 0 and all(v > 0 for v in s["train_tok_s"].values())
    for agent in s["params"]:
        gap_mean, gap_max = s["logp_gap_mean"][agent], s["logp_gap_max"][agent]
        # π_old recomputed by the training pass: the gap is measured, small
        assert math.isfinite(gap_mean) and 0 <= gap_mean <= gap_max < 0.5
    assert s["peak_memory_gib"] > 0
    assert not list(tmp_path.glob("hacrl-gpu-check-*"))  # the models were removed


@pytest.mark.parametrize("flag", ["--tiny", "--dry-run"])
def test_dry_run_is_the_tiny_mode(flag: str) -> None:
    from gpu_check import parse_args

    args = parse_args([flag])
    assert args.tiny and (args.steps, args.batch, args.max_new_tokens) == (2, 2, 8)
    real = parse_args([])
    assert not real.tiny and (real.steps, real.batch, real.max_new_tokens) == (4, 8, 256)
