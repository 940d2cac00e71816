"""The adaptive cross window (hacrl.core.window), hand-computed."""

import math

import pytest
import torch

from hacrl.core.window import CrossWindow, coverage_lower_bound


def t(*xs):
    return torch.tensor(xs, dtype=torch.float64)


@pytest.mark.parametrize(("ratios", "target", "expected"), [
    # 4 ratios <= 1 of 6; target 0.5 -> k = 3 -> the 3rd largest <= 1 is 0.4
    ((0.2, 0.4, 0.6, 0.9, 1.1, 1.3), 0.5, 0.4),
    # k = ceil(0.34 * 6) = 3 as well
    ((0.2, 0.4, 0.6, 0.9, 1.1, 1.3), 0.34, 0.4),
    # k = ceil(1/3 * 6) = 2 exactly (no rounding up past an integer)
    ((0.2, 0.4, 0.6, 0.9, 1.1, 1.3), 1 / 3, 0.6),
    # the configured window already holds the target: never narrower than 1 - delta
    ((0.85, 0.9, 0.95, 0.99), 0.5, 0.8),
    # a ratio of exactly 1 is inside [l, 1]
    ((1.0, 1.0, 0.5, 0.3), 0.75, 0.5),
    # target 1 with every ratio <= 1: the smallest ratio, floored
    ((0.05, 0.5, 0.7), 1.0, 0.1),
    ((0.15, 0.5, 0.7), 1.0, 0.15),
    # target out of reach (too many ratios above 1): widen to the floor
    ((0.3, 1.2, 1.4, 1.6), 0.5, 0.1),
    # non-finite ratios are ignored
    ((0.3, float("nan"), 0.6), 0.5, 0.6),
])
def test_coverage_lower_bound_hand_computed(ratios, target, expected):
    assert coverage_lower_bound(t(*ratios), target=target, floor=0.1, ceiling=0.8) == pytest.approx(expected)


def test_coverage_reaches_the_target_share():
    g = torch.Generator().manual_seed(0)
    r = torch.exp(torch.randn(1000, generator=g, dtype=torch.float64) * 0.5 - 0.7)
    for target in (0.2, 0.5, 0.8):
        lb = coverage_lower_bound(r, target=target, floor=1e-3, ceiling=1.0)
        inside = ((r >= lb) & (r <= 1)).double().mean().item()
        assert target <= inside < target + 0.002


def test_no_ratios_keeps_the_ceiling():
    assert coverage_lower_bound(torch.empty(0), target=0.5, floor=0.1, ceiling=0.8) == 0.8


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"target": 0.0, "floor": 0.1, "ceiling": 0.8}, "target"),
    ({"target": 1.5, "floor": 0.1, "ceiling": 0.8}, "target"),
    ({"target": 0.5, "floor": 0.9, "ceiling": 0.8}, "floor"),
    ({"target": 0.5, "floor": 0.0, "ceiling": 0.8}, "floor"),
])
def test_coverage_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        coverage_lower_bound(t(0.5), **kwargs)


def test_cross_window_starts_at_the_configured_delta_and_smooths_geometrically():
    w = CrossWindow(3, delta=0.2, target=0.5, floor=0.05, smoothing=0.5)
    assert w.bounds(0) == [0.8, 0.8, 0.8]
    # first observation taken as is: ratios (0.1, 0.2, 0.4, 0.6) -> k = 2 -> 0.4
    assert w.observe(0, 1, t(0.1, 0.2, 0.4, 0.6)) == pytest.approx(0.4)
    # second: estimate 0.1 (k = 1 of 2 <= 1... ratios (0.1, 1.5): k = 1 -> 0.1), blended in log space
    assert w.observe(0, 1, t(0.1, 1.5)) == pytest.approx(math.sqrt(0.4 * 0.1))
    # other pairs untouched; the direction is (learner, source)
    assert w.bounds(0) == pytest.approx([0.8, 0.2, 0.8])
    assert w.bounds(1) == [0.8, 0.8, 0.8]
    # an empty observation leaves the bound
    assert w.observe(0, 1, torch.empty(0)) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="own"):
        w.observe(2, 2, t(0.5))


def test_cross_window_smoothing_one_follows_the_last_step():
    w = CrossWindow(2, delta=0.2, target=0.5, floor=0.05, smoothing=1.0)
    w.observe(1, 0, t(0.3, 0.35))
    assert w.observe(1, 0, t(0.7, 0.75)) == pytest.approx(0.75)  # k = 1: the largest


def test_cross_window_state_round_trip():
    w = CrossWindow(2, delta=0.4, target=0.7, floor=0.1, smoothing=0.3)
    w.observe(0, 1, t(0.2, 0.3, 0.9))
    w.observe(0, 1, t(0.5, 0.55))
    fresh = CrossWindow(2, delta=0.4, target=0.7, floor=0.1, smoothing=0.3)
    fresh.load_state_dict(w.state_dict())
    assert fresh.bounds(0) == w.bounds(0)
    assert fresh.observe(0, 1, t(0.4)) == w.observe(0, 1, t(0.4))
    with pytest.raises(ValueError, match="this run has 3"):
        CrossWindow(3, delta=0.4, target=0.7, floor=0.1, smoothing=0.3).load_state_dict(w.state_dict())


# ---- found by mutation testing (docs/mutation.md) ------------------------------------------------

def test_cross_window_load_restores_float64_bounds_and_bool_flags():
    # a state written as float32 / 0-1 integers (another writer, an old checkpoint) loads as float64 and bool
    w = CrossWindow(2, delta=0.4, target=0.7, floor=0.1, smoothing=0.3)
    w.load_state_dict({"lower_NN": torch.full((2, 2), 0.5, dtype=torch.float32),
                       "seen_NN": torch.tensor([[0, 1], [0, 0]], dtype=torch.uint8)})
    state = w.state_dict()
    assert state["lower_NN"].dtype == torch.float64 and state["seen_NN"].dtype == torch.bool
    assert state["seen_NN"].tolist() == [[False, True], [False, False]]


def test_cross_window_load_refuses_a_malformed_state_naming_its_agents():
    w = CrossWindow(2, delta=0.4, target=0.7, floor=0.1, smoothing=0.3)
    with pytest.raises(ValueError, match="state is for 3 agents, this run has 2"):
        w.load_state_dict({"lower_NN": torch.ones(3), "seen_NN": torch.ones(3, dtype=torch.bool)})


def test_coverage_bounds_edges():
    # floor = ceiling is allowed (a window fixed at one bound); a ceiling above 1 is not (the window's top is 1)
    assert coverage_lower_bound(t(0.2, 0.9), target=0.5, floor=0.5, ceiling=0.5) == 0.5
    with pytest.raises(ValueError, match=r"need 0 < floor <= ceiling <= 1, got floor=0.1, ceiling=1.5"):
        coverage_lower_bound(t(0.5), target=0.5, floor=0.1, ceiling=1.5)


def test_cross_window_arguments_edges():
    kw = {"delta": 0.2, "target": 0.5, "floor": 0.1, "smoothing": 0.5}
    assert CrossWindow(1, **kw).bounds(0) == [0.8]  # one agent: constructible, nothing to observe
    assert CrossWindow(2, **(kw | {"floor": 0.8})).bounds(0) == [0.8, 0.8]  # floor = 1 − δ: a fixed window
    assert CrossWindow(2, **(kw | {"smoothing": 1.0})).smoothing == 1.0
    assert CrossWindow(2, **kw).state_dict()["seen_NN"].dtype == torch.bool
    bad = [({"num_agents": 0}, r"num_agents must be >= 1, got 0"),
           ({"smoothing": 0.0}, r"smoothing must lie in \(0, 1\], got 0.0"),
           ({"smoothing": 1.5}, r"smoothing must lie in \(0, 1\], got 1.5"),
           ({"floor": 0.0}, r"need 0 < floor <= 1 - delta, got floor=0.0, delta=0.2"),
           ({"floor": 0.9}, r"need 0 < floor <= 1 - delta, got floor=0.9, delta=0.2")]
    for change, message in bad:
        args = {"num_agents": 2} | kw | change
        with pytest.raises(ValueError, match=message):
            CrossWindow(args.pop("num_agents"), **args)
    with pytest.raises(ValueError, match="^own answers have no cross window$"):
        CrossWindow(2, **kw).observe(1, 1, t(0.5))
