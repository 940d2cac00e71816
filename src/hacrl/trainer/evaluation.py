"""Each agent alone on held-out problems: greedy accuracy (avg@1) and sampled avg@k / pass@k, with the
per-problem records behind them; and the tables of an evaluation suite (agents x benchmarks, plus the
mean over benchmarks) for ``hacrl eval``.

The totals (``EvalResult``) are eval.jsonl's lines; the per-problem arrays (``ProblemRecords``) are
eval_problems.jsonl's, one line per (step, agent, suite), so that paired per-problem tests are possible.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hacrl.agents.agent import Agent
from hacrl.config import Config, ConfigError
from hacrl.errors import InputError
from hacrl.rewards import RewardScorer
from hacrl.rollout.base import RolloutEngine, SamplingParams, generate_answers
from hacrl.types import Problem, Trajectory


@dataclass(frozen=True)
class EvalResult:
    agent: str
    n: int
    greedy_acc: float
    sampled_avg: float | None = None  # mean reward over k samples per problem (avg@k)
    sampled_pass: float | None = None  # fraction of problems with at least one correct sample (pass@k)
    k: int = 0
    unscorable: int = 0

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class ProblemRecords:
    """One agent's evaluation on one suite, problem by problem, in evaluation order.

    Attributes:
        ids: each problem's ``Problem.id``.
        reward: the greedy answer's reward; an unscorable answer counts 0.0.
        unscorable: indices into ``ids`` whose greedy answer was unscorable (the reward function said None).
        finished: the greedy answer ended with the agent's EOS before ``max_new_tokens``.
        tokens: the greedy answer's token count in the agent's own tokenizer (EOS included when finished,
            as the training answers' ``num_tokens``).
        texts: the greedy answer texts of the first ``texts`` problems only (``trainer.eval_texts``).
        sampled: with k sampled answers per problem, their k rewards (unscorable: 0.0); else None.
        sampled_finished: the finished flag of each sampled answer; else None.
    """

    ids: list[str]
    reward: list[float]
    unscorable: list[int]
    finished: list[bool]
    tokens: list[int]
    texts: list[str]
    sampled: list[list[float]] | None = None
    sampled_finished: list[list[bool]] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record's arrays in eval_problems.jsonl's order; the sampled ones only when there are some."""
        out: dict[str, Any] = {"ids": self.ids, "reward": self.reward, "unscorable": self.unscorable,
                               "finished": self.finished, "tokens": self.tokens}
        if self.sampled is not None:
            out["sampled"], out["sampled_finished"] = self.sampled, self.sampled_finished
        out["texts"] = self.texts
        return out


def evaluate_agent(
    agent: Agent,
    problems: Sequence[Problem],
    score: Callable[[list[str], list[Problem]], Any],
    engine: RolloutEngine,
    *,
    max_new_tokens: int,
    k: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    batch_size: int = 256,
) -> EvalResult:
    """Greedy avg@1, and if ``k > 0`` sampled avg@k and pass@k. Unscorable answers count as wrong.

    ``score(texts, problems)`` returns an object with ``.rewards`` (e.g. ``RewardScorer.score``'s result).
    ``evaluate_agent_problems`` also returns the per-problem records.
    """
    return evaluate_agent_problems(agent, problems, score, engine, max_new_tokens=max_new_tokens, k=k,
                                   temperature=temperature, top_p=top_p, batch_size=batch_size)[0]


def evaluate_agent_problems(
    agent: Agent,
    problems: Sequence[Problem],
    score: Callable[[list[str], list[Problem]], Any],
    engine: RolloutEngine,
    *,
    max_new_tokens: int,
    k: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    batch_size: int = 256,
    texts: int = 0,
) -> tuple[EvalResult, ProblemRecords]:
    """``evaluate_agent``'s totals and the per-problem records (the first ``texts`` answer texts kept)."""
    prompts = [p.prompt for p in problems]

    def answers(params: SamplingParams) -> list[Trajectory]:
        return generate_answers(agent, engine, prompts, params, batch_size=batch_size)  # the workers' path too

    greedy = answers(SamplingParams(n=1, max_new_tokens=max_new_tokens, greedy=True))
    sampled = answers(SamplingParams(n=k, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)) \
        if k > 0 else None
    return score_answers(agent.id, problems, greedy, score, sampled=sampled, k=k, texts=texts)


def load_benchmarks(cfg: Config) -> dict[str, tuple[list[Problem], RewardScorer]]:
    """The benchmarks of ``trainer.eval_benchmarks``, each with its first ``trainer.eval_size`` problems and
    a math scorer; a file that cannot be read is a one-line ConfigError naming its setting."""
    from hacrl.data.benchmarks import benchmark_prompts

    out = {}
    for name, path in cfg.trainer.eval_benchmarks.items():
        try:
            problems = benchmark_prompts(name, path, n=cfg.trainer.eval_size)
        except InputError as exc:
            raise ConfigError(f"trainer.eval_benchmarks.{name}: {exc}") from None
        out[name] = (problems, RewardScorer("math", timeout_s=cfg.task.reward_timeout_s))
    return out


def score_answers(
    agent_id: str,
    problems: Sequence[Problem],
    greedy: Sequence[Trajectory],
    score: Callable[[list[str], list[Problem]], Any],
    *,
    sampled: Sequence[Trajectory] | None = None,
    k: int = 0,
    texts: int = 0,
) -> tuple[EvalResult, ProblemRecords]:
    """Score the answers (``prompt_index`` into ``problems``; one greedy answer per problem and, with
    ``sampled``, k per problem): the totals (greedy avg@1, avg@k, pass@k; unscorable answers count as
    wrong) and the per-problem records, which keep the first ``texts`` greedy answer texts."""
    n = len(problems)
    greedy_rows = _by_problem(greedy, problems, score, per=1)
    first = [row[0] for row in greedy_rows]
    records = ProblemRecords(
        ids=[p.id for p in problems], reward=[float(r or 0.0) for _, r in first],
        unscorable=[i for i, (_, r) in enumerate(first) if r is None],
        finished=[a.finished for a, _ in first], tokens=[a.num_tokens for a, _ in first],
        texts=[a.text for a, _ in first[:texts]])
    greedy_acc = sum(records.reward) / max(n, 1)
    if not sampled:
        return EvalResult(agent_id, n, greedy_acc, unscorable=len(records.unscorable)), records
    rows = _by_problem(sampled, problems, score, per=k)
    rewards = [[float(r or 0.0) for _, r in row] for row in rows]
    records = dataclasses.replace(records, sampled=rewards, sampled_finished=[[a.finished for a, _ in row]
                                                                              for row in rows])
    avg = sum(sum(r) / k for r in rewards) / max(n, 1)
    pas = sum(max(r) >= 1.0 for r in rewards) / max(n, 1)
    unscorable = len(records.unscorable) + sum(r is None for row in rows for _, r in row)
    return EvalResult(agent_id, n, greedy_acc, avg, pas, k, unscorable), records


def _by_problem(answers: Sequence[Trajectory], problems: Sequence[Problem],
                score: Callable[[list[str], list[Problem]], Any], *, per: int
                ) -> list[list[tuple[Trajectory, float | None]]]:
    """Score ``answers`` in one call; per problem, its ``per`` answers with their rewards, in answer order."""
    out: list[list[tuple[Trajectory, float | None]]] = [[] for _ in problems]
    rewards = score([a.text for a in answers], [problems[a.prompt_index] for a in answers]).rewards
    for a, r in zip(answers, rewards, strict=True):
        out[a.prompt_index].append((a, r))
    counts = sorted({len(row) for row in out})
    if counts not in ([], [per]):
        raise ValueError(f"expected {per} answer(s) per problem, got between {counts[0]} and {counts[-1]}")
    return out


# ---- a suite: agents x benchmarks -------------------------------------------------------------------
METRICS = {"greedy_acc": "greedy avg@1", "sampled_avg": "avg@{k}", "sampled_pass": "pass@{k}"}


def suite_tables(records: list[dict], benchmarks: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    """``metric -> agent -> {benchmark: value, "mean": unweighted mean over benchmarks}``.

    ``records`` are ``EvalResult.as_dict()`` rows with a ``benchmark`` key; a metric missing from the
    records (no sampling) is left out.

    >>> rows = [{"agent": "a", "benchmark": "x", "greedy_acc": 0.5}, {"agent": "a", "benchmark": "y", "greedy_acc": 1.0}]
    >>> suite_tables(rows, ["x", "y"])["greedy_acc"]["a"]
    {'x': 0.5, 'y': 1.0, 'mean': 0.75}
    """
    tables: dict[str, dict[str, dict[str, float]]] = {}
    for metric in METRICS:
        rows = [r for r in records if metric in r]
        if not rows:
            continue
        table: dict[str, dict[str, float]] = {}
        for r in rows:
            table.setdefault(r["agent"], {})[r["benchmark"]] = float(r[metric])
        for values in table.values():
            done = [values[b] for b in benchmarks if b in values]
            values["mean"] = sum(done) / len(done) if done else float("nan")
        tables[metric] = table
    return tables


def markdown_table(table: dict[str, dict[str, float]], benchmarks: list[str], title: str) -> str:
    """One markdown table: a row per agent, a column per benchmark, then the mean."""
    cols = [*benchmarks, "mean"]
    lines = [f"| {title} | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for agent, values in table.items():
        cells = [f"{values[c]:.3f}" if c in values else "-" for c in cols]
        lines.append(f"| {agent} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
