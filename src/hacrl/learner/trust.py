"""One learner's trust in each partner (the ``trust`` method; the rule is ``hacrl.core.trust``), held by the
learner's own worker as the adaptive window is (``hacrl.learner.window``).

The trainer runs a validation check every ``algorithm.trust_every`` steps (before steps 1, 1 + k, ...; none once
every learner has cut every partner, ``Trainer.checks_over``) and hands each worker its agent's per-problem results
in the update request; the worker feeds them to its ``LearnerTrust`` before the update, which then weighs each
partner's answers by τ and cuts them below the ratio floor (``learn``'s ``trust``). What it decided goes to the
metrics, per partner and step (the trainer prefixes ``agent/<learner id>/``): ``trust/<partner id>`` (τ used in this
update), ``trust_floor/<partner id>`` (ℓ), ``trust_kept/<partner id>`` (the share of that partner's answers whose
ratio was at or above ℓ: those that trained), ``trust_usable/<partner id>`` (τ × that share: what one of its answers
was worth to this learner, which the rollout budget reads, ``algorithm.trust_budget``),
``trust_baseline/<partner id>`` (its weight in the joint group's baseline: τ, or with ``algorithm.trust_baseline:
usable`` τ × the share the previous update kept), and on a check ``val/acc``, ``val/wins``, ``val/losses`` (against
the reference check) and ``val/harm`` (1 when the rule cut the trust); with ``algorithm.trust_cut``,
``trust_rbar/<partner id>`` (r̄ so far, over the first ``trust_cut_steps`` updates) and ``trust_cut/<partner id>``
(1 once that partner is cut for good). With ``algorithm.trust_cut_to: hacpo``, a learner whose every partner is cut
trains from its next update on with HACPO's four corrections on the whole pool instead of alone (``switched``; the
worker picks the algorithm), and logs ``trust_switch/<partner id>`` (1 from then on). With several partners it
switches only once all are cut; until then a cut partner's answers weigh τ 0 (its stated limit: one update has one
loss). The state lives in the agent's checkpoint folder (``TRUST_FILE``), so a resumed run goes on with the same
trust and reference (and, being cut for good, switched).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from hacrl.config import Config
from hacrl.core.trust import TrustRule, TrustState, kept_shares
from hacrl.learner.algorithms import ALGORITHMS, Algorithm, uses_trust
from hacrl.run.files import write_atomic

TRUST_FILE = "trust.json"
# algorithm.trust_cut_to → the algorithm a learner trains with once every partner of it is cut: the registry's,
# without the run's ingredients. "alone", the default, is no switch: trust with every τ 0, the learner's own answers
CUT_TO: dict[str, Algorithm] = {"hacpo": ALGORITHMS.get("hacpo")}


class LearnerTrust:
    """Learner ``learner``'s trust in the agents ``ids`` (``TrustState``) and the metrics it logs."""

    def __init__(self, learner: int, ids: list[str], rule: TrustRule, baseline: str = "tau",
                 cut_to: str = "alone") -> None:
        if baseline not in ("tau", "usable"):
            raise ValueError(f"trust baseline must be tau or usable, got {baseline!r}")
        if cut_to != "alone" and cut_to not in CUT_TO:
            raise ValueError(f"trust cut_to must be one of {', '.join(['alone', *CUT_TO])}, got {cut_to!r}")
        self.ids = list(ids)
        self.state = TrustState(learner, len(ids), rule)
        self.baseline_mode = baseline
        self.cut_to = cut_to
        self.last_kept = [1.0] * len(ids)  # per source: the share the previous update's floor kept (1: none yet)

    @classmethod
    def for_run(cls, cfg: Config, learner: int, algo: Algorithm) -> LearnerTrust | None:
        """The trust of agent ``learner`` of ``cfg`` under ``algo`` (the run's resolved algorithm); None where
        the algorithm does not read one."""
        if not uses_trust(algo):
            return None
        a = cfg.algorithm
        rule = TrustRule(floor=a.trust_floor, z=a.trust_z, min_drop=a.trust_min_drop, regain=a.trust_regain,
                         cut=a.trust_cut, cut_steps=a.trust_cut_steps)
        return cls(learner, [s.id for s in cfg.agents], rule, a.trust_baseline, a.trust_cut_to)

    def observe(self, correct: Sequence[bool] | None) -> dict[str, float]:
        """A validation check (None: no check this step); its metrics (none for the first, the reference)."""
        if correct is None:
            return {}
        check = self.state.observe(correct)
        out = {"val/acc": sum(bool(c) for c in correct) / max(len(correct), 1)}
        if check is not None:
            out.update({"val/wins": float(check.wins), "val/losses": float(check.losses),
                        "val/harm": float(check.harm)})
        return out

    def switched(self) -> bool:
        """Whether the learner's update runs the algorithm ``CUT_TO[cut_to]`` instead of trust: ``trust_cut_to``
        is not alone and every partner is cut.

        >>> t = LearnerTrust(0, ["a", "b"], TrustRule(cut=0.5, cut_steps=1), cut_to="hacpo")
        >>> t.switched(), t.observe_ratios({1: [0.2]}), t.switched()
        (False, {'trust_rbar/b': 0.2, 'trust_cut/b': 1.0, 'trust_switch/b': 1.0}, True)
        """
        state = self.state
        partners = [j for j in range(state.num_agents) if j != state.learner]
        return self.cut_to != "alone" and bool(partners) and all(state.cut_off[j] for j in partners)

    def settings(self) -> tuple[list[float], list[float]]:
        """τ and ℓ per source agent: ``learn``'s ``trust``."""
        return list(self.state.tau), self.state.floors()

    def baseline(self, tau: Sequence[float]) -> list[float]:
        """Each source's weight in the joint group's baseline (the ``trust`` advantage's): τ, or with
        ``trust_baseline: usable`` τ × the share of that source's answers the floor kept in the previous update
        (the learner's own entry 1).

        >>> t = LearnerTrust(0, ["a", "b"], TrustRule(), "usable")
        >>> t.baseline([1.0, 1.0])
        [1.0, 1.0]
        >>> _ = t.kept([1.0, 1.0], [0.0, 0.1], {1: [0.05, 0.2, 0.01, 0.03]})
        >>> t.baseline([1.0, 0.5])
        [1.0, 0.125]
        """
        if self.baseline_mode == "tau":
            return [float(t) for t in tau]
        return [1.0 if j == self.state.learner else float(t) * self.last_kept[j] for j, t in enumerate(tau)]

    def metrics(self, tau: Sequence[float], floors: Sequence[float]) -> dict[str, float]:
        """The τ, ℓ and baseline weight an update used, per partner."""
        out = {}
        baseline = self.baseline(tau)
        for j, source_id in enumerate(self.ids):
            if j != self.state.learner:
                out[f"trust/{source_id}"] = float(tau[j])
                out[f"trust_floor/{source_id}"] = float(floors[j])
                out[f"trust_baseline/{source_id}"] = baseline[j]
        return out

    def kept(self, tau: Sequence[float], floors: Sequence[float], ratios: dict[int, list[float]]
             ) -> dict[str, float]:
        """What the update kept of each partner's answers (``ratios``: source → each answer's s as its minibatch
        saw it): ``trust_kept/<id>`` and ``trust_usable/<id>`` = τ × kept; no key for a partner without answers."""
        out = {}
        for j, share in sorted(kept_shares(ratios, floors).items()):
            if j != self.state.learner:
                self.last_kept[j] = share
                out[f"trust_kept/{self.ids[j]}"] = share
                out[f"trust_usable/{self.ids[j]}"] = float(tau[j]) * share
        return out

    def observe_ratios(self, ratios: dict[int, list[float]]) -> dict[str, float]:
        """After an update, its ratios (source → each answer's s) for the cut (``algorithm.trust_cut``):
        ``trust_rbar/<id>`` while r̄ is counted, ``trust_cut/<id>`` every update and, with ``trust_cut_to`` other
        than alone, ``trust_switch/<id>`` (1: the next update trains on that partner's answers with
        ``CUT_TO[cut_to]``); nothing with the cut off."""
        state = self.state
        if state.rule.cut <= 0:
            return {}
        counting = state.updates < state.rule.cut_steps
        state.observe_ratios(ratios)
        out = {}
        for j, source_id in enumerate(self.ids):
            if j == state.learner:
                continue
            rbar = state.rbar(j)
            if counting and rbar is not None:
                out[f"trust_rbar/{source_id}"] = rbar
            out[f"trust_cut/{source_id}"] = float(state.cut_off[j])
        if self.cut_to != "alone":
            switched = float(self.switched())
            out.update({f"trust_switch/{source_id}": switched for j, source_id in enumerate(self.ids)
                        if j != state.learner})
        return out

    def save(self, agent_dir: Path) -> None:
        write_atomic(agent_dir / TRUST_FILE, json.dumps({**self.state.state_dict(), "last_kept": self.last_kept}))

    def restore(self, resume_from: Path, agent_id: str) -> None:
        """From the checkpoint ``resume_from`` (a checkpoint without the file: as new)."""
        path = resume_from / "agents" / agent_id / TRUST_FILE
        if path.is_file():
            state = json.loads(path.read_text())
            kept = [float(x) for x in state.pop("last_kept", [1.0] * len(self.ids))]  # older checkpoints: none
            if len(kept) != len(self.ids):
                raise ValueError(f"trust state is for {len(kept)} agents, this run has {len(self.ids)}")
            self.state.load_state_dict(state)
            self.last_kept = kept
