"""Each agent alone on held-out problems: greedy accuracy (avg@1) and sampled avg@k / pass@k; and the
tables of an evaluation suite (agents x benchmarks, plus the mean over benchmarks) for ``hacrl eval``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hacrl.agents.agent import Agent
from hacrl.rollout.base import RolloutEngine, SamplingParams
from hacrl.types import Problem


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
    """
    prompts = [agent.render_prompt(p.prompt) for p in problems]

    def answers(params: SamplingParams) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        for start in range(0, len(prompts), batch_size):
            samples = engine.generate(agent, prompts[start : start + batch_size], params)
            texts = agent.decode_answers([list(s.token_ids) for s in samples])
            out.extend((start + s.prompt_index, text) for s, text in zip(samples, texts, strict=True))
        return out

    greedy = answers(SamplingParams(n=1, max_new_tokens=max_new_tokens, greedy=True))
    sampled = answers(SamplingParams(n=k, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)) \
        if k > 0 else None
    return score_answers(agent.id, problems, greedy, score, sampled=sampled, k=k)


def score_answers(
    agent_id: str,
    problems: Sequence[Problem],
    greedy: list[tuple[int, str]],
    score: Callable[[list[str], list[Problem]], Any],
    *,
    sampled: list[tuple[int, str]] | None = None,
    k: int = 0,
) -> EvalResult:
    """Score ``(problem index, answer text)`` pairs: greedy avg@1, and with ``sampled`` (k per problem)
    avg@k and pass@k. Unscorable answers count as wrong."""
    unscorable = 0

    def per_problem(answers: list[tuple[int, str]]) -> list[list[float]]:
        nonlocal unscorable
        out: list[list[float]] = [[] for _ in problems]
        rewards = score([text for _, text in answers], [problems[i] for i, _ in answers]).rewards
        for (i, _), r in zip(answers, rewards, strict=True):
            unscorable += r is None
            out[i].append(float(r or 0.0))
        return out

    greedy_acc = sum(r[0] for r in per_problem(greedy)) / max(len(problems), 1)
    if not sampled:
        return EvalResult(agent_id, len(problems), greedy_acc, unscorable=unscorable)
    rows = per_problem(sampled)
    avg = sum(sum(r) / k for r in rows) / max(len(problems), 1)
    pas = sum(max(r) >= 1.0 for r in rows) / max(len(problems), 1)
    return EvalResult(agent_id, len(problems), greedy_acc, avg, pas, k, unscorable)


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
