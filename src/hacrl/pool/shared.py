"""The asynchronous mode's shared pool (docs/async.md): every answer after scoring with its prompt, its
source (the agent that wrote it), the source's policy version and its log-prob sum, kept across rounds until each learner has used it
once or it has expired for that learner.

Agents add their scored answers as they finish a round and take what their next update may use: their own
unused answers within the staleness bound and the other agents' answers to the same prompts within it
(``hacrl.core.select_within_bound`` decides; the versions and the staleness rule are in
``hacrl.core.staleness``).
A take is handed to the update as the step's ``TrajectoryPool`` (``PoolTake.trajectory_pool``), so the update
code is the lock-step trainer's. Every added answer is, for every learner, exactly one of: used (once),
expired, pending (``SharedPool.accounting``). Pure Python with torch for the selection: no Ray, no models; the
Ray loop holds one and reaches it through messages.

Prompt ids are the prompts' positions in the run's training stream: unique, ordered as the data, and what a
checkpoint's data position counts. A round's answers arrive as a worker returns them (``Trajectory`` with
``prompt_index`` into the round's batch) and are stored as they came, their prompt id beside them
(``PooledAnswer.prompt``); a take hands them to the update with ``prompt_index`` = the group index.

Run the tests: ``OMP_NUM_THREADS=1 python -m pytest -q tests/pool/test_shared_pool.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hacrl.core.staleness import SELECTION_REASONS, select_within_bound
from hacrl.pool.trajectory import TrajectoryPool
from hacrl.types import Problem, Trajectory


@dataclass(frozen=True)
class PooledAnswer:
    """One scored answer in the shared pool.

    Attributes:
        uid: its place in the order of arrival (unique in the run).
        prompt: the prompt's id (its position in the training stream): the answer's joint group.
        source: the agent that wrote it (``Trajectory.source``).
        version: the source's version that wrote it (its number of updates then).
        trajectory: the answer as its round returned it (text and scalars, its reward; None: unscorable);
            its ``prompt_index`` is its position in that round's batch, not the prompt id.
    """

    uid: int
    prompt: int
    source: int
    version: int
    trajectory: Trajectory

    @property
    def logp_sum(self) -> float:
        return self.trajectory.logp_sum

    @property
    def reward(self) -> float | None:
        return self.trajectory.reward


@dataclass(frozen=True)
class PoolTake:
    """What one update of ``learner`` at ``version`` may use, and what expired for it at that moment.

    Attributes:
        answers: the taken answers in (prompt, source, arrival) order: own ones within the bound, the others'
            within it to the same prompts.
        staleness: per taken answer, ``version`` − the first version of the learner that could take it.
        expired: the answers that went past the bound for this learner now (never to be used by it).
        counts: ``hacrl.core.SELECTION_REASONS`` → how many of the learner's pending answers each reason covered.
        problems: prompt id → problem, for the taken prompts.
    """

    learner: int
    version: int
    answers: tuple[PooledAnswer, ...]
    staleness: tuple[int, ...]
    expired: tuple[PooledAnswer, ...]
    counts: dict[str, int]
    problems: dict[int, Problem]

    @property
    def prompts(self) -> list[int]:
        """The taken prompts' ids, ascending: position i is prompt_index i of ``trajectory_pool``."""
        return sorted({a.prompt for a in self.answers})

    def trajectory_pool(self) -> TrajectoryPool:
        """The take as the step's pool the update code reads: the taken prompts in id order, each answer's
        ``prompt_index`` its prompt's position among them, and on the learner's own answers their
        ``version_gap``, the learner's version now minus the version that wrote them (the staleness correction's
        gap, carried on the answer into the learner's row); 0 on the others'."""
        prompts = self.prompts
        position = {p: i for i, p in enumerate(prompts)}
        trajectories = [dataclasses.replace(a.trajectory, prompt_index=position[a.prompt],
                                            version_gap=self.version - a.version if a.source == self.learner else 0)
                        for a in self.answers]
        return TrajectoryPool([self.problems[p] for p in prompts], trajectories)

    def metrics(self) -> dict[str, float]:
        """Plain numbers to log: the reason counts, ``staleness_mean`` / ``staleness_max`` over the taken answers,
        and per source ``used/<j>`` and ``expired/<j>`` (answers of agent j)."""
        out: dict[str, float] = {k: float(v) for k, v in self.counts.items()}
        out["staleness_mean"] = sum(self.staleness) / max(len(self.staleness), 1)
        out["staleness_max"] = float(max(self.staleness, default=0))
        for key, answers in (("used", self.answers), ("expired", self.expired)):
            for a in answers:
                out[f"{key}/{a.source}"] = out.get(f"{key}/{a.source}", 0.0) + 1.0
        return out


class SharedPool:
    """The answers of ``num_agents`` agents across rounds, with each learner's pending, used and expired ones.

    Per learner k the pool knows its latest version (from its ``add`` and ``take`` calls) and the version of its
    last non-empty take; an answer another agent adds becomes available to k at k's next take: k's version if k
    has not taken at it yet, else the one after (a non-empty take is followed by an update). k's own answers are
    available from the version that wrote them.
    """

    def __init__(self, num_agents: int) -> None:
        if num_agents < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        self.num_agents = num_agents
        self.versions = [0] * num_agents  # the latest version each agent has reported
        self._taken_at: list[int | None] = [None] * num_agents  # the version of each learner's last non-empty take
        self._answers: dict[int, PooledAnswer] = {}  # uid → answer, while some learner still has it pending
        # per learner: uid → the first version of the learner that could take it
        self._pending: list[dict[int, int]] = [{} for _ in range(num_agents)]
        self._problems: dict[int, Problem] = {}  # prompt id → problem, while the pool holds an answer to it
        self._held: dict[int, int] = {}  # prompt id → answers held
        self._next_uid = 0
        self._used = [0] * num_agents
        self._expired = [0] * num_agents

    def __len__(self) -> int:
        """Answers held: those some learner may still use."""
        return len(self._answers)

    def _check_agent(self, agent: int) -> None:
        if not 0 <= agent < self.num_agents:
            raise ValueError(f"agent must lie in [0, {self.num_agents}), got {agent}")

    def _next_take(self, learner: int) -> int:
        v = self.versions[learner]
        return v + 1 if self._taken_at[learner] == v else v

    def add(self, answers: Sequence[Trajectory], *, prompts: Sequence[int], problems: Sequence[Problem],
            version: int) -> list[PooledAnswer]:
        """Add one agent's scored answers of one round, written by its version ``version``.

        Args:
            answers: one source's trajectories after scoring, ``prompt_index`` into ``prompts``;
                unscorable ones (reward None) too: like the lock-step pool's, they are never trained on
                (``TrajectoryPool.scored`` leaves them out) but they say the source answered the prompt, so
                its group forms as in the lock-step trainer.
            prompts: the round's prompt ids, in the order of its batch.
            problems: the round's problems, aligned with ``prompts``.
            version: the source's version that wrote them.

        Returns:
            the pooled answers, in the order given.
        """
        if len(prompts) != len(problems):
            raise ValueError(f"{len(prompts)} prompt ids for {len(problems)} problems")
        if version < 0:
            raise ValueError(f"a version counts updates: >= 0, got {version}")
        sources = {t.source for t in answers}
        if len(sources) > 1:
            raise ValueError(f"add takes one source's answers at a time, got sources {sorted(sources)}")
        for t in answers:  # all checked before any is added
            self._check_agent(t.source)
            if not 0 <= t.prompt_index < len(prompts):
                raise ValueError(f"prompt_index {t.prompt_index} outside the round's {len(prompts)} prompts")
            known = self._problems.get(int(prompts[t.prompt_index]))
            if known is not None and known.id != problems[t.prompt_index].id:
                raise ValueError(f"prompt id {prompts[t.prompt_index]} is {known.id!r} in the pool, "
                                 f"{problems[t.prompt_index].id!r} here")
        out = []
        for t in answers:
            prompt = int(prompts[t.prompt_index])
            self._problems.setdefault(prompt, problems[t.prompt_index])
            self._held[prompt] = self._held.get(prompt, 0) + 1
            answer = PooledAnswer(self._next_uid, prompt, t.source, version, t)
            self._next_uid += 1
            self._answers[answer.uid] = answer
            for k in range(self.num_agents):
                self._pending[k][answer.uid] = version if k == answer.source else self._next_take(k)
            out.append(answer)
        for source in sources:
            self.versions[source] = max(self.versions[source], version)
        return out

    def take(self, learner: int, version: int, bound: int) -> PoolTake:
        """Hand ``learner``'s update at ``version`` what it may use under the staleness ``bound``, and mark it
        used; answers past the bound expire for the learner. A non-empty take must be followed by an update: the
        next take is at a later version."""
        self._check_agent(learner)
        if version < self.versions[learner]:
            raise ValueError(f"learner {learner} takes at version {version}, "
                             f"but has reported {self.versions[learner]}")
        if self._taken_at[learner] == version:
            raise ValueError(f"learner {learner} has already taken at version {version}: update first")
        pending = self._pending[learner]
        answers = [self._answers[u] for u in sorted(pending)]
        take_M, expire_M, stats = select_within_bound(
            learner=learner, learner_version=version, bound=bound,
            author_M=torch.tensor([a.source for a in answers], dtype=torch.long),
            prompt_M=torch.tensor([a.prompt for a in answers], dtype=torch.long),
            available_M=torch.tensor([pending[a.uid] for a in answers], dtype=torch.long))
        taken = [a for a, take in zip(answers, take_M.tolist(), strict=True) if take]
        expired = [a for a, expire in zip(answers, expire_M.tolist(), strict=True) if expire]
        taken.sort(key=lambda a: (a.prompt, a.source, a.uid))
        staleness = tuple(version - pending[a.uid] for a in taken)
        # the selection stands: now mark it
        self.versions[learner] = version
        for a in (*taken, *expired):
            del pending[a.uid]
        self._used[learner] += len(taken)
        self._expired[learner] += len(expired)
        if taken:
            self._taken_at[learner] = version
        problems = {a.prompt: self._problems[a.prompt] for a in taken}
        self._forget([a.uid for a in (*taken, *expired)])
        return PoolTake(learner, version, tuple(taken), staleness, tuple(expired),
                        {k: int(stats[k]) for k in SELECTION_REASONS}, problems)

    def _forget(self, uids: list[int]) -> None:
        """Drop answers no learner has pending any more, and problems no answer holds."""
        for uid in uids:
            if all(uid not in p for p in self._pending):
                prompt = self._answers.pop(uid).prompt
                self._held[prompt] -= 1
                if self._held[prompt] == 0:
                    del self._held[prompt], self._problems[prompt]

    def pending(self, learner: int) -> list[PooledAnswer]:
        """The answers ``learner`` has neither used nor seen expire, in arrival order."""
        self._check_agent(learner)
        return [self._answers[u] for u in sorted(self._pending[learner])]

    def waiting_prompts(self, learner: int, bound: int) -> list[int]:
        """Prompts with other agents' answers that ``learner`` could still use at its next take within ``bound``
        but has no pending answer of its own to, oldest answer first: what it should answer next to join
        those joint groups."""
        self._check_agent(learner)
        pending, next_take = self._pending[learner], self._next_take(learner)
        own = {self._answers[u].prompt for u in pending if self._answers[u].source == learner}
        out: list[int] = []
        for uid in sorted(pending):
            a = self._answers[uid]
            usable = next_take - pending[uid] <= bound
            if usable and a.source != learner and a.prompt not in own and a.prompt not in out:
                out.append(a.prompt)
        return out

    def accounting(self) -> dict[str, Any]:
        """``added`` (answers so far) and per learner ``used``, ``expired`` and ``pending``: for every learner
        used + expired + pending = added."""
        return {"added": self._next_uid, "used": list(self._used), "expired": list(self._expired),
                "pending": [len(p) for p in self._pending]}

    def state_dict(self) -> dict[str, Any]:
        """Everything in flight, as plain lists, numbers and strings (the trainer state of a checkpoint)."""
        return {
            "num_agents": self.num_agents,
            "versions": list(self.versions),
            "taken_at": list(self._taken_at),
            "next_uid": self._next_uid,
            "used": list(self._used),
            "expired": list(self._expired),
            "answers": [{"uid": a.uid, "prompt": a.prompt, "source": a.source, "version": a.version,
                         "trajectory": _plain(dataclasses.asdict(a.trajectory))} for a in self._answers.values()],
            "pending": [sorted([uid, v] for uid, v in p.items()) for p in self._pending],
            "problems": [[prompt, {"id": p.id, "prompt": p.prompt, "answer": p.answer, "meta": dict(p.meta)}]
                         for prompt, p in sorted(self._problems.items())],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["num_agents"] != self.num_agents:
            raise ValueError(f"the pool's checkpoint has {state['num_agents']} agents, this run {self.num_agents}")
        self.versions = [int(v) for v in state["versions"]]
        self._taken_at = [None if v is None else int(v) for v in state["taken_at"]]
        self._next_uid = int(state["next_uid"])
        self._used = [int(n) for n in state["used"]]
        self._expired = [int(n) for n in state["expired"]]
        self._answers = {}
        for a in state["answers"]:
            t = dict(a["trajectory"])
            t["token_ids"], t["token_logps"] = tuple(t["token_ids"]), tuple(t["token_logps"])
            source = a["source"] if "source" in a else a["author"]  # states written before the rename say "author"
            self._answers[int(a["uid"])] = PooledAnswer(int(a["uid"]), int(a["prompt"]), int(source),
                                                        int(a["version"]), Trajectory(**t))
        self._pending = [{int(uid): int(v) for uid, v in p} for p in state["pending"]]
        self._problems = {int(prompt): Problem(p["id"], p["prompt"], p["answer"], dict(p["meta"]))
                          for prompt, p in state["problems"]}
        self._held = {}
        for a in self._answers.values():
            self._held[a.prompt] = self._held.get(a.prompt, 0) + 1


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    """A trajectory's fields with tuples as lists (the state dict holds plain values only)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in record.items()}
