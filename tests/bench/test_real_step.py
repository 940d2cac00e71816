"""bench/real_step.py's settings: each one is a valid config of the smollm2-state preset (so a bench run
never dies on a typo after minutes of others), and the FLOP count of a setting sees the same work as the
setting itself: the vLLM engine and the process layout are stripped, everything else is kept."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from real_step import SETTINGS, VLLM, flop_overrides, overrides_for  # noqa: E402

from hacrl.config import load_config  # noqa: E402


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_every_setting_is_a_valid_config(setting):
    cfg = load_config("smollm2-state", overrides=overrides_for("smollm2-state", setting, []))
    if setting.startswith("vllm"):
        assert cfg.rollout.engine == "vllm" and cfg.rollout.old_logprobs == "rollout"
    if setting.endswith("-ray"):
        assert cfg.backend.name == "ray"
    if setting == "vllm-nokl":
        assert all(a.kl_coef == 0 for a in cfg.agents)
    counted = load_config("smollm2-state", overrides=flop_overrides(overrides_for("smollm2-state", setting, [])))
    assert counted.rollout.engine == "hf" and counted.backend.name == "local"


def test_flop_count_keeps_what_changes_the_work():
    today = flop_overrides(overrides_for("smollm2-state", "today", []))
    assert "rollout.engine_options.merge_lora=false" in today  # unmerged decoding: more FLOPs, kept
    same = {tuple(sorted(flop_overrides(overrides_for("smollm2-state", s, [])))) for s in ("new", "ray", "vllm",
                                                                                          "vllm-ray")}
    assert len(same) == 1  # one count serves the settings that differ in engine or layout only
    nokl = flop_overrides(overrides_for("smollm2-state", "vllm-nokl", []))
    assert "agents.smollm2.kl_coef=0" in nokl and not set(VLLM) & set(nokl)
