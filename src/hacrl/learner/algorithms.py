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
| hacpo-capbase   | as hacpo              | ω ≤ 1 in the baseline: a weaker partner's successes     |
|                 |                       | count once there, never ω > 1 times (ours)              |
| hacpo-noomega   | as hacpo              | ω = 1 in the update, kept in the baseline ("−ω")        |
| hacpo-alpha0    | as hacpo              | α = 0 (no exponential IS)                               |
| hacpo-nostep    | as hacpo              | fixed cross window [1−δ, 1] ("no Stepwise")             |
| hacpo-noclip    | as hacpo              | no cross clipping at all ("no Clip")                    |
| hacpo-adaptive  | as hacpo              | adaptive cross window (``algorithm.cross_window``)      |
| naive-recompute | G per agent, shared   | naive with the others' π_old from the learner's own     |
|                 |                       | pre-update pass (ratio 1 at the first minibatch)        |
| sgt             | G per agent, shared   | own G with GSPO + λ·NLL of ONE correct partner answer,  |
|                 |                       | only where all own answers failed and a partner solved  |
| luffy           | G per agent, shared   | own G with GSPO + LUFFY's shaping f(π) = π/(π+γ) on the |
|                 |                       | partners' correct answers, joint-group mean advantage   |
| ftis            | G per agent, shared   | own G with GSPO + min(s, C)·A on partner answers, a KL  |
|                 |                       | veto on their negatives                                 |
| gated-group     | G per agent, shared   | on prompts the learner failed and a partner's group is  |
|                 |                       | mixed: that whole group, its own advantages, GRAFT's    |
|                 |                       | gate 1[s > 0.8]·min(s, 1), ratio to the learner's π_old |
| trust           | G per agent, shared   | naive's pool, each partner's answers weighted by the    |
|                 |                       | learner's trust τ_j in it and cut below s = 0.1^τ_j; τ_j|
|                 |                       | falls to 0 when a validation check shows harm (ours)    |

With the default minibatch (B·G/2 sequences, in whole prompt groups), a learner's optimizer steps per
training step depend only on its answers per prompt: N·G for hacpo with N agents and for gspo-x<N> alike
(2N steps when 2N divides B), G for gspo (2 steps). naive and imitation train on hacpo's rows in hacpo's
minibatches (an other agent's answer that imitation does not imitate still sits in its minibatch, contributing
nothing), so they make as many optimizer steps as hacpo. So the baseline that matches N-agent hacpo's rollouts
per agent *and* updates is gspo-x<N> (gspo2x for N = 2, the paper's); gspo matches its rollouts only.

Every loss of ``hacrl.core.POLICY_LOSSES`` takes the same inputs and settings; ``cross_as_own`` and
``token_level`` only say what the learner puts into them. The clip radii ε_low / ε_high are ``algorithm.clip_low`` / ``clip_high``, whose default
depends on the algorithm (``hacrl.config.CLIP_DEFAULTS``: GSPO's 3e-4 / 4e-4, grpo 0.2 / 0.28).

**Ingredients** (docs/methods.md). The ways of learning from a partner's answers differ in six independent
choices, each a field of ``Algorithm`` and a config key ``algorithm.<field>`` (None there: the named method's
own), so that ``--algos hacpo@share_prompts=learner_failed`` composes a variant (``compose``):

- ``share_prompts``: which prompts' partner answers the learner sees (``hacrl.learner.sharing.PROMPT_GATES``);
- ``partner_answers``: which of a shared prompt's partner answers (``sharing.ANSWER_SELECTIONS``);
- ``partner_old``: π_old of a partner row: author (its rollout log-prob), learner (the learner's own pre-update
  pass, ``recompute_partner_old``) or none (a term without a ratio);
- ``partner_weight``: how a partner row is weighted, which picks the loss (``PARTNER_WEIGHT_LOSS``: hacpo, gspo
  for ratio, imitation for nll, the partner loss of ``hacrl.core.partner`` for the others);
- ``advantage``: the advantage (``sharing.ADVANTAGES``);
- ``negatives``: the partner loss's filter of negative partner rows (``hacrl.core.partner.NEGATIVE_FILTERS``).

The values each takes are listed once, in the config schema (``AlgorithmConfig``'s Literal types, which
``hacrl presets --fields`` shows with their meaning); ``INGREDIENTS`` reads them from there, and each registry
above implements exactly those (tests/learner/test_ingredient_values.py).

**Display.** Each method that learns from a partner holds a ``display_slot``: its place in the methods' order and
its colour in every picture that colours by method (``method_colours``; bench/mechanism.py). Slots are
append-only: a new method takes the next free one, so no other method's colour moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, get_args

from hacrl.config import AlgorithmConfig, Config, Derived, derive
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
    # the ingredients (module docstring, docs/methods.md); the defaults are hacpo's
    share_prompts: str = "all"  # which prompts' partner answers the learner sees (sharing.PROMPT_GATES)
    partner_answers: str = "group"  # which of a shared prompt's partner answers (sharing.ANSWER_SELECTIONS)
    partner_old: str = "author"  # π_old of a partner row: "author", "learner" (recomputed) or "none"
    partner_weight: str = "hacpo"  # how a partner answer is weighted (PARTNER_WEIGHT_LOSS)
    negatives: str = "keep"  # the partner loss's filter of negative partner rows (core.partner.NEGATIVE_FILTERS)
    # how plots show it, not how it trains (so not compared): its place in the methods' order and its colour
    # (PALETTE[display_slot], method_colours); append-only, a new method takes the next free slot
    display_slot: int | None = field(default=None, compare=False)


# partner_weight → (loss, cross_as_own): the policy loss that implements each way of weighting a partner answer
PARTNER_WEIGHT_LOSS: dict[str, tuple[str, bool]] = {
    "hacpo": ("hacpo", False), "ratio": ("gspo", True), "nll": ("imitation", False),
    "truncated_is": ("partner", False), "gate": ("partner", False), "shaping": ("partner", False),
    "trust": ("partner", False)}
# partner_weight → the π_old it reads when partner_old is not given: a term without a ratio reads none, the gate the
# learner's own pre-update pass (its PPO ratio and its gate both need it), the others the author's
IMPLIED_PARTNER_OLD = {"nll": "none", "shaping": "none", "gate": "learner"}


def accepted_values(key: str) -> tuple[str, ...]:
    """The values the config accepts for ``algorithm.<key>``: its Literal in ``AlgorithmConfig``.

    >>> accepted_values("negatives")
    ('keep', 'drop', 'veto')
    """
    annotation = AlgorithmConfig.model_fields[key].annotation
    (literal,) = [a for a in get_args(annotation) if a is not type(None)]
    return get_args(literal)


# the ingredients and their values, read from the config schema: the one list of them (module docstring)
INGREDIENTS: dict[str, tuple[str, ...]] = {key: accepted_values(key) for key in (
    "share_prompts", "partner_answers", "partner_old", "partner_weight", "advantage", "negatives")}


ALGORITHMS: Registry[Algorithm] = Registry("algorithm")

for _algo in (
    Algorithm("hacpo", shares_pool=True, advantage="hacpo", loss="hacpo", display_slot=0),
    Algorithm("gspo", shares_pool=False, advantage="group", loss="gspo"),
    Algorithm("gspo2x", shares_pool=False, advantage="group", loss="gspo", rollout_multiplier=2),
    Algorithm("naive", shares_pool=True, advantage="group", loss="gspo", cross_as_own=True,
              partner_weight="ratio", display_slot=1),
    Algorithm("grpo", shares_pool=False, advantage="group", loss="grpo", token_level=True),
    Algorithm("imitation", shares_pool=True, advantage="own", loss="imitation", use_omega=False,
              partner_old="none", partner_weight="nll", display_slot=2),
    Algorithm("hacpo-noadv", shares_pool=True, advantage="hacpo", loss="hacpo", capability_aware=False, display_slot=10),
    # HACPO with ω^(k,j) capped at 1 in the baseline only (docs/results.md §12.12): ω > 1 counts a weaker partner's
    # successes more than once in a stronger learner's baseline, which lowers its own right answers' advantage
    Algorithm("hacpo-capbase", shares_pool=True, advantage="hacpo_capped", loss="hacpo", display_slot=14),
    Algorithm("hacpo-noomega", shares_pool=True, advantage="hacpo", loss="hacpo", use_omega=False, display_slot=9),
    Algorithm("hacpo-alpha0", shares_pool=True, advantage="hacpo", loss="hacpo", alpha_zero=True, display_slot=11),
    Algorithm("hacpo-nostep", shares_pool=True, advantage="hacpo", loss="hacpo", stepwise=False, display_slot=13),
    Algorithm("hacpo-noclip", shares_pool=True, advantage="hacpo", loss="hacpo", cross_clip=False, display_slot=12),
    Algorithm("hacpo-adaptive", shares_pool=True, advantage="hacpo", loss="hacpo", adaptive_window=True, display_slot=8),
    # naive with partner rows' π_old from the learner's own pre-update pass (the paper's naive as verl would run it)
    Algorithm("naive-recompute", shares_pool=True, advantage="group", loss="gspo", cross_as_own=True,
              partner_old="learner", partner_weight="ratio", display_slot=6),
    # Success-Gated Transfer (Mutual RL, second-hand): imitation of ONE correct partner answer, λ 0.1, only where
    # the learner failed every answer and a partner solved the prompt
    Algorithm("sgt", shares_pool=True, advantage="own", loss="imitation", use_omega=False,
              share_prompts="learner_failed_partner_solved", partner_answers="one_correct", partner_old="none",
              partner_weight="nll", display_slot=5),
    # LUFFY: the partners' correct answers in the joint group (mean, no std: its released script), trained with
    # the shaping f(π) = π/(π + γ) per token, no ratio
    Algorithm("luffy", shares_pool=True, advantage="group_mean", loss="partner", use_omega=False,
              partner_answers="correct", partner_old="none", partner_weight="shaping", display_slot=4),
    # F-TIS: truncated IS min(s, C) against the author on partner answers, the joint group's advantage, a KL veto
    # on the negative ones
    Algorithm("ftis", shares_pool=True, advantage="group", loss="partner", use_omega=False,
              partner_weight="truncated_is", negatives="veto", display_slot=3),
    # GRAFT-like (second-hand): prompts the learner failed where a partner's group is mixed, that whole group with
    # its own advantages, the fixed gate 1[s > 0.8]·min(s, 1), a ratio to the learner's own π_old
    Algorithm("gated-group", shares_pool=True, advantage="partner", loss="partner", use_omega=False,
              share_prompts="learner_failed_partner_mixed", partner_old="learner", partner_weight="gate", display_slot=7),
    # trust (ours, hacrl.core.trust): naive's pool with each partner's answers weighted by the learner's trust τ_j in
    # that partner, cut below the ratio floor 0.1^τ_j, and weighted by τ_j in the joint group's baseline; τ_j drops
    # to 0 when the learner's accuracy on a validation slice of the training split falls (a paired test) and
    # climbs back after each check without a fall
    Algorithm("trust", shares_pool=True, advantage="trust", loss="partner", use_omega=False,
              partner_weight="trust", display_slot=15),
):
    ALGORITHMS.add(_algo.name, _algo)


def has_cross_window(algo: Algorithm) -> bool:
    """Whether ``algo``'s loss clips partner answers to a cross window, the only loss that reads ``cross_lower``
    (shared pool, HACPO's loss, the cross clip on)."""
    return algo.shares_pool and algo.loss == "hacpo" and algo.cross_clip


def adaptive_window(algo: Algorithm, cross_window: str) -> bool:
    """Whether a run's learners set their cross window adaptively: ``hacpo-adaptive``, or
    ``algorithm.cross_window: adaptive`` with an algorithm that has a cross window (``has_cross_window``; without
    one there is no window to adapt, and none is kept). ``algo`` is the run's composed algorithm (``resolve``)."""
    return has_cross_window(algo) and (algo.adaptive_window or cross_window == "adaptive")


def uses_trust(algo: Algorithm) -> bool:
    """Whether the learners of ``algo`` hold a trust per partner (``hacrl.learner.trust``): the ``trust`` weight
    or the ``trust`` advantage, which read it; the trainer then runs the validation checks that move it."""
    return algo.shares_pool and (algo.partner_weight == "trust" or algo.advantage == "trust")


def _gspo_times(n: str) -> Algorithm:
    return Algorithm(f"gspo-x{n}", shares_pool=False, advantage="group", loss="gspo", rollout_multiplier=int(n))


ALGORITHMS.add_family(r"gspo-x(?P<n>[1-9][0-9]?)", "gspo-x<N>", _gspo_times)

# the colour of display slot i: matplotlib's tab20, its dark shades first (tab10's colours), then its light ones
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
           "#dbdb8d", "#9edae5")


def method_colours(names: Sequence[str]) -> dict[str, str]:
    """One colour per method, the same in every picture whichever others it draws: a registered method with a
    ``display_slot`` gets its slot's; a variant (``name@key=value``), or a method without a slot, takes a slot from
    the last one down, in the order given. Distinct for up to 20 methods in one picture.

    >>> method_colours(["hacpo", "hacpo@algorithm.delta=0.3", "naive"])
    {'hacpo': '#1f77b4', 'hacpo@algorithm.delta=0.3': '#9edae5', 'naive': '#ff7f0e'}
    """
    slots = {name: ALGORITHMS.get(name).display_slot if name in ALGORITHMS else None for name in names}
    others = [name for name in names if slots[name] is None]
    slots |= {name: (len(PALETTE) - 1 - i) % len(PALETTE) for i, name in enumerate(others)}
    return {name: PALETTE[slot] for name, slot in slots.items() if slot is not None}


def compose(algo: Algorithm, **ingredients: str | None) -> Algorithm:
    """``algo`` with some ingredients replaced (None: keep its own), its loss following ``partner_weight``
    (``PARTNER_WEIGHT_LOSS``) and its ``partner_old`` following the weight where not given
    (``IMPLIED_PARTNER_OLD``). Raises ValueError, one line naming the ``algorithm.<field>`` at fault, for an
    unknown value or a combination the loss cannot run."""
    given = {k: v for k, v in ingredients.items() if v is not None}
    for key, value in given.items():
        if key not in INGREDIENTS:
            raise ValueError(f"algorithm.{key}: not an ingredient; valid: {', '.join(INGREDIENTS)}")
        if value not in INGREDIENTS[key]:
            raise ValueError(f"algorithm.{key}={value!r}: valid values: {', '.join(INGREDIENTS[key])}")
    if not given:
        return algo
    if not algo.shares_pool:
        raise ValueError(f"algorithm.{next(iter(given))}: {algo.name} trains on its own answers only; compose "
                         "from an algorithm that shares the pool (hacpo, naive, imitation, ...)")
    changes: dict[str, Any] = dict(given)
    if "partner_weight" in given:
        changes["loss"], changes["cross_as_own"] = PARTNER_WEIGHT_LOSS[given["partner_weight"]]
        if "partner_old" not in given:
            changes["partner_old"] = IMPLIED_PARTNER_OLD.get(given["partner_weight"], "author")
    out = replace(algo, **changes)
    check_ingredients(out)
    return out


def check_ingredients(algo: Algorithm) -> None:
    """Raise ValueError (one line) where the ingredients of ``algo`` do not fit together."""
    no_ratio = algo.partner_weight in ("nll", "shaping")
    if no_ratio != (algo.partner_old == "none"):
        raise ValueError(f"algorithm.partner_old={algo.partner_old}: partner_weight={algo.partner_weight} "
                         + ("has no ratio, so partner_old must be none" if no_ratio else "needs author or learner"))
    if algo.partner_weight == "gate" and algo.partner_old != "learner":
        raise ValueError("algorithm.partner_old: partner_weight=gate needs partner_old=learner (its ratio and gate)")
    if algo.negatives != "keep" and algo.loss != "partner":
        raise ValueError(f"algorithm.negatives={algo.negatives}: only the partner loss filters negatives "
                         "(partner_weight truncated_is, gate or shaping)")
    if algo.adaptive_window and not has_cross_window(algo):  # its one difference from hacpo would be dropped
        raise ValueError(f"algorithm.partner_weight={algo.partner_weight}: {algo.name} adapts HACPO's cross window, "
                         f"which the {algo.loss} loss does not have; leave partner_weight out or compose from hacpo")


def resolve(a: AlgorithmConfig) -> Algorithm:
    """The run's algorithm: ``algorithm.name``'s, with the ingredients the config sets (``compose``). The one
    lookup of a run's algorithm: its readers (trainer, workers, window, plan, report) take this, never the bare
    name's, which would ignore the ingredients. Raises KeyError (unknown name) or ValueError (``compose``)."""
    return compose(ALGORITHMS.get(a.name), **{k: getattr(a, k) for k in INGREDIENTS})


def check_run(cfg: Config, algo: Algorithm) -> None:
    """Raise ValueError (one line naming the key) where the run's other settings do not fit its resolved
    ``algo``: trust's checks need the lock-step mode, ``algorithm.trust_budget``, ``trust_mean``,
    ``trust_baseline``, ``trust_cut`` and ``trust_cut_to`` need a trust to read, and ``trust_cut_to`` needs a
    cut (and no budget, which reads a trust the switched learner no longer uses). The trainer, ``hacrl train
    --check`` (through ``derive_for``) and ``hacrl compare`` (every arm) call it, before any model loads."""
    a = cfg.algorithm
    if uses_trust(algo) and cfg.trainer.mode == "async":
        raise ValueError("trainer.mode=async: trust reads lock-step validation checks; set trainer.mode=lockstep")
    if uses_trust(algo) and a.trust_cut_to != "alone":
        if a.trust_cut <= 0:
            raise ValueError(f"algorithm.trust_cut_to={a.trust_cut_to}: nothing is ever cut with trust_cut 0; set "
                             "algorithm.trust_cut (e.g. 0.5) or drop trust_cut_to")
        if a.trust_budget:
            raise ValueError(f"algorithm.trust_budget: a learner switched to {a.trust_cut_to} no longer weighs its "
                             "partners by trust, which the budget reads; drop trust_budget or trust_cut_to")
    if uses_trust(algo):
        return
    needs_trust = (  # (key, set away from its default, the value as the message shows it, what the trust is for)
        ("trust_budget", a.trust_budget, "", " to move the budget by"),
        ("trust_mean", a.trust_mean != "all", f"={a.trust_mean}", ""),
        ("trust_baseline", a.trust_baseline != "tau", f"={a.trust_baseline}", ""),
        ("trust_cut", a.trust_cut > 0, f"={a.trust_cut}", " to cut"),
        ("trust_cut_to", a.trust_cut_to != "alone", f"={a.trust_cut_to}", " to cut"),
    )
    for key, is_set, shown, purpose in needs_trust:
        if is_set:
            raise ValueError(f"algorithm.{key}{shown}: {a.name} holds no trust{purpose}; set algorithm.name=trust "
                             f"or drop {key}")


def derive_for(cfg: Config) -> Derived:
    """``hacrl.config.derive`` for ``cfg``'s algorithm, as the trainer resolves it once for every worker; for a
    worker built on its own (tests, benchmarks), not through ``hacrl.backends.make_backend``. Also
    :func:`check_run`."""
    algo = resolve(cfg.algorithm)
    check_run(cfg, algo)
    return derive(cfg, shares_pool=algo.shares_pool, rollout_multiplier=algo.rollout_multiplier, needs_groups=True)
