"""Algorithms by name: which answers a learner trains on, which advantage and which loss.

| name            | rollouts              | a learner trains on                                     |
|-----------------|-----------------------|---------------------------------------------------------|
| hacpo           | G per agent, shared   | own G + others' (N−1)·G, with HACPO's four corrections  |
| gspo            | G per agent, private  | own G                                                   |
| gspo2x          | 2G per agent, private | own 2G (the paper's GSPO×2: same updates as hacpo, N=2) |
| gspo-x<N>       | N·G per agent, private| own N·G: the rollouts and updates of hacpo with N agents |
| naive           | G per agent, shared   | the joint pool, plain GSPO, no corrections (the         |
|                 |                       | joint-pool baseline)                                    |
| imitation       | G per agent, shared   | own G with GSPO (own-group advantage) + λ·NLL of the    |
|                 |                       | others' verified-correct answers (the distillation      |
|                 |                       | baseline; λ = ``algorithm.imitation_coef``)             |
| grpo            | G per agent, private  | own G, token-level ratio (default ε 0.2 / 0.28)         |
| hacpo-noadv     | as hacpo              | plain joint-mean baseline (the paper's "−Adv")          |
| hacpo-noomega   | as hacpo              | ω = 1 in the update, kept in the baseline ("−ω")        |
| hacpo-alpha0    | as hacpo              | α = 0 (no exponential IS)                               |
| hacpo-nostep    | as hacpo              | fixed cross window [1−δ, 1] ("no Stepwise")             |
| hacpo-noclip    | as hacpo              | no cross clipping at all ("no Clip")                    |
| hacpo-adaptive  | as hacpo              | adaptive cross window (``algorithm.cross_window``)      |

With the default minibatch (B·G/2 sequences, in whole prompt groups), a learner's optimizer steps per
training step depend only on its answers per prompt: N·G for hacpo with N agents and for gspo-x<N> alike
(2N steps when 2N divides B), G for gspo (2 steps). naive and imitation train on hacpo's rows in hacpo's
minibatches (an other agent's answer that imitation does not imitate still sits in its minibatch, contributing
nothing), so they make as many optimizer steps as hacpo. So the baseline that matches N-agent hacpo's rollouts
per agent *and* updates is gspo-x<N> (gspo2x for N = 2, the paper's); gspo matches its rollouts only.

Every loss of ``hacrl.core.POLICY_LOSSES`` takes the same inputs and settings; ``cross_as_own`` and
``token_level`` only say what the learner puts into them. The clip radii ε_low / ε_high are ``algorithm.clip_low`` / ``clip_high``, whose default
depends on the algorithm (``hacrl.config.CLIP_DEFAULTS``: GSPO's 3e-4 / 4e-4, grpo 0.2 / 0.28).
"""

from __future__ import annotations

from dataclasses import dataclass

from hacrl.config import Config, Derived, derive
from hacrl.registry import Registry


@dataclass(frozen=True)
class Algorithm:
    name: str
    shares_pool: bool  # learners see the other agents' answers
    # "hacpo" (capability-aware, per learner), "group" (plain, over what the learner sees) or "own" (plain, over
    # the learner's own answers; 0 on the others')
    advantage: str
    loss: str  # "hacpo", "gspo", "grpo" or "imitation" (hacrl.core.POLICY_LOSSES)
    rollout_multiplier: int = 1
    capability_aware: bool = True
    use_omega: bool = True
    alpha_zero: bool = False
    stepwise: bool = True
    cross_clip: bool = True
    cross_as_own: bool = False  # other agents' answers train as the learner's own (naive): KL on them too
    token_level: bool = False  # the loss needs π_old per token (own rollout log-probs), not just its mean
    adaptive_window: bool = False  # ℓ_0 per source from the cross ratios seen (as algorithm.cross_window: adaptive)


ALGORITHMS: Registry[Algorithm] = Registry("algorithm")

for _algo in (
    Algorithm("hacpo", shares_pool=True, advantage="hacpo", loss="hacpo"),
    Algorithm("gspo", shares_pool=False, advantage="group", loss="gspo"),
    Algorithm("gspo2x", shares_pool=False, advantage="group", loss="gspo", rollout_multiplier=2),
    Algorithm("naive", shares_pool=True, advantage="group", loss="gspo", cross_as_own=True),
    Algorithm("grpo", shares_pool=False, advantage="group", loss="grpo", token_level=True),
    Algorithm("imitation", shares_pool=True, advantage="own", loss="imitation", use_omega=False),
    Algorithm("hacpo-noadv", shares_pool=True, advantage="hacpo", loss="hacpo", capability_aware=False),
    Algorithm("hacpo-noomega", shares_pool=True, advantage="hacpo", loss="hacpo", use_omega=False),
    Algorithm("hacpo-alpha0", shares_pool=True, advantage="hacpo", loss="hacpo", alpha_zero=True),
    Algorithm("hacpo-nostep", shares_pool=True, advantage="hacpo", loss="hacpo", stepwise=False),
    Algorithm("hacpo-noclip", shares_pool=True, advantage="hacpo", loss="hacpo", cross_clip=False),
    Algorithm("hacpo-adaptive", shares_pool=True, advantage="hacpo", loss="hacpo", adaptive_window=True),
):
    ALGORITHMS.add(_algo.name, _algo)


def adaptive_window(algo: Algorithm, cross_window: str) -> bool:
    """Whether a run's learners set their cross window adaptively: ``hacpo-adaptive``, or
    ``algorithm.cross_window: adaptive`` with an algorithm that has a cross window (shared pool, HACPO's loss,
    the cross clip on)."""
    has_window = algo.shares_pool and algo.loss == "hacpo" and algo.cross_clip
    return has_window and (algo.adaptive_window or cross_window == "adaptive")


def _gspo_times(n: str) -> Algorithm:
    return Algorithm(f"gspo-x{n}", shares_pool=False, advantage="group", loss="gspo", rollout_multiplier=int(n))


ALGORITHMS.add_family(r"gspo-x(?P<n>[1-9][0-9]?)", "gspo-x<N>", _gspo_times)


def derive_for(cfg: Config) -> Derived:
    """``hacrl.config.derive`` for ``cfg``'s algorithm, as the trainer resolves it once for every worker; for a
    worker built on its own (tests, benchmarks), not through ``hacrl.backends.make_backend``."""
    algo = ALGORITHMS.get(cfg.algorithm.name)
    return derive(cfg, shares_pool=algo.shares_pool, rollout_multiplier=algo.rollout_multiplier, needs_groups=True)
