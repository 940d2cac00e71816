"""CapabilityTracker: the sliding window P̂ (eq. 9, current step included) and ω = clamp(P̂_k / P̂_j);
RecentCapability: the same over each agent's last scored prompts, equal to the tracker in lock-step."""

import pytest
import torch
from torch.testing import assert_close

from hacrl.core import CapabilityTracker, RecentCapability, omega_matrix

T = torch.tensor


def step(tracker, per_agent_rewards):
    """One update from {agent: [rewards]}."""
    rewards = [r for rs in per_agent_rewards.values() for r in rs]
    sources = [a for a, rs in per_agent_rewards.items() for _ in rs]
    return tracker.update(T(rewards, dtype=torch.float32), T(sources))


def test_window_includes_current_step():
    # agent 0's step means: 1.0, 0.0, 0.5, 0.25; agent 1 is always 0.5; K = 3
    tr = CapabilityTracker(2, window=3)
    expected_p0 = [
        1.0,                        # [1.0]                   (window still filling)
        0.5,                        # [1.0, 0.0]
        0.5,                        # [1.0, 0.0, 0.5]         → 1.5/3
        0.25,                       # [0.0, 0.5, 0.25]        → 0.75/3 (step 1 has left the window)
    ]
    steps = [[1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    for rewards, p0 in zip(steps, expected_p0):
        row = step(tr, {0: rewards, 1: [1.0, 0.0]})
        assert row[0].item() == pytest.approx(sum(rewards) / len(rewards))
        assert_close(tr.capability, T([p0, 0.5]))
    # ω^(0,1) = 0.25/0.5 = 0.5, ω^(1,0) = 2
    assert tr.omega_matrix()[0, 1].item() == pytest.approx(0.5)
    assert tr.omega_matrix()[1, 0].item() == pytest.approx(2.0)


def test_no_history_gives_capability_one_and_omega_one():
    tr = CapabilityTracker(3)
    assert torch.equal(tr.capability, torch.ones(3))
    assert torch.equal(tr.omega_matrix(), torch.ones(3, 3))


def test_never_succeeding_agent_is_floored_and_omega_clamped():
    tr = CapabilityTracker(2, window=5)
    for _ in range(3):
        step(tr, {0: [1.0, 0.0], 1: [0.0, 0.0]})
    # P̂ = [0.5, 0 → floor 1e-8]; ω^(0,1) = 0.5/1e-8 = 5e7 → 10; ω^(1,0) = 2e-8 → 0.1
    assert tr.capability[1].item() == pytest.approx(1e-8)
    assert_close(tr.omega_matrix(), T([[1.0, 10.0], [0.1, 1.0]]))
    assert torch.isfinite(tr.omega_matrix()).all()


def test_omega_is_the_clamped_capability_ratio():
    # P̂ = [0.9, 0.3, 0.6, 0.05]:  0.9/0.3 = 3, 0.3/0.6 = 0.5, 0.9/0.05 = 18 → 10, 0.05/0.6 = 0.083 → 0.1
    tr = CapabilityTracker(4, window=2)
    step(tr, {0: [1.0] * 9 + [0.0], 1: [1.0] * 3 + [0.0] * 7, 2: [1.0] * 6 + [0.0] * 4,
              3: [1.0] + [0.0] * 19})
    assert_close(tr.capability, T([0.9, 0.3, 0.6, 0.05]))
    w = tr.omega_matrix()
    assert w[0, 1].item() == pytest.approx(3.0, rel=1e-6)
    assert w[1, 2].item() == pytest.approx(0.5, rel=1e-6)
    assert w[0, 3].item() == pytest.approx(10.0)
    assert w[3, 2].item() == pytest.approx(0.1)
    assert w[2, 2].item() == 1.0
    # the tracker's ω matches the advantage code's ω for the same P̂
    assert_close(tr.omega_matrix(), omega_matrix(tr.capability))


def test_custom_ratio_clamp():
    tr = CapabilityTracker(2, ratio_min=0.5, ratio_max=2.0)
    step(tr, {0: [1.0, 1.0, 1.0, 1.0], 1: [1.0, 0.0, 0.0, 0.0]})  # P̂ = [1, 0.25]: ratio 4 → 2, 0.25 → 0.5
    assert_close(tr.omega_matrix(), T([[1.0, 2.0], [0.5, 1.0]]))


def test_absent_agent_keeps_its_window():
    tr = CapabilityTracker(2, window=2)
    step(tr, {0: [1.0], 1: [1.0, 0.0, 0.0, 0.0]})   # agent 1: 0.25
    step(tr, {0: [0.0], 1: [1.0, 1.0, 0.0, 0.0]})   # agent 1: 0.5 → P̂_1 = 0.375
    row = step(tr, {0: [1.0, 0.0]})                # agent 1 absent: its window is untouched
    assert torch.isnan(row[1])
    assert tr.capability[1].item() == pytest.approx(0.375)
    assert tr.capability[0].item() == pytest.approx(0.25)  # agent 0: mean of [0.0, 0.5]
    step(tr, {1: [1.0]})                            # agent 1 back: window [0.5, 1.0] → 0.75
    assert tr.capability[1].item() == pytest.approx(0.75)
    assert tr.capability[0].item() == pytest.approx(0.25)  # now agent 0 was absent


def test_a_floor_below_the_default_reaches_omega():
    # P̂ = [0.5, 0 → floor 1e-10]: ω^(0,1) = 5e9, clamped only by ratio_max = 1e12
    tr = CapabilityTracker(2, floor=1e-10, ratio_min=1e-12, ratio_max=1e12)
    step(tr, {0: [1.0, 0.0], 1: [0.0, 0.0]})
    assert tr.omega_matrix()[0, 1].item() == pytest.approx(5e9, rel=1e-5)


def test_state_dict_round_trip():
    tr = CapabilityTracker(3, window=3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        rewards = torch.randint(0, 2, (12,), generator=gen).float()
        tr.update(rewards, torch.randint(0, 3, (12,), generator=gen))
    state = tr.state_dict()
    other = CapabilityTracker(3, window=3)
    other.load_state_dict(state)
    assert torch.equal(other.capability, tr.capability)
    assert torch.equal(other.omega_matrix(), tr.omega_matrix())
    # the two continue identically, and the saved state is a copy, not a view
    r, s = torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 1, 2])
    tr.update(r, s)
    other.update(r, s)
    assert torch.equal(other.capability, tr.capability)
    assert state["history"].shape[0] == 5


def test_a_checkpoint_from_before_warmup_was_removed_loads():
    tr = CapabilityTracker(2, window=3)
    tr.update(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))
    state = tr.state_dict()
    state["config"] = {**state["config"], "warmup_steps": 0}  # what older checkpoints hold
    other = CapabilityTracker(2, window=3)
    other.load_state_dict(state)
    assert torch.equal(other.capability, tr.capability)
    state["config"]["warmup_steps"] = 2  # a warm-up that is no longer implemented is refused
    with pytest.raises(ValueError):
        other.load_state_dict(state)


@pytest.mark.parametrize("change", [{"window": 4}, {"num_agents": 2}, {"ratio_max": 5.0}, {"floor": 1e-6}])
def test_load_state_dict_with_a_different_config_raises(change):
    base = {"num_agents": 3, "window": 3}
    tr = CapabilityTracker(**base)
    tr.update(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]))
    args = base | change
    other = CapabilityTracker(args.pop("num_agents"), **args)
    with pytest.raises(ValueError):
        other.load_state_dict(tr.state_dict())


@pytest.mark.parametrize("kwargs", [{"num_agents": 0}, {"num_agents": 2, "window": 0},
                                    {"num_agents": 2, "ratio_min": 2.0}, {"num_agents": 2, "ratio_max": 0.5}])
def test_bad_constructor_arguments_raise(kwargs):
    rest = {k: v for k, v in kwargs.items() if k != "num_agents"}  # the parameter itself stays as it was
    with pytest.raises(ValueError):
        CapabilityTracker(kwargs["num_agents"], **rest)


def test_update_shape_mismatch_raises():
    with pytest.raises(ValueError):
        CapabilityTracker(2).update(torch.tensor([1.0, 0.0]), torch.tensor([0]))


# ---- RecentCapability: P̂ over each agent's last scored prompts, whatever step it is at ------------------------


def test_recent_capability_by_hand_at_different_counts():
    # window 3 prompts. agent 0 is scored on 5 prompts, agent 1 on 1, agent 2 on none:
    #   agent 0 prompt means 1, 0, 0.5, 0.25, 1 → the last three (0.5, 0.25, 1) → P̂_0 = 1.75/3
    #   agent 1: one prompt, rewards (1, 0, 0, 0) → P̂_1 = 0.25;  agent 2: no history → 1
    rc = RecentCapability(3, window=3)
    for rewards in ([1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0]):
        rc.observe(0, T(rewards))
    assert rc.observe(1, T([1.0, 0.0, 0.0, 0.0])).item() == 0.25
    assert_close(rc.capability, T([1.75 / 3, 0.25, 1.0]))
    assert rc.prompts_seen.tolist() == [5, 1, 0]
    # ω^(0,1) = (1.75/3)/0.25 = 7/3; ω^(1,2) = 0.25; ω^(2,1) = 4
    w = rc.omega_matrix()
    assert w[0, 1].item() == pytest.approx(7 / 3, rel=1e-6)
    assert (w[1, 2].item(), w[2, 1].item()) == pytest.approx((0.25, 4.0))


def test_recent_capability_floors_and_clamps_as_the_tracker():
    rc = RecentCapability(2, window=4)
    rc.observe(0, T([1.0, 0.0]))
    rc.observe(1, T([0.0, 0.0]))
    # P̂ = [0.5, 0 → 1e-8]: ω^(0,1) = 5e7 → 10, ω^(1,0) → 0.1
    assert rc.capability[1].item() == pytest.approx(1e-8)
    assert_close(rc.omega_matrix(), T([[1.0, 10.0], [0.1, 1.0]]))


def test_observe_answers_makes_one_event_per_source_and_prompt_in_prompt_order():
    rc = RecentCapability(2, window=2)
    # agent 0 on prompts 9 (1, 1), 4 (0, 1) and 7 (0, 0): events in prompt order 4, 7, 9; window (7, 9): (0 + 1)/2
    # agent 1 on prompt 4 (1, 0, 1, 0) → 0.5
    rewards = T([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    prompts = T([9, 4, 4, 7, 9, 4, 4, 4, 4, 7])
    sources = T([0, 0, 1, 0, 0, 0, 1, 1, 1, 0])
    rc.observe_answers(rewards, prompts, sources)
    assert rc.prompts_seen.tolist() == [3, 1]
    assert_close(rc.capability, T([0.5, 0.5]))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("levels", [(0.0, 1.0), (0.0, 0.25, 0.5, 1.0)])
def test_in_lock_step_it_equals_the_tracker_exactly(seed, levels):
    # every agent scored on the same B prompts per step, G answers each; window K·B prompts = K steps
    N, K, B, G = 3, 3, 4, 4
    gen = torch.Generator().manual_seed(seed)
    tracker = CapabilityTracker(N, window=K)
    recent = RecentCapability(N, window=K * B)
    for _ in range(7):
        idx = torch.randint(0, len(levels), (N * B * G,), generator=gen)
        rewards = T(levels)[idx]
        sources = torch.arange(N).repeat_interleave(B * G)
        prompts = torch.arange(B).repeat_interleave(G).repeat(N)
        tracker.update(rewards, sources)
        recent.observe_answers(rewards, prompts, sources)
        assert torch.equal(recent.capability, tracker.capability)
        assert torch.equal(recent.omega_matrix(), tracker.omega_matrix())


def test_recent_capability_state_dict_round_trip_and_continuation():
    rc = RecentCapability(3, window=4)
    gen = torch.Generator().manual_seed(1)
    for _ in range(9):
        rc.observe(int(torch.randint(0, 3, (1,), generator=gen)), torch.randint(0, 2, (3,), generator=gen).float())
    state = rc.state_dict()
    other = RecentCapability(3, window=4)
    other.load_state_dict(state)
    assert torch.equal(other.capability, rc.capability) and torch.equal(other.prompts_seen, rc.prompts_seen)
    for x in (rc, other):
        x.observe(2, T([1.0, 1.0]))
    assert torch.equal(other.capability, rc.capability)
    assert len(state["recent"][2]) <= 4 and state["recent"][2] is not rc.state_dict()["recent"][2]
    with pytest.raises(ValueError, match="config mismatch"):
        RecentCapability(3, window=5).load_state_dict(state)


def test_recent_capability_refuses_bad_input():
    rc = RecentCapability(2, window=2)
    with pytest.raises(ValueError, match="agent must lie"):
        rc.observe(2, T([1.0]))
    with pytest.raises(ValueError, match="at least one reward"):
        rc.observe(0, T([]))
    with pytest.raises(ValueError, match="1-D of one shape"):
        rc.observe_answers(T([1.0]), T([0, 1]), T([0]))
    with pytest.raises(ValueError):
        RecentCapability(2, window=0)


# ---- found by mutation testing (docs/mutation.md) ------------------------------------------------

def test_recent_capability_windows_are_float64_from_the_start_and_after_a_load():
    rc = RecentCapability(2, window=3)
    # a checkpoint of a fresh estimator holds float64 windows, as after an observation
    assert [r.dtype for r in rc.state_dict()["recent"]] == [torch.float64, torch.float64]
    # a float32 reward's prompt mean is taken in float64: 1/3 is not float32's 0.33333334
    mean = rc.observe(0, torch.tensor([1.0, 0.0, 0.0], dtype=torch.float32))
    assert mean.dtype == torch.float64 and mean.item() == 1.0 / 3.0
    # windows loaded from plain lists (or float32 tensors) are float64 again, values exact
    state = rc.state_dict()
    state["recent"] = [[0.1, 0.2], torch.tensor([0.7], dtype=torch.float32)]
    rc.load_state_dict(state)
    loaded = rc.state_dict()["recent"]
    assert [r.dtype for r in loaded] == [torch.float64, torch.float64]
    assert loaded[0].tolist() == [0.1, 0.2]


@pytest.mark.parametrize("recent, seen", [([[], [], []], [0, 0]), ([[], []], [0, 0, 0])])
def test_recent_capability_load_refuses_a_state_for_another_number_of_agents(recent, seen):
    # either list of the wrong length is refused (not only both), with both counts in the message
    rc = RecentCapability(2, window=3)
    state = {"recent": recent, "seen": seen, "config": rc.state_dict()["config"]}
    with pytest.raises(ValueError, match=rf"holds {len(recent)} windows, expected 2"):
        rc.load_state_dict(state)


def test_checkpoint_config_keys_are_stable():
    # a checkpoint names its settings; renaming one would refuse every checkpoint written before
    cfg = {"num_agents": 2, "window": 3, "floor": 1e-8, "ratio_min": 0.1, "ratio_max": 10.0}
    assert CapabilityTracker(2, window=3).state_dict()["config"] == cfg
    assert RecentCapability(2, window=3).state_dict()["config"] == cfg


def test_update_counts_steps_and_accepts_any_integer_source_dtype():
    tr = CapabilityTracker(2, window=3)
    for _ in range(3):
        # int16 ids (an index_add_ needs int64: the tracker converts); float32 rewards kept as float64
        row = tr.update(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 1, 1], dtype=torch.int16))
    assert_close(row, T([1.0, 0.0]))
    assert tr.steps == 3 and tr.state_dict()["steps"] == 3


@pytest.mark.parametrize("sources", [[0, -1], [-1, -1], [0, 2], [2, 2]])
def test_update_refuses_source_ids_out_of_range(sources):
    with pytest.raises(ValueError, match=r"source_ids must lie in \[0, 2\)"):
        CapabilityTracker(2).update(torch.tensor([1.0, 0.0]), torch.tensor(sources))


def test_update_shape_error_names_both_shapes():
    with pytest.raises(ValueError, match=r"must be 1-D of one shape, got \(2,\) and \(1,\)"):
        CapabilityTracker(2).update(torch.tensor([1.0, 0.0]), torch.tensor([0]))


def test_tracker_load_names_the_mismatch_and_the_bad_history():
    tr = CapabilityTracker(2, window=3)
    state = tr.state_dict()
    with pytest.raises(ValueError, match=r"capability tracker config mismatch: checkpoint .*'window': 4"):
        tr.load_state_dict({**state, "config": {**state["config"], "window": 4}})
    for history, shape in ((torch.zeros(3, 3), r"\(3, 3\)"), (torch.zeros(4), r"\(4,\)")):
        with pytest.raises(ValueError, match=rf"capability history has shape {shape}, expected \[\*, 2\]"):
            tr.load_state_dict({**state, "history": history})


def test_tracker_history_loaded_from_lists_is_float64():
    tr = CapabilityTracker(2, window=3)
    tr.load_state_dict({**tr.state_dict(), "history": [[0.1, 0.3]], "steps": 1})
    history = tr.state_dict()["history"]
    assert history.dtype == torch.float64 and history.tolist() == [[0.1, 0.3]]
