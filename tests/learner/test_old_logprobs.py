"""Where π_old comes from: the rollout's own log-probs only where they are the training pass's exactly."""

import pytest

from hacrl.config import build_config, recompute_old_logprobs

BASE = {"agents": [{"id": "a", "model": "m"}, {"id": "b", "model": "m"}]}


def cfg(rollout: dict | None = None, agent_b: dict | None = None):
    agents = [BASE["agents"][0], {**BASE["agents"][1], **(agent_b or {})}]
    backend = {"name": "ray"} if (agent_b or {}).get("fsdp") else {}
    return build_config({"agents": agents, "rollout": rollout or {}, "backend": backend})


def test_full_precision_hf_sampling_at_temperature_one_keeps_the_rollout_logprobs():
    assert recompute_old_logprobs(cfg()) is False


@pytest.mark.parametrize("rollout, agent_b", [
    ({"temperature": 0.7}, None),                       # the sampled distribution is not π
    ({"top_p": 0.9}, None),
    ({"engine": "vllm"}, None),                         # other kernels
    (None, {"autocast": "bfloat16"}),                   # decoding and training in another precision
    (None, {"dtype": "bfloat16"}),
    (None, {"fsdp": True, "data_parallel": 2, "fsdp_mixed_precision": "bfloat16"}),
])
def test_any_gap_between_decoding_and_the_training_pass_recomputes(rollout, agent_b):
    """One agent is enough: a gap of 1e-3 in the sequence ratio already exceeds GSPO's clip radii."""
    assert recompute_old_logprobs(cfg(rollout, agent_b)) is True


@pytest.mark.parametrize("setting, expected", [("rollout", False), ("recompute", True)])
def test_an_explicit_setting_wins(setting, expected):
    assert recompute_old_logprobs(cfg({"old_logprobs": setting, "temperature": 0.7})) is expected
