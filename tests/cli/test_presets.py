"""Every shipped preset loads and fits every algorithm; the default minibatch follows the paper."""

from __future__ import annotations

import pytest

from hacrl.config import default_minibatch, derive, load_config, preset_names
from hacrl.learner.algorithms import ALGORITHMS


def derived(preset, algo):
    cfg = load_config(preset, overrides=[f"algorithm.name={algo}"])
    a = ALGORITHMS.get(algo)
    return cfg, derive(cfg, shares_pool=a.shares_pool, rollout_multiplier=a.rollout_multiplier, needs_groups=True)


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_fits_every_algorithm(preset):
    for algo in ALGORITHMS.names():
        cfg, d = derived(preset, algo)
        assert d.num_minibatches >= 1
    if len(cfg.agents) == 2:
        # the paper's accounting: GSPO×2 as many updates as 2-agent HACPO (twice GSPO's), half its rollouts
        hacpo, gspo, gspo2x = (derived(preset, a)[1] for a in ("hacpo", "gspo", "gspo2x"))
        assert gspo2x.num_minibatches == hacpo.num_minibatches == 2 * gspo.num_minibatches
        assert gspo2x.group_size == 2 * hacpo.group_size


def test_the_default_minibatch_by_hand():
    # the paper: 128 prompts x G 8, two agents: 16 answers per prompt, 512 per update, 4 updates
    assert default_minibatch(128, 8, 16) == 512
    assert default_minibatch(128, 8, 8) == 512  # gspo: 2 updates of 1024 answers
    # three agents, 24 answers per prompt: 2 prompts (48 answers) are nearest to B·G/2 = 64
    assert default_minibatch(16, 8, 24) == 48
    # a single prompt per step: the whole group
    assert default_minibatch(1, 8, 16) == 16
