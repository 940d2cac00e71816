"""The ``trust`` sharing method's rule: how much of each partner's answers a learner takes, read from the learner's
own accuracy on a fixed validation slice of the *training* split while it trains (ours; docs/methods.md).

A learner k holds a trust τ_j ∈ [0, 1] per partner j. τ_j sets three things of j's answers in k's update:

- their weight: a partner answer trains as ``naive``'s does (GSPO's clipped ratio to its author, the row counted as
  the learner's own), times τ_j;
- a ratio floor ℓ_j = floor^τ_j: an answer whose ratio s = exp(ℓ̄_θ − ℓ̄_author) lies below ℓ_j gives no gradient
  (τ 1: the ``floor``, 0.1 by default; τ ½: √floor ≈ 0.32; τ 0: 1, no answer below its author's likelihood);
- their weight in the joint group's baseline (``weighted_group_advantages``): τ 1 is ``naive``'s joint-group
  advantage, τ 0 the learner's own group's, GSPO's.

So τ = 1 everywhere is ``naive`` without its farthest answers, and τ = 0 is training alone on the learner's own
answers (in the pooled methods' minibatches). The rule that moves τ is a paired test on the validation slice:

Every ``every`` steps the trainer evaluates each agent greedily on the same n validation problems. Against its
*reference* check (the first one; later, the best one or the one right after a cut), the learner counts the problems
it now gets right that it got wrong there (wins) and the reverse (losses). The check is **harm** when

    losses − wins ≥ z · √(losses + wins)   and   (losses − wins) / n ≥ min_drop

(McNemar's test, one-sided, in its normal form; ``min_drop`` keeps a large slice from flagging a tiny drop). On
harm every partner's τ drops to 0 and the reference becomes this check; otherwise every τ rises by ``regain`` (at
most 1) and the reference becomes this check if it is at least as accurate. With one partner the harm is that
partner's; with several the rule cannot tell them apart and distrusts them all (its stated limit).

Why this signal: the study found the harm a partner does comes late and is large (imitation and the plain pool
copy a partner's unchecked working and collapse a weak learner from about step 10 on; docs/results.md §12.4),
while in every other regime sharing leaves the learner at or above training alone. A paired test on fixed problems
sees a collapse with few problems and rarely flags ordinary noise; the ratio floor keeps out, from the first step,
the answers that are farthest from what the learner would write, which is where copied garbage starts.

**The cut** (``cut`` > 0, ``algorithm.trust_cut``; off by default): over the learner's first ``cut_steps`` updates
the state averages, per partner, the mean ratio s of that partner's answers in each update (r̄_j: how likely the
learner finds the partner's answers against their author). A partner with r̄_j < ``cut`` is distrusted for good
after that update: τ_j = 0 for the rest of the run, which no later check raises, so the learner trains alone on
its own answers. Why: the trust study's stage 6 (docs/results-trust.md) found r̄ over the first 10 steps below 0.5
where no way of sharing beat training alone with twice the answers, and it foretold 8 of 10 agents it had not been
fitted to; the harm test cannot see that case, where the learner does not fall but stops gaining.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TrustRule:
    """The rule's constants (``algorithm.trust_*``).

    Args:
        floor: ℓ at full trust; ℓ_j = floor^τ_j, in (0, 1).
        z: the one-sided normal quantile of the harm test (2: about 2.3% false alarms per check without change).
        min_drop: the smallest net share of the slice lost that counts as harm.
        regain: τ added after each check without harm.
        cut: a partner whose mean ratio over the first ``cut_steps`` updates is below it is distrusted for good
            (0: never).
        cut_steps: the updates r̄ is averaged over.
    """

    floor: float = 0.1
    z: float = 2.0
    min_drop: float = 0.02
    regain: float = 0.25
    cut: float = 0.0
    cut_steps: int = 10

    def __post_init__(self) -> None:
        if not 0.0 < self.floor < 1.0:
            raise ValueError(f"trust floor must lie in (0, 1), got {self.floor}")
        if self.cut < 0 or self.cut_steps < 1:
            raise ValueError(f"need cut >= 0 and cut_steps >= 1; got {self.cut}, {self.cut_steps}")
        if self.z < 0 or self.min_drop < 0 or not 0.0 <= self.regain <= 1.0:
            raise ValueError(f"need z >= 0, min_drop >= 0, 0 <= regain <= 1; got {self.z}, {self.min_drop}, "
                             f"{self.regain}")


def ratio_floor(tau: float, floor: float) -> float:
    """ℓ = floor^τ: the lowest ratio s a partner answer may have and still train.

    >>> ratio_floor(1.0, 0.1), round(ratio_floor(0.5, 0.1), 4), ratio_floor(0.0, 0.1)
    (0.1, 0.3162, 1.0)
    """
    return float(floor ** min(max(tau, 0.0), 1.0))


@dataclass(frozen=True)
class Check:
    """One validation check of a learner against its reference: the problems it now gets right that it got wrong
    there (``wins``), the reverse (``losses``), the slice's size, and whether the rule calls it harm."""

    accuracy: float
    wins: int
    losses: int
    n: int
    harm: bool


def paired_check(now: Sequence[bool], ref: Sequence[bool], rule: TrustRule) -> Check:
    """The harm test of ``now`` (per problem: right or not) against ``ref`` on the same problems.

    Ten problems; the reference got the first eight right, now only the first three and the last one: losses 5,
    wins 1, net 4, below 2·√6 ≈ 4.90, so no harm at z 2; at z 1.5 (1.5·√6 ≈ 3.67) it is harm.

    >>> ref = [True] * 8 + [False] * 2
    >>> now = [True] * 3 + [False] * 6 + [True]
    >>> paired_check(now, ref, TrustRule())
    Check(accuracy=0.4, wins=1, losses=5, n=10, harm=False)
    >>> paired_check(now, ref, TrustRule(z=1.5)).harm
    True
    """
    if len(now) != len(ref) or not now:
        raise ValueError(f"a check compares the same problems: {len(now)} against {len(ref)}")
    wins = sum(a and not b for a, b in zip(now, ref, strict=True))
    losses = sum(b and not a for a, b in zip(now, ref, strict=True))
    net = losses - wins
    harm = net > 0 and net >= rule.z * math.sqrt(losses + wins) and net / len(now) >= rule.min_drop
    return Check(sum(now) / len(now), wins, losses, len(now), harm)


@dataclass
class TrustState:
    """One learner's trust in each of ``num_agents`` agents (its own entry unused, kept at 1), its reference
    check, and (with ``rule.cut``) the partners' ratio means so far and which partners are cut. ``observe`` and
    ``observe_ratios`` move it; ``state_dict`` / ``load_state_dict`` keep it in checkpoints."""

    learner: int
    num_agents: int
    rule: TrustRule = field(default_factory=TrustRule)
    tau: list[float] = field(default_factory=list)
    reference: tuple[bool, ...] | None = None
    updates: int = 0  # updates seen by observe_ratios (counted up to rule.cut_steps)
    ratio_sum: list[float] = field(default_factory=list)  # per source: Σ over updates of its answers' mean s
    ratio_updates: list[int] = field(default_factory=list)  # per source: the updates that had its answers
    cut_off: list[bool] = field(default_factory=list)  # per source: distrusted for good

    def __post_init__(self) -> None:
        if not self.tau:
            self.tau = [1.0] * self.num_agents
        self.ratio_sum = self.ratio_sum or [0.0] * self.num_agents
        self.ratio_updates = self.ratio_updates or [0] * self.num_agents
        self.cut_off = self.cut_off or [False] * self.num_agents

    def rbar(self, j: int) -> float | None:
        """r̄_j so far: the mean over updates of source j's answers' mean ratio (None before any of its answers)."""
        return self.ratio_sum[j] / self.ratio_updates[j] if self.ratio_updates[j] else None

    def observe_ratios(self, ratios: dict[int, list[float]]) -> list[int]:
        """One update's ratios (source → each answer's s, as its minibatch saw it), counted while ``rule.cut`` is
        on and the first ``rule.cut_steps`` updates last; after the last of them, every partner whose r̄ is below
        ``rule.cut`` is cut (τ 0 from the next update on, for good). Returns the partners cut now.

        >>> state = TrustState(0, 3, TrustRule(cut=0.5, cut_steps=2))
        >>> state.observe_ratios({1: [0.2, 0.4], 2: [0.9]})
        []
        >>> state.observe_ratios({1: [0.5], 2: [0.1]}), state.tau, state.rbar(1), state.rbar(2)
        ([1], [1.0, 0.0, 1.0], 0.4, 0.5)
        """
        if self.rule.cut <= 0 or self.updates >= self.rule.cut_steps:
            return []
        for j, values in ratios.items():
            if j != self.learner and values:
                self.ratio_sum[j] += sum(values) / len(values)
                self.ratio_updates[j] += 1
        self.updates += 1
        if self.updates < self.rule.cut_steps:
            return []
        cut = [j for j in range(self.num_agents) if j != self.learner
               and (r := self.rbar(j)) is not None and r < self.rule.cut]
        for j in cut:
            self.cut_off[j] = True
            self.tau[j] = 0.0
        return cut

    def floors(self) -> list[float]:
        """ℓ_j per source agent (0, nothing cut, at the learner's own entry)."""
        return [0.0 if j == self.learner else ratio_floor(t, self.rule.floor) for j, t in enumerate(self.tau)]

    def observe(self, correct: Sequence[bool]) -> Check | None:
        """A validation check (per problem of the slice: right or not); None for the first, which only sets the
        reference."""
        now = tuple(bool(c) for c in correct)
        if self.reference is None:
            self.reference = now
            return None
        check = paired_check(now, self.reference, self.rule)
        partners = [j for j in range(self.num_agents) if j != self.learner and not self.cut_off[j]]
        for j in partners:
            self.tau[j] = 0.0 if check.harm else min(1.0, self.tau[j] + self.rule.regain)
        if check.harm or sum(now) >= sum(self.reference):
            self.reference = now
        return check

    def state_dict(self) -> dict:
        return {"tau": list(self.tau), "reference": None if self.reference is None else list(self.reference),
                "updates": self.updates, "ratio_sum": list(self.ratio_sum), "ratio_updates": list(self.ratio_updates),
                "cut_off": list(self.cut_off)}

    def load_state_dict(self, state: dict) -> None:
        """A state from ``state_dict`` (one saved before the cut existed: no update counted, none cut)."""
        tau = [float(t) for t in state["tau"]]
        n = self.num_agents
        sums = [float(x) for x in state.get("ratio_sum", [0.0] * n)]
        counts = [int(x) for x in state.get("ratio_updates", [0] * n)]
        cut = [bool(x) for x in state.get("cut_off", [False] * n)]
        if any(len(x) != n for x in (tau, sums, counts, cut)):
            raise ValueError(f"trust state is for {len(tau)} agents, this run has {n}")
        self.tau, self.ratio_sum, self.ratio_updates, self.cut_off = tau, sums, counts, cut
        self.updates = int(state.get("updates", 0))
        ref = state.get("reference")
        self.reference = None if ref is None else tuple(bool(c) for c in ref)


def kept_shares(ratios: dict[int, list[float]], floors: Sequence[float]) -> dict[int, float]:
    """Per source agent, the share of its answers in an update whose ratio s was at or above that source's floor
    ℓ (the answers that trained): ``ratios`` is source → each answer's s as its minibatch saw it.

    >>> kept_shares({1: [0.05, 0.2, 1.3, 0.09]}, [0.0, 0.1])
    {1: 0.5}
    """
    return {j: sum(s >= floors[j] for s in values) / len(values) for j, values in ratios.items() if values}


def rollout_budget(usable: Sequence[Sequence[float]], group_size: int, min_share: float = 0.5) -> list[int]:
    """How many answers per prompt each agent writes this step when trust moves the rollout budget
    (``algorithm.trust_budget``): the pooled methods' N·G answers a prompt in all, shared out so that the learner
    worst off in answers it can use gets as many as it can.

    ``usable[k][j]`` is what one of agent j's answers is worth to learner k: 1 for its own (the diagonal is read
    as 1), τ_kj × the share of j's answers k's last update kept above its floor for a partner's. With n_j answers
    from agent j, learner k can use U_k = Σ_j usable[k][j]·n_j. Every agent writes at least ⌈min_share·G⌉ (≥ 1).
    The rest go one at a time to the agent whose extra answer leaves the largest min_k U_k (ties: the agent with
    fewest answers, then the first); the pooled split (G each) replaces that where it is better for the worst
    off, and single answers then move from one agent to another while a move raises min_k U_k. For two agents
    this is the best split (a test holds it against every split); for more it is never worse than G each.
    Where every learner trusts every partner fully, or none trusts any, each agent writes G; where one learner
    takes nothing from a partner that takes all of its answers, that learner writes the most the floor leaves.

    >>> rollout_budget([[1, 1], [1, 1]], 8), rollout_budget([[1, 0], [0, 1]], 8)
    ([8, 8], [8, 8])
    >>> rollout_budget([[1, 0.0], [1.0, 1]], 8)
    [12, 4]
    >>> rollout_budget([[1, 0.0], [1.0, 1]], 8, min_share=0.25)
    [14, 2]
    """
    n_agents = len(usable)
    if not 0.0 < min_share <= 1.0 or group_size < 1:
        raise ValueError(f"need 0 < min_share <= 1 and group_size >= 1, got {min_share}, {group_size}")
    worth = [[1.0 if k == j else min(max(float(usable[k][j]), 0.0), 1.0) for j in range(n_agents)]
             for k in range(n_agents)]
    floor = max(1, math.ceil(min_share * group_size))

    def worst(counts: Sequence[int]) -> float:  # min_k U_k
        return min(sum(worth[k][j] * counts[j] for j in range(n_agents)) for k in range(n_agents))

    counts = [floor] * n_agents
    for _ in range(n_agents * group_size - n_agents * floor):
        def after(j: int) -> tuple[float, int, int]:  # the worst off after j writes one more; fewer; first
            counts[j] += 1
            value = worst(counts)
            counts[j] -= 1
            return (value, -counts[j], -j)
        counts[max(range(n_agents), key=after)] += 1
    if worst([group_size] * n_agents) >= worst(counts):
        counts = [group_size] * n_agents
    improved = True
    while improved:  # one answer from a to b while that raises the worst off (strictly: it ends)
        improved = False
        for a in range(n_agents):
            for b in range(n_agents):
                if a != b and counts[a] > floor:
                    moved = list(counts)
                    moved[a] -= 1
                    moved[b] += 1
                    if worst(moved) > worst(counts) + 1e-12:
                        counts, improved = moved, True
    return counts
