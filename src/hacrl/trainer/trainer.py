"""The HACRL training loop as named phases.

One step: data → rollout (every agent answers the same prompts) → reward → pool → capability →
for each learner: view → advantages → minibatch updates (stepwise index) ; then eval every E steps and
a checkpoint every C steps. Formulas live in ``hacrl.core``; the per-learner arithmetic in ``learner``.

The trainer is the driver: it owns the data, the rewards, the pool, the capability tracker, the logs and
the checkpoint files. Each agent's model and optimizer live in an ``AgentWorker`` (``worker``), in this
process or in a Ray actor (``backends``); only texts and scalars pass between them. The phases around the
workers' calls are ``hacrl.trainer.phases``, shared with the asynchronous loop (``trainer.mode=async``,
``hacrl.trainer.async_loop``, which the trainer drives); ``train`` is one scaffold for both loops.

Run it with ``hacrl train`` (see ``hacrl.cli``) or ``Trainer(cfg, run_dir).train()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import random
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from hacrl.agents.agent import Agent
from hacrl.agents.gguf import check_finetune_overlap
from hacrl.backends import make_backend
from hacrl.config import Config, ConfigError, derive, dump_config, resume_conflict, with_epoch_steps
from hacrl.core import CapabilityTracker
from hacrl.data.factory import build_task, task_scorer
from hacrl.learner.algorithms import check_run, resolve, uses_trust
from hacrl.pool import TrajectoryPool
from hacrl.rewards import ScoreResult
from hacrl.rewards.math_reward import warn_if_no_math_verify
from hacrl.rollout import SamplingParams
from hacrl.run import checkpoint as ckpt
from hacrl.run.files import append_lines, write_atomic
from hacrl.run.provenance import record_provenance
from hacrl.run.signals import stop_signals_to
from hacrl.run.sinks import MultiSink, NullSink, eval_key, read_evals
from hacrl.run.trackers import make_sinks, resolve_loggers
from hacrl.trainer import validation
from hacrl.trainer.async_loop import AsyncLoop, next_multiple
from hacrl.trainer.budget import RolloutBudget
from hacrl.trainer.evaluation import load_benchmarks, score_answers
from hacrl.trainer.phases import (
    DataStream,
    Phases,
    pool_metrics,
    rollout_metrics,
    timed,
)
from hacrl.trainer.reward_checks import warn_if_batch_exceeds_data
from hacrl.trainer.start_eval import Evaluation, start_cache
from hacrl.types import Problem, Trajectory

__all__ = ["StopRequests", "Trainer"]

logger = logging.getLogger(__name__)

Progress = Callable[[int, dict[str, float]], None]  # called with each metrics line's step and metrics
PhaseProgress = Callable[[int, str, float], None]  # called as each phase ends: its step (0: before the first), name, s


class StopRequests:
    """SIGINT and SIGTERM while a loop runs: the first finishes the current step (or cut), checkpoints and stops;
    a second aborts at once (``KeyboardInterrupt`` from wherever the loop is), leaving the last complete
    checkpoint as it was (checkpoints are written whole or not at all)."""

    def __init__(self) -> None:
        self.requested = False

    def request(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.requested:
            raise KeyboardInterrupt(f"aborted at a second {name}; the last complete checkpoint is kept")
        logger.warning("received %s: finishing the current step, then checkpointing (send it again to abort at "
                       "once; the last complete checkpoint is kept)", name)
        self.requested = True

    def installed(self) -> contextlib.AbstractContextManager[None]:
        """The handlers while the block runs (on the main thread only: elsewhere Python cannot install them)."""
        return stop_signals_to(self.request)


class Trainer:
    """N agents trained together on one task. ``resume_from`` is a checkpoint directory."""

    def __init__(self, cfg: Config, run_dir: Path, *, resume_from: Path | None = None,
                 sinks: bool = True) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        try:  # the named algorithm with the ingredients the config sets (algorithm.share_prompts, ...), which must fit
            self.algo = resolve(cfg.algorithm)
            check_run(cfg, self.algo)  # the run's other settings must fit it too (also in hacrl train --check)
        except KeyError as exc:
            raise ConfigError(f"algorithm.name: {exc.args[0]}") from None
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.derived = derive(cfg, shares_pool=self.algo.shares_pool,
                              rollout_multiplier=self.algo.rollout_multiplier, needs_groups=True)
        self.logger_names = resolve_loggers(cfg.run) if sinks else []  # a missing listed logger stops here
        warn_if_no_math_verify(cfg.task, benchmarks=bool(cfg.trainer.eval_benchmarks))
        if cfg.trainer.threads:
            torch.set_num_threads(cfg.trainer.threads)
        self.task = build_task(cfg.task, seed=cfg.run.seed, max_new_tokens=cfg.rollout.max_new_tokens)
        if cfg.task.kind != "dataset":  # a dataset's reader already warned, naming the file
            for reason, count in sorted(getattr(self.task, "skipped", {}).items()):
                logger.warning("task %s: skipped %d items (%s)", self.task.name, count, reason)
        if cfg.trainer.num_train_epochs is not None:  # trainer.steps from the epochs, now the data's size is known
            self.cfg = cfg = with_epoch_steps(cfg, getattr(self.task, "num_train", None), self.task.name)
            logger.info("trainer.num_train_epochs=%g: %d steps", cfg.trainer.num_train_epochs, cfg.trainer.steps)
        num_train = cfg.task.size if cfg.task.kind == "reasoning-gym" else getattr(self.task, "num_train", None)
        warn_if_batch_exceeds_data(cfg.trainer.batch_size, num_train, self.task.name)  # before any model loads
        self.step_idx = 0
        data_pos = 0
        manifest = ckpt.read_manifest(resume_from) if resume_from else None
        if manifest:
            self._check_resume(manifest)
        self._seed_everything(cfg.run.seed)
        self.agent_ids = [a.id for a in cfg.agents]
        self.tracker = CapabilityTracker(len(cfg.agents), window=cfg.algorithm.capability_window)
        self._async_state: dict[str, Any] | None = None  # the asynchronous loop's, from the checkpoint
        # trust's rollout budget (hacrl.trainer.budget): answers per prompt per agent; None: G each
        self.rollout_budget = RolloutBudget.for_run(cfg, self.derived.group_size)
        self.checks_over = False  # trust's checks: True once every learner has cut every partner (no more checks)
        if resume_from:
            data_pos = self._restore(resume_from)
        self.data = DataStream(self.task.name, self.task.train_problems(cfg.run.seed), start=data_pos)
        self.eval_problems = self.task.test_problems(cfg.trainer.eval_size)
        # the trust method's validation slice of the training split (hacrl.trainer.validation); None: no checks
        self.validation = (validation.validation_slice(self.task.train_problems(validation.VALIDATION_SEED),
                                                       cfg.algorithm.trust_val_size) if uses_trust(self.algo) else None)
        self.benchmarks = load_benchmarks(cfg)
        check_finetune_overlap(cfg.agents, self.eval_problems, *(ps for ps, _ in self.benchmarks.values()))
        self.scorer = task_scorer(self.task, cfg.task)
        self.phases = Phases.build(cfg, self.derived, self.scorer.score_problems)
        try:
            self.backend = make_backend(cfg, self.derived, resume_from=resume_from, step=self.step_idx)
        except BaseException:
            self.scorer.close()
            raise
        self._closed = False
        try:
            self.agent_info: list[dict[str, Any]] = self.backend.info()
            if resume_from:
                self._truncate_logs(self.step_idx)
            self.sink = self._make_sinks() if sinks else NullSink()
            record_provenance(run_dir, from_step=self.step_idx)  # code, libraries, device: every invocation
        except BaseException:
            self.backend.close()  # Ray actors must not outlive a trainer that never started
            self.scorer.close()
            raise
        self.stop = StopRequests()
        self._carried_timings: dict[str, float] = {}
        self._phase_progress: PhaseProgress | None = None  # train()'s: each phase's seconds as it ends

    # ---- set-up ---------------------------------------------------------------------------------
    def score(self, texts: list[str], problems: list[Problem]) -> ScoreResult:
        """Score answer texts against their problems (unscorable → None, counted in the result)."""
        return self.scorer.score_problems(texts, problems)

    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def _check_resume(self, manifest: dict[str, Any]) -> None:
        mine = [{"id": a.id, "model": a.model} for a in self.cfg.agents]
        if manifest.get("agents") != mine:
            raise ConfigError(f"--resume: the checkpoint was made with agents {manifest.get('agents')}, "
                              f"the config has {mine}; resume with the original config")
        if manifest.get("algorithm") != self.cfg.algorithm.name:
            raise ConfigError(f"--resume: the checkpoint used algorithm {manifest.get('algorithm')!r}, "
                              f"the config has {self.cfg.algorithm.name!r}")
        saved = self.run_dir / "config.yaml"
        if saved.is_file():
            conflict = resume_conflict(yaml.safe_load(saved.read_text()) or {}, self.cfg.model_dump(mode="json"))
            if conflict is not None:
                raise ConfigError(f"--resume: {self.run_dir} was trained with {conflict}; resume with the run's "
                                  f"settings, or start over with --overwrite")

    def _restore(self, path: Path) -> int:
        """The trainer state of the checkpoint at ``path`` (:meth:`checkpoint_state`); its data position."""
        state = ckpt.load_state(path)
        self.step_idx = state["step"]
        self.tracker.load_state_dict(state["tracker"])
        self._async_state = state.get("async")  # the asynchronous mode's loop (hacrl.trainer.async_loop)
        if self.rollout_budget is not None and "budget" in state:
            self.rollout_budget.load_state_dict(state["budget"])
        self.checks_over = bool(state.get("checks_over", False))  # an older checkpoint: one more check, then known
        # an older checkpoint's "window" (the adaptive cross window): each worker takes its row (LearnerWindow)
        ckpt.set_rng_state(state["rng"])
        return int(state["data_pos"])

    def _truncate_logs(self, step: int) -> None:
        """Drop log lines written after the checkpoint we resume from (a killed run may have gone further)."""
        for name in ("metrics.jsonl", "eval.jsonl", "eval_problems.jsonl"):
            path = self.run_dir / name
            if not path.is_file():
                continue
            keep = []
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    if json.loads(line)["step"] <= step:
                        keep.append(line)
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a line cut short by the kill
            write_atomic(path, "".join(x + "\n" for x in keep))  # via metrics.jsonl.tmp: all or nothing

    @property
    def agents(self) -> list[Agent]:
        """The agents themselves (local backend only; on Ray they live in their actors)."""
        workers = getattr(self.backend, "workers", None)
        if workers is None:
            raise AttributeError("the ray backend keeps agents in their actors; use trainer.agent_ids / agent_info")
        return [w.agent for w in workers]

    def _make_sinks(self) -> MultiSink:
        return make_sinks(self.logger_names, self.run_dir, self.cfg.model_dump(mode="json"), step=self.step_idx,
                          project=self.cfg.run.project)

    # ---- the step (its phases: hacrl.trainer.phases) ----------------------------------------------------
    def _rollout(self, problems: list[Problem], timings: dict[str, float] | None = None
                 ) -> tuple[list[Trajectory], dict[str, float]]:
        """Every agent answers every prompt (concurrently on Ray): the answers, agent by agent, unscored; the
        agents' rollout metrics. G answers a prompt each, or with trust's rollout budget its split."""
        prompts = [p.prompt for p in problems]
        sampling = [self.phases.sampling] * len(self.agent_ids)
        metrics: dict[str, float] = {}
        if self.rollout_budget is not None:
            counts = self.rollout_budget.counts()
            sampling = [dataclasses.replace(self.phases.sampling, n=c) for c in counts]
            metrics.update(self.rollout_budget.metrics(counts))
        results = self.backend.rollout(prompts, sampling, recompute=self.phases.recompute)
        for agent_id, (_, m) in zip(self.agent_ids, results, strict=True):
            metrics.update(rollout_metrics(agent_id, m, timings))
        return [t for answers, _ in results for t in answers], metrics

    def _timed(self, timings: dict[str, float], name: str, step: int | None = None
               ) -> contextlib.AbstractContextManager[None]:
        """``timed``, reporting the phase's seconds to ``train``'s ``phase_progress`` as it ends; ``step``: the
        step it belongs to (default: the one running)."""
        report = None if self._phase_progress is None else \
            functools.partial(self._phase_progress, self.step_idx + 1 if step is None else step)
        return timed(timings, name, report)

    def step(self) -> dict[str, float]:
        """One training step; returns its metrics."""
        timings: dict[str, float] = {}
        phases = self.phases
        with self._timed(timings, "data"):
            problems = self.data.take(self.cfg.trainer.batch_size)
        with self._timed(timings, "rollout"):
            answers, rollout = self._rollout(problems, timings)
        with self._timed(timings, "reward"):
            pool, metrics = phases.score(problems, answers, step=self.step_idx + 1)
        metrics.update(rollout)
        with self._timed(timings, "capability"):
            rewards, sources = pool.rewards_and_sources()
            self.tracker.update(rewards, sources)
            capability_N, omega_NN = self.tracker.capability, self.tracker.omega_matrix()
        with self._timed(timings, "validation"):
            checks = self._validation_check()
        with self._timed(timings, "update"):
            request = phases.update_request(pool, omega_NN, validation=checks)
            results = self.backend.update(request)
        if self.rollout_budget is not None:
            self.rollout_budget.observe(results)
        self.checks_over = self.checks_over or self._every_partner_cut(results)
        for i, loss_metrics in enumerate(results):
            metrics.update(phases.update_metrics(i, loss_metrics, timings))
        for phase in ("rollout", "update"):
            # >1: agents worked at the same time (Ray, own devices); 1: one after the other
            busy = sum(timings[f"timing/{phase}/{a}"] for a in self.agent_ids)
            timings[f"timing/{phase}_overlap"] = busy / max(timings[f"timing/{phase}"], 1e-9)
        self.step_idx += 1
        metrics.update(pool_metrics(pool, self.agent_ids, capability_N, omega_NN))
        metrics.update(timings)
        self._write_samples(pool)
        return metrics

    def _every_partner_cut(self, results: list[dict[str, Any]]) -> bool:
        """Whether an update's results show every learner with every partner cut for good (trust's cut,
        ``trust_cut/<partner>`` 1 in each learner's metrics). No check can then change an update: a cut partner's
        τ stays 0, and a switched learner (``trust_cut_to``) reads no trust."""
        ids = self.agent_ids
        return self.validation is not None and len(ids) > 1 and all(
            results[i].get(f"trust_cut/{p}") == 1.0 for i in range(len(ids)) for p in ids if p != ids[i])

    def _validation_check(self) -> tuple[tuple[bool, ...], ...] | None:
        """The trust method's check before this step's update, every ``algorithm.trust_every`` steps from the
        first: each agent's greedy answers to the validation slice, right or not (None: no check this step). It
        runs after the step's rollout, on the weights that wrote it; none once every partner is cut
        (``checks_over``), their answers being then a cost with no effect."""
        if self.validation is None or self.checks_over or self.step_idx % self.cfg.algorithm.trust_every:
            return None
        prompts = [p.prompt for p in self.validation]
        answers = self.backend.generate_answers(prompts, validation.greedy(self.cfg.rollout.max_new_tokens))
        return validation.check(self.validation, answers, self.score)

    def _write_samples(self, pool: TrajectoryPool) -> None:
        n = self.cfg.trainer.log_samples
        if n <= 0:
            return
        groups = pool.by_group()
        path = self.run_dir / "samples" / f"step-{self.step_idx:06d}.jsonl"
        path.parent.mkdir(exist_ok=True)
        lines = []
        for g in sorted(groups)[:n]:
            p = pool.problems[g]
            answers = [{"agent": self.agent_ids[t.source], "text": t.text, "reward": t.reward,
                        "finished": t.finished} for t in groups[g]]
            lines.append(json.dumps({"problem_id": p.id, "prompt": p.prompt, "answer": p.answer,
                                     "answers": answers}) + "\n")
        write_atomic(path, "".join(lines))

    # ---- evaluation and checkpoints ---------------------------------------------------------------
    def evaluate(self, *, budget: bool = False) -> dict[str, float]:
        """:meth:`evaluation`, recorded (:meth:`_record`); its metrics."""
        return self._record(self.evaluation(budget=budget))

    def evaluate_start(self) -> dict[str, float]:
        """The evaluation before the first step (with the longer budget), copied from
        ``trainer.start_eval_cache`` when a run with the same start wrote it there (:mod:`.start_eval`)."""
        cache = start_cache(self.cfg)
        result = cache.load() if cache else None
        if result is not None and cache is not None:
            logger.info("step-0 evaluation copied from %s", cache.path)
        else:
            result = self.evaluation(budget=True)
            if cache:
                cache.store(result, self.run_dir)
        return self._record(result)

    def _record(self, result: Evaluation) -> dict[str, float]:
        """Append an evaluation's totals to eval.jsonl and its per-problem records to eval_problems.jsonl."""
        append_lines(self.run_dir / "eval.jsonl", result.totals)
        append_lines(self.run_dir / "eval_problems.jsonl", result.per_problem)
        return result.metrics

    def evaluation(self, *, budget: bool) -> Evaluation:
        """Greedy accuracy of each agent alone on the task's held-out split and on each eval benchmark
        (the agents generate concurrently on Ray; the answers are scored here), and with ``budget`` also on
        the held-out split with the longer answer budget ``trainer.eval_budget``: the metrics, and the totals
        and per-problem records for eval.jsonl and eval_problems.jsonl (written by the caller once all is
        scored)."""
        k, r, t = self.cfg.trainer.eval_k, self.cfg.rollout, self.cfg.trainer
        # a suite: what its records say it is, its problems and scorer, the answer budget, its eval_key parts
        suites: list[tuple[dict[str, Any], list[Problem], Callable[[list[str], list[Problem]], ScoreResult],
                           int, str | None, str]] = [
            ({"task": self.task.name}, self.eval_problems, self.score, r.max_new_tokens, None, "greedy_acc")]
        suites += [({"benchmark": name}, problems, scorer.score_problems, r.max_new_tokens, name, "greedy_acc")
                   for name, (problems, scorer) in self.benchmarks.items()]
        if budget and t.eval_budget:
            suites.append(({"task": self.task.name, "budget": t.eval_budget}, self.eval_problems, self.score,
                           t.eval_budget, None, f"greedy_acc@{t.eval_budget}tok"))
        answers = [self.backend.generate_answers([p.prompt for p in problems], SamplingParams(
            n=1, max_new_tokens=tokens, greedy=True)) for _, problems, _, tokens, _, _ in suites]
        sampled: list[list[Trajectory]] | list[None] = self.backend.generate_answers(
            [p.prompt for p in self.eval_problems], SamplingParams(
                n=k, temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens)) \
            if k > 0 else [None] * len(self.agent_ids)
        out: dict[str, float] = {}
        totals, per_problem = [], []
        for i, agent_id in enumerate(self.agent_ids):
            for s, ((where, problems, score, _, name, metric), per_agent) in enumerate(zip(suites, answers,
                                                                                          strict=True)):
                task_k = k if s == 0 else 0  # sampled answers: the task's held-out split only
                res, records = score_answers(agent_id, problems, per_agent[i], score,
                                             sampled=sampled[i] if task_k else None, k=task_k, texts=t.eval_texts)
                totals.append({"step": self.step_idx, **where, **res.as_dict()})
                per_problem.append({"step": self.step_idx, "agent": agent_id, **where, **records.as_dict()})
                out[eval_key(agent_id, metric, name)] = res.greedy_acc
                if res.sampled_avg is not None and res.sampled_pass is not None:
                    out[eval_key(agent_id, f"sampled_avg@{k}", name)] = res.sampled_avg
                    out[eval_key(agent_id, f"sampled_pass@{k}", name)] = res.sampled_pass
        return Evaluation(out, totals, per_problem)

    def checkpoint_state(self, loop: AsyncLoop | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """The trainer state a checkpoint keeps and its manifest; with the asynchronous ``loop`` (at a cut) its
        state too (``async``), and its mode and versions in the manifest."""
        state: dict[str, Any] = {"step": self.step_idx, "data_pos": self.data.position,
                                 "tracker": self.tracker.state_dict(), "rng": ckpt.rng_state()}
        if loop is not None:
            state["async"] = loop.state_dict()
        if self.rollout_budget is not None:
            state["budget"] = self.rollout_budget.state_dict()
        if self.checks_over:
            state["checks_over"] = True
        manifest = {"agents": [{"id": a.id, "model": a.model} for a in self.cfg.agents],
                    "algorithm": self.cfg.algorithm.name, **(loop.manifest() if loop is not None else {})}
        return state, manifest

    def save_checkpoint(self, loop: AsyncLoop | None = None) -> Path:
        """The workers' weights, optimizers and random streams, and :meth:`checkpoint_state`, as the checkpoint
        of step ``step_idx``."""
        state, manifest = self.checkpoint_state(loop)
        ids = self.agent_ids
        return ckpt.save_checkpoint(
            self.run_dir / "checkpoints", self.step_idx,
            lambda tmp: self.backend.save([tmp / "agents" / i for i in ids]),
            state, manifest, self.cfg.trainer.keep_last)

    # ---- the loops ------------------------------------------------------------------------------
    def train(self, progress: Progress | None = None, phase_progress: PhaseProgress | None = None) -> dict[str, Any]:
        """Run until ``trainer.steps``; returns the evaluations before and after. ``trainer.mode=async``: every
        agent at its own pace (``hacrl.trainer.async_loop``), until the slowest has made ``trainer.steps`` updates.
        Both loops: SIGINT/SIGTERM finish the step (the cut), checkpoint and stop; config.yaml; the step-0
        evaluation; the workers closed at the end. ``progress``: each metrics line; ``phase_progress``: each phase
        (the lock-step loop's, the evaluations, the checkpoints) as it ends, with its seconds."""
        self._phase_progress = phase_progress
        try:
            with self.stop.installed():
                # the asynchronous loop's clock (its idle shares) starts before the step-0 evaluation
                loop = self.async_loop() if self.cfg.trainer.mode == "async" else None
                write_atomic(self.run_dir / "config.yaml", dump_config(self.cfg))  # failing, still closes the workers
                if self.step_idx == 0:
                    with self._timed({}, "eval", step=0):
                        evaluation = self.evaluate_start()
                    self.sink.log(0, evaluation)
                last_eval, path = self._train_lockstep(progress) if loop is None else self._train_async(loop, progress)
        finally:
            self.close()
        return {"first": self.eval_record(0), "last": last_eval, "checkpoint": path, "stopped": self.stop.requested}

    def _train_lockstep(self, progress: Progress | None) -> tuple[dict[str, float] | None, Path]:
        """Steps until ``trainer.steps`` (or a stop request): the last evaluation (None unless the final step's)
        and the final checkpoint."""
        t = self.cfg.trainer
        last_eval: dict[str, float] | None = None
        while self.step_idx < t.steps and not self.stop.requested:
            metrics = self.step()
            final = self.step_idx >= t.steps
            if final or (t.eval_every and self.step_idx % t.eval_every == 0):
                with self._timed(metrics, "eval", step=self.step_idx):
                    evaluation = self.evaluate(budget=final)
                metrics.update(evaluation)
                last_eval = evaluation if final else None
            metrics.update(self._carried_timings)  # the previous step's checkpoint write
            self._carried_timings = {}
            # metrics are written before the checkpoint: a checkpoint implies its step's metrics line
            self.sink.log(self.step_idx, metrics)
            if progress:
                progress(self.step_idx, metrics)
            if t.checkpoint_every and self.step_idx % t.checkpoint_every == 0 and not final:
                with self._timed(self._carried_timings, "checkpoint", step=self.step_idx):
                    self.save_checkpoint()
        return last_eval, self.save_checkpoint()

    def async_loop(self) -> AsyncLoop:
        """The asynchronous mode's loop on this trainer's phases, workers and data (resumed: as checkpointed)."""
        loop = AsyncLoop(self.cfg, self.phases, self.backend, self.data, step=self.step_idx)
        if self._async_state is not None:
            loop.load_state_dict(self._async_state)
        return loop

    def _train_async(self, loop: AsyncLoop, progress: Progress | None) -> tuple[dict[str, float] | None, Path]:
        """The asynchronous loop until the slowest agent has made ``trainer.steps`` updates (or a stop request),
        cut for evaluations and checkpoints at multiples of the slowest agent's version: the last evaluation and
        the final checkpoint. One metrics line per update, ``step`` the run's number of updates."""
        t = self.cfg.trainer
        next_eval, next_ckpt = next_multiple(min(loop.versions), t.eval_every), \
            next_multiple(min(loop.versions), t.checkpoint_every)
        last_eval: dict[str, float] | None = None

        def on_update(step: int, _k: int, line: dict[str, float]) -> None:
            self.step_idx = step
            self.sink.log(step, line)
            if progress:
                progress(step, line)

        while min(loop.versions) < t.steps and not self.stop.requested:
            mark = min(m for m in (next_eval, next_ckpt, t.steps) if m is not None)
            def reached(m: int = mark) -> bool:
                return min(loop.versions) >= m or self.stop.requested

            loop.run_until(reached, on_update)
            slowest = min(loop.versions)
            final = slowest >= t.steps
            metrics: dict[str, float] = {}
            if final or (next_eval is not None and slowest >= next_eval):
                with self._timed(metrics, "eval", step=self.step_idx):
                    evaluation = self.evaluate(budget=final)
                metrics.update(evaluation)
                last_eval = evaluation if final else None
                next_eval = next_multiple(slowest, t.eval_every)
            if metrics:
                metrics.update({f"agent/{a}/version": v for a, v in zip(self.agent_ids, loop.versions, strict=True)})
                self.sink.log(self.step_idx, metrics)
            if next_ckpt is not None and slowest >= next_ckpt and not final:
                self.save_checkpoint(loop)
                next_ckpt = next_multiple(slowest, t.checkpoint_every)
            loop.resume_calls()
        return last_eval, self.save_checkpoint(loop)

    def close(self) -> None:
        """Release the workers (Ray actors), reward workers and log files; safe to call twice."""
        self.sink.close()
        self.scorer.close()
        for _, scorer in self.benchmarks.values():
            scorer.close()
        if not self._closed:
            self._closed = True
            self.backend.close()

    def eval_record(self, step: int) -> dict[str, float] | None:
        """The evaluation logged at ``step`` (from eval.jsonl), as ``{eval/<id>/greedy_acc: value}``."""
        return {eval_key(agent): acc for (s, agent), acc in read_evals(self.run_dir).items() if s == step} or None

