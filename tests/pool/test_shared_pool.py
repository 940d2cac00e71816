"""The asynchronous mode's shared pool (``hacrl.pool.shared``): a hand-worked sequence of rounds, the lock-step
trainer's groups at bound 0, and random interleavings of agents at different speeds (fixed seeds) checked against
an independent record of what happened: the bound is never exceeded, no answer is lost or used twice, nothing the
rule allows is held back, and a checkpoint's state continues the same.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import pytest

from hacrl.core import SELECTION_REASONS
from hacrl.pool import TrajectoryPool
from hacrl.pool.shared import SharedPool
from hacrl.types import Problem, Trajectory


def gaps(take) -> list[int]:
    """The version gap each taken answer carries into the update's pool (``Trajectory.version_gap``)."""
    return [x.version_gap for x in take.trajectory_pool().trajectories]


def problem(pid: int) -> Problem:
    return Problem(f"p{pid}", f"question {pid}", str(pid))


def answers(author: int, n_prompts: int, per_prompt: int,
            rewards: list[float | None] | None = None) -> list[Trajectory]:
    """A round's answers as a worker returns them: prompt-major, ``prompt_index`` into the round's batch."""
    out = []
    for i in range(n_prompts):
        for g in range(per_prompt):
            r = rewards[i * per_prompt + g] if rewards is not None else float(g % 2)
            out.append(Trajectory(i, author, f"a{author}-{i}-{g}", True, -1.5 - g, 3 + g, r))
    return out


def add(pool: SharedPool, author: int, prompts: list[int], version: int, per_prompt: int = 2, rewards=None):
    return pool.add(answers(author, len(prompts), per_prompt, rewards), prompts=prompts,
                    problems=[problem(p) for p in prompts], version=version)


def uids(take) -> list[int]:
    return [a.uid for a in take.answers]


# ---- by hand --------------------------------------------------------------------------------------------

def test_a_sequence_of_rounds_by_hand():
    pool = SharedPool(2)
    a0 = add(pool, 0, [0, 1], version=0)  # uids 0-3: agent 0's two answers to prompts 0 and 1
    a1 = add(pool, 1, [0], version=0, per_prompt=1)  # uid 4: agent 1's answer to prompt 0
    assert [a.uid for a in a0 + a1] == [0, 1, 2, 3, 4]

    # agent 0 at version 0, bound 1: its 4 answers, and agent 1's answer to prompt 0
    t = pool.take(0, 0, bound=1)
    assert uids(t) == [0, 1, 4, 2, 3]  # (prompt, source, arrival) order
    assert t.staleness == (0,) * 5 and t.expired == ()
    assert t.counts == {"own_fresh": 4, "own_stale": 0, "cross": 1, "waiting_cross": 0, "expired_own": 0,
                        "expired_cross": 0}
    assert t.prompts == [0, 1]

    # agent 1 at version 0: its answer to prompt 0 and agent 0's two there; agent 0's prompt 1 waits for it
    t = pool.take(1, 0, bound=1)
    assert uids(t) == [0, 1, 4]
    assert t.counts["waiting_cross"] == 2
    assert pool.waiting_prompts(1, bound=1) == [1]
    assert pool.waiting_prompts(0, bound=1) == []

    # agent 0 (now version 1) answers prompt 2; agent 1 has taken at version 0, so they are available from its 1
    add(pool, 0, [2], version=1)  # uids 5, 6
    # agent 1, version 1, answers prompt 1: its own (fresh), agent 0's prompt-1 answers (staleness 1 ≤ 1)
    add(pool, 1, [1], version=1, per_prompt=1)  # uid 7
    t = pool.take(1, 1, bound=1)
    assert uids(t) == [2, 3, 7] and t.staleness == (1, 1, 0)
    assert t.counts["cross"] == 2 and t.counts["waiting_cross"] == 2  # agent 0's prompt-2 answers
    assert gaps(t) == [0, 0, 0]  # own answer written by this version; cross answers get no gap

    # agent 1 comes back at version 3 without an answer to prompt 2: those are 2 versions old, past the bound
    t = pool.take(1, 3, bound=1)
    assert t.answers == () and [a.uid for a in t.expired] == [5, 6]
    assert t.counts["expired_cross"] == 2
    assert t.metrics()["expired/0"] == 2.0

    acc = pool.accounting()
    assert acc["added"] == 8
    # agent 0: used 0-4; pending 5, 6 (its own, not taken yet) and 7 (agent 1's, waiting for agent 0 to answer
    # prompt 1 again)
    assert (acc["used"][0], acc["expired"][0], acc["pending"][0]) == (5, 0, 3)
    assert (acc["used"][1], acc["expired"][1], acc["pending"][1]) == (6, 2, 0)
    assert len(pool) == 3  # uids 0-4 used by both, 5-6 pending for agent 0, 7 pending for agent 0


def test_a_stale_own_answer_carries_its_version_gap():
    # pipelined: agent 0 takes at version 0 and updates, while answers written by version 0 arrive after
    pool = SharedPool(1)
    add(pool, 0, [0], version=0)
    pool.take(0, 0, bound=2)
    add(pool, 0, [1], version=0)  # written by version 0, taken by version 1
    t = pool.take(0, 1, bound=2)
    assert t.staleness == (1, 1) and gaps(t) == [1, 1]
    assert t.counts["own_stale"] == 2
    assert t.metrics()["staleness_mean"] == 1.0


def test_unscorable_answers_mark_the_group_but_are_not_trained_on():
    pool = SharedPool(2)
    add(pool, 0, [5], version=0, rewards=[None, None])  # agent 0's answers to prompt 5 are both unscorable
    add(pool, 1, [5], version=0, rewards=[1.0, 0.0])
    t = pool.take(0, 0, bound=0)
    assert len(t.answers) == 4  # the group formed: agent 0 answered prompt 5
    view = t.trajectory_pool()
    assert [(x.source, x.reward) for x in view.scored()] == [(1, 1.0), (1, 0.0)]
    assert view.scored() == [x for x in view.trajectories if x.reward is not None]  # build_view's order
    assert view.problems == [problem(5)] and {x.prompt_index for x in view.trajectories} == {0}


def test_bad_calls_say_what_is_wrong():
    pool = SharedPool(2)
    with pytest.raises(ValueError, match="one source's answers"):
        pool.add(answers(0, 1, 1) + answers(1, 1, 1), prompts=[0], problems=[problem(0)], version=0)
    with pytest.raises(ValueError, match="outside the round"):
        pool.add(answers(0, 2, 1), prompts=[0], problems=[problem(0)], version=0)
    with pytest.raises(ValueError, match="in the pool"):
        add(pool, 0, [3], version=0)
        pool.add(answers(1, 1, 1), prompts=[3], problems=[problem(4)], version=0)
    pool.take(0, 0, bound=0)
    with pytest.raises(ValueError, match="already taken at version 0"):
        pool.take(0, 0, bound=0)
    with pytest.raises(ValueError, match="has reported 1"):
        add(pool, 1, [6], version=1)
        pool.take(1, 0, bound=0)
    with pytest.raises(ValueError, match="bound must be >= 0"):
        pool.take(1, 1, bound=-1)
    assert pool.accounting()["used"][1] == 0  # a refused take changes nothing


# ---- bound 0 in lock-step: the synchronous trainer's groups --------------------------------------------------

def lock_step_rounds(seed: int, n_agents=3, batch=4, per_prompt=3, steps=5):
    """Per step: the problems, and every agent's answers (rewards 0/1, some unscorable)."""
    rng = random.Random(seed)
    for step in range(steps):
        prompts = list(range(step * batch, (step + 1) * batch))
        per_agent = [answers(k, batch, per_prompt, [rng.choice([0.0, 1.0, 1.0, None])
                                                    for _ in range(batch * per_prompt)]) for k in range(n_agents)]
        yield step, prompts, per_agent


@pytest.mark.parametrize("seed", range(4))
def test_bound_zero_in_lock_step_gives_the_synchronous_groups(seed):
    pool = SharedPool(3)
    for step, prompts, per_agent in lock_step_rounds(seed):
        problems = [problem(p) for p in prompts]
        sync = TrajectoryPool(problems, [t for ts in per_agent for t in ts])  # the lock-step trainer's pool
        for ts in per_agent:
            pool.add(ts, prompts=prompts, problems=problems, version=step)
        for k in range(3):
            take = pool.take(k, step, bound=0)
            view = take.trajectory_pool()
            assert view.problems == sync.problems
            assert view.scored() == sync.scored()  # what build_view reads: the same answers in the same order
            assert view.rewards_and_sources()[0].tolist() == sync.rewards_and_sources()[0].tolist()
            assert take.staleness == (0,) * len(take.answers) and take.expired == ()
            assert gaps(take) == [0] * len(take.answers)
        assert pool.accounting()["pending"] == [0, 0, 0] and len(pool) == 0


def test_a_partner_one_round_ahead_loses_nothing_at_bound_zero():
    # agent 0 finishes its update and adds its next round while agent 1 is still updating: the answers are
    # available from agent 1's next version, so its next take finds the whole group
    pool = SharedPool(2)
    add(pool, 0, [0], version=0)
    add(pool, 1, [0], version=0)
    pool.take(0, 0, bound=0)
    pool.take(1, 0, bound=0)  # agent 1 starts its update
    add(pool, 0, [1], version=1)  # agent 0 is already one round further
    add(pool, 1, [1], version=1)
    t = pool.take(1, 1, bound=0)
    assert [a.source for a in t.answers] == [0, 0, 1, 1] and t.staleness == (0, 0, 0, 0)


# ---- random interleavings: the bound, the accounting and the rule against an independent record ---------------

@dataclass
class Agent:
    index: int
    version: int = 0
    phase: str = "rollout"  # rollout → take → (update → rollout) | rollout
    in_flight: list = field(default_factory=list)  # (prompts, answers, written version) not added yet


@dataclass
class Record:
    """What happened, kept apart from the pool: when each answer arrived, who wrote it with which version,
    each learner's takes (event index, version), and what each learner used or saw expire."""

    added_at: dict[int, int] = field(default_factory=dict)
    author: dict[int, int] = field(default_factory=dict)
    prompt: dict[int, int] = field(default_factory=dict)
    written: dict[int, int] = field(default_factory=dict)
    takes: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    used: dict[int, set[int]] = field(default_factory=dict)
    expired: dict[int, set[int]] = field(default_factory=dict)

    def available(self, uid: int, learner: int) -> int:
        """Own answer: the version that wrote it; another's: the version of the learner's first take after it
        arrived (a take at this moment included)."""
        if self.author[uid] == learner:
            return self.written[uid]
        return next(v for e, v in self.takes[learner] if e > self.added_at[uid])


def run_interleaving(seed: int, n_agents: int, bound: int, events: int = 300, checkpoint_at: int | None = None):
    rng = random.Random(seed)
    speeds = [rng.choice([1, 2, 5]) for _ in range(n_agents)]
    pool = SharedPool(n_agents)
    agents = [Agent(k) for k in range(n_agents)]
    rec = Record(takes={k: [] for k in range(n_agents)}, used={k: set() for k in range(n_agents)},
                 expired={k: set() for k in range(n_agents)})
    next_prompt = 0  # the next prompt of the training stream
    reasons_seen: set[str] = set()
    for event in range(events):
        if event == checkpoint_at:  # a checkpoint: the state through JSON into a fresh pool, which carries on
            restored = SharedPool(n_agents)
            restored.load_state_dict(json.loads(json.dumps(pool.state_dict())))
            assert restored.state_dict() == pool.state_dict()
            pool = restored
        agent = rng.choices(agents, weights=speeds)[0]
        k = agent.index
        if agent.phase == "rollout":
            next_prompt = _rollout(pool, agent, rng, bound, next_prompt)
            _flush(pool, agent, rec, event, rng, keep=0.0)
            agent.phase = "take"
        elif agent.phase == "take":
            rec.takes[k].append((event, agent.version))
            before = {a.uid for a in pool.pending(k)}
            take = pool.take(k, agent.version, bound)
            reasons_seen |= {r for r, n in take.counts.items() if n}
            _check_take(take, before, rec, k, agent.version, bound)
            agent.phase = "update" if take.answers else "rollout"
        else:  # the update: one version more
            pipelined = rng.random() < 0.5  # the next round generated meanwhile, by the version before the update
            if pipelined:
                next_prompt = _rollout(pool, agent, rng, bound, next_prompt)
            agent.version += 1
            # answers in flight arrive after the update, some only after later ones (stale own answers)
            _flush(pool, agent, rec, event, rng, keep=0.3)
            agent.phase = "take" if pipelined else "rollout"
        acc = pool.accounting()
        for j in range(n_agents):
            assert acc["used"][j] + acc["expired"][j] + acc["pending"][j] == acc["added"]
            assert acc["used"][j] == len(rec.used[j]) and acc["expired"][j] == len(rec.expired[j])
    return pool, agents, rec, reasons_seen


def _rollout(pool, agent, rng, bound, next_prompt) -> int:
    """One round, in flight: the prompts partners answered first (joint groups), then fresh ones from the
    stream; written by the agent's current version. Returns the stream's next prompt."""
    prompts = pool.waiting_prompts(agent.index, bound)[: rng.randint(0, 2)]
    fresh = rng.randint(0 if prompts else 1, 2)
    prompts += list(range(next_prompt, next_prompt + fresh))
    agent.in_flight.append((prompts, answers(agent.index, len(prompts), rng.randint(1, 2), None), agent.version))
    return next_prompt + fresh


def _flush(pool, agent, rec, event, rng, keep):
    """Add the answers in flight, each batch kept back with probability ``keep``."""
    still = []
    for prompts, ts, written in agent.in_flight:
        if rng.random() < keep:
            still.append((prompts, ts, written))
            continue
        for a in pool.add(ts, prompts=prompts, problems=[problem(p) for p in prompts], version=written):
            rec.added_at[a.uid], rec.author[a.uid], rec.prompt[a.uid], rec.written[a.uid] = (
                event, a.source, a.prompt, a.version)
    agent.in_flight = still


def _check_take(take, pending_before, rec, k, version, bound):
    taken = {a.uid for a in take.answers}
    expired = {a.uid for a in take.expired}
    staleness = {u: version - rec.available(u, k) for u in pending_before}
    # the bound is never exceeded, and the staleness the take reports is the record's
    for a, s in zip(take.answers, take.staleness, strict=True):
        assert s == staleness[a.uid] <= bound
    # each answer used at most once per learner; expired ones were past the bound
    assert not taken & (rec.used[k] | rec.expired[k]) and not expired & (rec.used[k] | rec.expired[k])
    assert all(staleness[u] > bound for u in expired)
    # nothing the rule allows is held back: own answers within the bound, the others' within it to their prompts
    own_prompts = {rec.prompt[u] for u in pending_before if rec.author[u] == k and staleness[u] <= bound}
    allowed = {u for u in pending_before if staleness[u] <= bound
               and (rec.author[u] == k or rec.prompt[u] in own_prompts)}
    assert taken == allowed
    assert expired == {u for u in pending_before if staleness[u] > bound}
    assert sum(take.counts[r] for r in SELECTION_REASONS) == len(pending_before)
    # own answers carry their version gap, and the update's pool holds exactly the taken answers
    for a, gap in zip(take.answers, gaps(take), strict=True):
        assert gap == (version - rec.written[a.uid] if a.source == k else 0)
    view = take.trajectory_pool()
    assert len(view.trajectories) == len(taken) and len(view.problems) == len(take.prompts)
    rec.used[k] |= taken
    rec.expired[k] |= expired


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("bound", [0, 1, 3])
def test_random_interleavings_keep_the_bound_and_lose_nothing(seed, bound):
    n_agents = 2 + seed % 2
    pool, agents, rec, reasons = run_interleaving(seed, n_agents, bound, checkpoint_at=150)
    assert {"own_fresh", "cross"} <= reasons  # the interleavings reach the rule's branches
    if bound > 0:
        assert "own_stale" in reasons
    # the end of the run: every learner takes once more past the bound of anything it holds (an answer may be
    # available from its next version); everything is used or expired
    for agent in agents:
        pool.take(agent.index, agent.version + bound + 2, bound)
    acc = pool.accounting()
    assert acc["pending"] == [0] * n_agents
    assert all(u + e == acc["added"] for u, e in zip(acc["used"], acc["expired"], strict=True))
    assert len(pool) == 0 and pool.state_dict()["problems"] == []
    assert acc["added"] == len(rec.added_at) > 50


def test_a_restored_pool_continues_exactly_as_the_original():
    pool, agents, _, _ = run_interleaving(7, 3, bound=2, events=120)
    copy = SharedPool(3)
    copy.load_state_dict(json.loads(json.dumps(pool.state_dict())))
    for p in (pool, copy):
        add(p, 1, [10_000], version=agents[1].version)
    for k, agent in enumerate(agents):
        version = agent.version + 1  # past any take made at the current version
        a, b = pool.take(k, version, 2), copy.take(k, version, 2)
        assert a == b
    assert pool.state_dict() == copy.state_dict()


def test_the_prompt_id_has_its_own_field_and_an_old_state_saying_author_loads():
    pool = SharedPool(2)
    added = add(pool, 1, [10, 11], version=0, per_prompt=1)  # the round's batch: prompt ids 10, 11
    # the prompt id beside the answer; the trajectory as the worker returned it (its index in the round's batch)
    assert [(a.prompt, a.source, a.trajectory.prompt_index) for a in added] == [(10, 1, 0), (11, 1, 1)]
    state = json.loads(json.dumps(pool.state_dict()))
    assert [sorted(a) for a in state["answers"]][0] == ["prompt", "source", "trajectory", "uid", "version"]
    # a checkpoint written before the rename: "author", and the trajectory's prompt_index overloaded with the id
    old = json.loads(json.dumps(state))
    for a in old["answers"]:
        a["author"] = a.pop("source")
        a["trajectory"]["prompt_index"] = a["prompt"]
        a["trajectory"].pop("version_gap")
    restored = SharedPool(2)
    restored.load_state_dict(old)
    assert [(a.prompt, a.source) for a in restored.pending(0)] == [(10, 1), (11, 1)]
    # either way the update's pool numbers the groups by the taken prompts' order
    for p in (pool, restored):
        add(p, 0, [11], version=0, per_prompt=1)
        view = p.take(0, 0, bound=0).trajectory_pool()
        assert [(t.prompt_index, t.source) for t in view.trajectories] == [(0, 0), (0, 1)]
