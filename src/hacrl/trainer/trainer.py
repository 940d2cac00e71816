"""The HACRL training loop as named phases.

One step: data → rollout (every agent answers the same prompts) → reward → pool → capability →
for each learner: view → advantages → minibatch updates (stepwise index) ; then eval every E steps and
a checkpoint every C steps. Formulas live in ``hacrl.core``; the per-learner arithmetic in ``learner``.

Run it with ``hacrl train`` (see ``hacrl.cli``) or ``Trainer(cfg, run_dir).train()``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from hacrl.agents.agent import Agent, load_agent, token_logprobs
from hacrl.config import Config, ConfigError, derive, dump_config
from hacrl.core import CapabilityTracker
from hacrl.data.factory import build_task
from hacrl.errors import InputError
from hacrl.failpoints import failpoint
from hacrl.pool import TrajectoryPool
from hacrl.rewards import RewardScorer, ScoreResult
from hacrl.report.sinks import JsonlSink, MultiSink, NullSink, tensorboard_sink
from hacrl.rollout import SamplingParams, get_engine
from hacrl.rollout.base import Sample
from hacrl.trainer import checkpoint as ckpt
from hacrl.trainer.algorithms import ALGORITHMS
from hacrl.trainer.evaluation import evaluate_agent
from hacrl.trainer.learner import LossSettings, assign_advantages, build_view, minibatches, update_learner
from hacrl.types import Problem, Trajectory

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def timed(timings: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[f"timing/{name}"] = timings.get(f"timing/{name}", 0.0) + time.perf_counter() - start


def resolve_model_path(spec: str) -> Path:
    """``builtin:<name>`` → a pretrained model converted from a package's GGUF file (cached on first use,
    see ``hacrl.agents.gguf``) or a tiny agent shipped in the package; anything else is a directory."""
    if spec.startswith("builtin:"):
        from hacrl.agents.gguf import PRETRAINED, pretrained_path
        from hacrl.agents.tiny import tiny_agent_path

        name = spec.removeprefix("builtin:")
        return pretrained_path(name) if name in PRETRAINED else tiny_agent_path(name)
    return Path(spec).expanduser()


class Trainer:
    """N agents trained together on one task. ``resume_from`` is a checkpoint directory."""

    def __init__(self, cfg: Config, run_dir: Path, *, resume_from: Path | None = None,
                 sinks: bool = True) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        try:
            self.algo = ALGORITHMS.get(cfg.algorithm.name)
        except KeyError as exc:
            raise ConfigError(f"algorithm.name: {exc.args[0]}") from None
        self.derived = derive(cfg, shares_pool=self.algo.shares_pool,
                              rollout_multiplier=self.algo.rollout_multiplier, needs_groups=True)
        if cfg.trainer.threads:
            torch.set_num_threads(cfg.trainer.threads)
        self.task = build_task(cfg.task, seed=cfg.run.seed, max_new_tokens=cfg.rollout.max_new_tokens)
        for reason, count in sorted(getattr(self.task, "skipped", {}).items()):
            logger.warning("task %s: skipped %d rows (%s)", cfg.task.name, count, reason)
        self.scorer = self._make_scorer()
        try:
            self.engine = get_engine(cfg.rollout.engine)
        except KeyError as exc:
            raise ConfigError(f"rollout.engine: {exc.args[0]}") from None
        self.step_idx = 0
        self.data_pos = 0
        manifest = ckpt.read_manifest(resume_from) if resume_from else None
        if manifest:
            self._check_resume(manifest)
        self._seed_everything(cfg.run.seed)
        self.agents = [self._load_agent(i, resume_from) for i in range(len(cfg.agents))]
        self.tracker = CapabilityTracker(len(self.agents), window=cfg.algorithm.capability_window)
        if resume_from:
            self._restore(resume_from)
            self._truncate_logs(self.step_idx)
        self._train_iter = itertools.islice(self.task.train_problems(cfg.run.seed), self.data_pos, None)
        self.eval_problems = self.task.test_problems(cfg.trainer.eval_size)
        self.benchmarks = self._load_benchmarks()
        self.sink = self._make_sinks() if sinks else NullSink()
        self._stop_requested = False
        self._carried_timings: dict[str, float] = {}

    # ---- set-up ---------------------------------------------------------------------------------
    def _make_scorer(self) -> RewardScorer:
        """The task's own verifier scores inline; a reward spec runs in worker processes with a time limit."""
        spec = self.cfg.task.reward or getattr(self.task, "reward_spec", None)
        if spec is None:
            task = self.task
            return RewardScorer(lambda text, sample: task.reward(text, sample["problem"]), timeout_s=None)
        try:
            return RewardScorer(spec, timeout_s=self.cfg.task.reward_timeout_s)
        except ValueError as exc:
            raise ConfigError(f"task.reward: {exc}") from None

    def score(self, texts: list[str], problems: list[Problem]) -> ScoreResult:
        """Score answer texts against their problems (unscorable → None, counted in the result)."""
        if self.scorer.timeout_s is None and self.scorer.spec is None:  # the task's own verifier, inline
            samples = [{"problem": p} for p in problems]
        else:
            samples = [{**p.meta, "answer": p.answer, "prompt": p.prompt, "problem_id": p.id} for p in problems]
        return self.scorer.score(texts, samples)

    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)

    def _load_agent(self, index: int, resume_from: Path | None) -> Agent:
        spec = self.cfg.agents[index]
        path = resume_from / "agents" / spec.id if resume_from else resolve_model_path(spec.model)
        lora = spec.lora.model_dump() if spec.lora else None
        # a LoRA agent resumes as its base model plus the checkpoint's adapter
        agent = load_agent(
            spec.id, index, resolve_model_path(spec.model) if lora else path, lora=lora,
            adapter_path=path if lora and resume_from else None,
            dtype=spec.dtype, device=spec.device, template=spec.template,
            system_prompt=spec.system_prompt, chat_template_kwargs=spec.chat_template_kwargs,
            max_prompt_tokens=spec.max_prompt_tokens,
            max_answer_tokens=spec.max_answer_tokens or self.cfg.rollout.max_new_tokens,
        )
        agent.source = spec.model
        agent.configure_optimizer(lr=spec.lr, weight_decay=spec.weight_decay)
        if spec.kl_coef > 0:
            if resume_from and (path / "reference").is_dir():
                from transformers import AutoModelForCausalLM

                ref = AutoModelForCausalLM.from_pretrained(path / "reference", dtype=agent.model.dtype)
                agent.ref_model = ref.to(agent.device).eval().requires_grad_(False)
            else:
                agent.enable_reference()
        if resume_from:
            agent.load_optimizer(path)
        return agent

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
            key = first_training_difference(yaml.safe_load(saved.read_text()), self.cfg.model_dump(mode="json"))
            if key is not None:
                raise ConfigError(f"--resume: {key} differs from the run's config.yaml; resuming with a changed "
                                  f"training setting would mix two experiments (only trainer.steps, eval and "
                                  f"checkpoint cadence, threads and logging may change)")

    def _restore(self, path: Path) -> None:
        state = ckpt.load_state(path)
        self.step_idx = state["step"]
        self.data_pos = state["data_pos"]
        self.tracker.load_state_dict(state["tracker"])
        ckpt.set_rng_state(state["rng"])

    def _truncate_logs(self, step: int) -> None:
        """Drop log lines written after the checkpoint we resume from (a killed run may have gone further)."""
        for name in ("metrics.jsonl", "eval.jsonl"):
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
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(x + "\n" for x in keep), encoding="utf-8")
            tmp.replace(path)

    def _make_sinks(self) -> MultiSink:
        sinks: list[Any] = [JsonlSink(self.run_dir / "metrics.jsonl")]
        if self.cfg.run.tensorboard:
            # purge_step drops TensorBoard events a killed run wrote after the checkpoint
            sinks.append(tensorboard_sink(self.run_dir / "tensorboard", purge_step=self.step_idx + 1))
        return MultiSink(sinks)

    # ---- phases ---------------------------------------------------------------------------------
    def _next_problems(self) -> list[Problem]:
        batch = list(itertools.islice(self._train_iter, self.cfg.trainer.batch_size))
        if len(batch) < self.cfg.trainer.batch_size:
            raise RuntimeError(f"task {self.cfg.task.name!r} ran out of training problems")
        self.data_pos += len(batch)
        return batch

    def _rollout(self, problems: list[Problem]) -> dict[int, list[Sample]]:
        r = self.cfg.rollout
        params = SamplingParams(n=self.derived.group_size, temperature=r.temperature, top_p=r.top_p,
                                max_new_tokens=r.max_new_tokens)
        out = {}
        for a in self.agents:
            out[a.index] = self.engine.generate(a, [a.render_prompt(p.prompt) for p in problems], params)
            failpoint("rollout", self.step_idx + 1)
        return out

    def _needs_recompute(self) -> bool:
        r = self.cfg.rollout
        if r.old_logprobs != "auto":
            return r.old_logprobs == "recompute"
        return not (r.engine == "hf" and r.temperature == 1.0 and r.top_p == 1.0)

    @torch.no_grad()
    def _recompute_logprobs(self, agent: Agent, problems: list[Problem], samples: list[Sample]) -> list[Sample]:
        """π_old as the training forward pass sees it (for temperature ≠ 1, top-p < 1 or other engines)."""
        out = []
        mb = self.cfg.trainer.micro_batch_size
        for start in range(0, len(samples), mb):
            chunk = samples[start : start + mb]
            batch = agent.batch([agent.render_prompt(problems[s.prompt_index].prompt) for s in chunk],
                                [list(s.token_ids) for s in chunk])
            logp_BT = token_logprobs(agent.model, batch).cpu()
            for i, s in enumerate(chunk):
                lp = tuple(logp_BT[i][batch.answer_mask_BT[i]].tolist())
                out.append(Sample(s.prompt_index, s.token_ids, lp, s.finished))
        return out

    def _score(self, problems: list[Problem], samples: dict[int, list[Sample]]) -> tuple[TrajectoryPool, dict]:
        flat = [(agent, s, text) for agent in self.agents for s, text in
                zip(samples[agent.index], agent.decode_answers([list(s.token_ids) for s in samples[agent.index]]))]
        result = self.score([text for _, _, text in flat], [problems[s.prompt_index] for _, s, _ in flat])
        stats: dict[str, float] = {f"reward/{kind}": n for kind, n in result.counts().items()}
        for kind, message in result.first_message.items():
            logger.warning("step %d: %d answer(s) %s: %s", self.step_idx + 1, stats[f"reward/{kind}"],
                           "timed out" if kind == "timeout" else f"unscorable ({kind})", message)
        if flat and result.ok == 0:
            reasons = "; ".join(f"{n} {kind}: {result.first_message.get(kind, '')}" for kind, n in
                                result.counts().items() if n and kind != "ok")
            raise InputError(f"task.reward: no answer of step {self.step_idx + 1} could be scored ({reasons}); "
                             f"fix the reward function or raise task.reward_timeout_s")
        trajectories = []
        for (agent, s, text), reward in zip(flat, result.rewards, strict=True):
            trajectories.append(Trajectory(
                group=s.prompt_index, problem_id=problems[s.prompt_index].id, source=agent.index, text=text,
                finished=s.finished, reward=reward, logp_sum=float(sum(s.logps)), num_tokens=len(s.token_ids),
                token_ids=s.token_ids, token_logps=s.logps))
        for agent in self.agents:
            stats[f"agent/{agent.id}/unscorable"] = sum(
                t.reward is None for t in trajectories if t.source == agent.index)
        return TrajectoryPool(problems, trajectories), stats

    def _loss_settings(self, agent: Agent) -> LossSettings:
        a = self.cfg.algorithm
        return LossSettings(a.clip_low, a.clip_high, a.alpha, a.delta, a.delta_step, a.max_log_ratio,
                            self.cfg.agents[agent.index].kl_coef)

    def step(self) -> dict[str, float]:
        """One training step; returns its metrics."""
        timings: dict[str, float] = {}
        with timed(timings, "data"):
            problems = self._next_problems()
        with timed(timings, "rollout"):
            samples = self._rollout(problems)
        if self._needs_recompute():
            with timed(timings, "old_logprobs"):
                samples = {a.index: self._recompute_logprobs(a, problems, samples[a.index]) for a in self.agents}
        with timed(timings, "reward"):
            pool, metrics = self._score(problems, samples)
        with timed(timings, "capability"):
            rewards, sources = pool.rewards_and_sources()
            step_rate = self.tracker.update(rewards, sources)
            capability, omega = self.tracker.capability, self.tracker.omega_matrix()
        prompts = {i: p.prompt for i, p in enumerate(problems)}
        for agent in self.agents:
            with timed(timings, f"update/{agent.id}"):
                rows = build_view(agent, pool, self.algo, prompts)
                assign_advantages(rows, agent.index, self.algo, omega, capability)
                mbs = minibatches(rows, self.derived.minibatch_size, self.derived.rows_per_prompt,
                                  seed=self.cfg.run.seed * 1_000_003 + self.step_idx * 131 + agent.index)
                loss_metrics = update_learner(agent, mbs, self.algo, self._loss_settings(agent),
                                              micro_batch_size=self.cfg.trainer.micro_batch_size,
                                              grad_clip=self.cfg.agents[agent.index].grad_clip)
            failpoint("update", self.step_idx + 1)
            metrics.update({f"agent/{agent.id}/{k}": v for k, v in loss_metrics.items()})
            metrics[f"agent/{agent.id}/optimizer_steps"] = len(mbs)
            metrics[f"agent/{agent.id}/truncated_frac"] = sum(r.truncated for r in rows) / max(len(rows), 1)
        self.step_idx += 1
        metrics.update(self._pool_metrics(pool, step_rate, capability, omega))
        metrics.update(timings)
        self._write_samples(pool)
        return metrics

    def _pool_metrics(self, pool: TrajectoryPool, rate, capability, omega) -> dict[str, float]:
        out: dict[str, float] = {"pool/size": len(pool)}
        for a in self.agents:
            own = [t for t in pool.trajectories if t.source == a.index]
            scored = [t.reward for t in own if t.reward is not None]
            out[f"agent/{a.id}/reward"] = sum(scored) / max(len(scored), 1)
            out[f"agent/{a.id}/accuracy"] = sum(r >= 1.0 for r in scored) / max(len(scored), 1)
            out[f"agent/{a.id}/capability"] = float(capability[a.index])
            out[f"agent/{a.id}/answer_tokens"] = sum(t.num_tokens for t in own) / max(len(own), 1)
            out[f"agent/{a.id}/finished_frac"] = sum(t.finished for t in own) / max(len(own), 1)
            for b in self.agents:
                if b.index != a.index:
                    out[f"agent/{a.id}/omega/{b.id}"] = float(omega[a.index, b.index])
        return out

    def _write_samples(self, pool: TrajectoryPool) -> None:
        n = self.cfg.trainer.log_samples
        if n <= 0:
            return
        groups = pool.by_group()
        path = self.run_dir / "samples" / f"step-{self.step_idx:06d}.jsonl"
        path.parent.mkdir(exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for g in sorted(groups)[:n]:
                p = pool.problems[g]
                answers = [{"agent": self.agents[t.source].id, "text": t.text, "reward": t.reward,
                            "finished": t.finished} for t in groups[g]]
                f.write(json.dumps({"problem_id": p.id, "prompt": p.prompt, "answer": p.answer,
                                    "answers": answers}) + "\n")

    # ---- evaluation and checkpoints ---------------------------------------------------------------
    def _load_benchmarks(self) -> dict[str, tuple[list[Problem], RewardScorer]]:
        from hacrl.data.benchmarks import benchmark_prompts

        out = {}
        for name, path in self.cfg.trainer.eval_benchmarks.items():
            try:
                problems = benchmark_prompts(name, path, n=self.cfg.trainer.eval_size)
            except InputError as exc:
                raise ConfigError(f"trainer.eval_benchmarks.{name}: {exc}") from None
            out[name] = (problems, RewardScorer("math", timeout_s=self.cfg.task.reward_timeout_s))
        return out

    def evaluate(self) -> dict[str, float]:
        """Greedy accuracy of each agent alone on the task's held-out split and on each eval benchmark."""
        out: dict[str, float] = {}
        with open(self.run_dir / "eval.jsonl", "a", encoding="utf-8") as f:
            for agent in self.agents:
                res = evaluate_agent(agent, self.eval_problems, self.score, self.engine,
                                     max_new_tokens=self.cfg.rollout.max_new_tokens)
                f.write(json.dumps({"step": self.step_idx, "task": self.cfg.task.name, **res.as_dict()}) + "\n")
                out[f"eval/{agent.id}/greedy_acc"] = res.greedy_acc
                for name, (problems, scorer) in self.benchmarks.items():
                    res = evaluate_agent(agent, problems, _benchmark_score(scorer), self.engine,
                                         max_new_tokens=self.cfg.rollout.max_new_tokens)
                    f.write(json.dumps({"step": self.step_idx, "benchmark": name, **res.as_dict()}) + "\n")
                    out[f"eval/{agent.id}/{name}/greedy_acc"] = res.greedy_acc
        return out

    def save_checkpoint(self) -> Path:
        state = {"step": self.step_idx, "data_pos": self.data_pos, "tracker": self.tracker.state_dict(),
                 "rng": ckpt.rng_state()}
        manifest = {"agents": [{"id": a.id, "model": a.model} for a in self.cfg.agents],
                    "algorithm": self.cfg.algorithm.name}
        return ckpt.save_checkpoint(self.run_dir / "checkpoints", self.step_idx, self.agents, state, manifest,
                                    self.cfg.trainer.keep_last)

    # ---- the loop -------------------------------------------------------------------------------
    def _request_stop(self, signum: int, _frame: Any) -> None:
        logger.warning("received %s: finishing the current step, then checkpointing",
                       signal.Signals(signum).name)
        self._stop_requested = True

    def train(self, progress: Callable[[int, dict[str, float]], None] | None = None) -> dict[str, Any]:
        """Run until ``trainer.steps``; returns the evaluations before and after."""
        t = self.cfg.trainer
        (self.run_dir / "config.yaml").write_text(dump_config(self.cfg))
        handlers = {s: signal.signal(s, self._request_stop) for s in (signal.SIGINT, signal.SIGTERM)} \
            if _on_main_thread() else {}
        last_eval: dict[str, float] | None = None
        try:
            if self.step_idx == 0:
                self.sink.log(0, self.evaluate())
            while self.step_idx < t.steps and not self._stop_requested:
                metrics = self.step()
                final = self.step_idx >= t.steps
                if final or (t.eval_every and self.step_idx % t.eval_every == 0):
                    with timed(metrics, "eval"):
                        evaluation = self.evaluate()
                    metrics.update(evaluation)
                    last_eval = evaluation if final else None
                metrics.update(self._carried_timings)  # the previous step's checkpoint write
                self._carried_timings = {}
                # metrics are written before the checkpoint: a checkpoint implies its step's metrics line
                self.sink.log(self.step_idx, metrics)
                if progress:
                    progress(self.step_idx, metrics)
                if t.checkpoint_every and self.step_idx % t.checkpoint_every == 0 and not final:
                    with timed(self._carried_timings, "checkpoint"):
                        self.save_checkpoint()
            path = self.save_checkpoint()
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
            self.sink.close()
            self.scorer.close()
            for _, scorer in self.benchmarks.values():
                scorer.close()
        return {"first": self.eval_record(0), "last": last_eval, "checkpoint": path, "stopped": self._stop_requested}

    def eval_record(self, step: int) -> dict[str, float] | None:
        """The evaluation logged at ``step`` (from eval.jsonl), as ``{eval/<id>/greedy_acc: value}``."""
        path = self.run_dir / "eval.jsonl"
        if not path.is_file():
            return None
        out = {}
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["step"] == step and "benchmark" not in rec:
                out[f"eval/{rec['agent']}/greedy_acc"] = rec["greedy_acc"]
        return out or None


def _benchmark_score(scorer: RewardScorer) -> Callable[[list[str], list[Problem]], ScoreResult]:
    return lambda texts, problems: scorer.score(
        texts, [{**p.meta, "answer": p.answer, "prompt": p.prompt} for p in problems])


# Settings that may change between a run and its resumption: they do not change what is trained.
RESUMABLE_KEYS = {"trainer.steps", "trainer.eval_every", "trainer.eval_size", "trainer.checkpoint_every",
                  "trainer.keep_last", "trainer.log_samples", "trainer.threads", "trainer.micro_batch_size",
                  "trainer.eval_benchmarks",
                  "run.name", "run.output_dir", "run.tensorboard", "task.reward_timeout_s"}


def first_training_difference(old: Any, new: Any, prefix: str = "") -> str | None:
    """The first dotted key whose value differs between two config trees, ignoring ``RESUMABLE_KEYS``."""
    if prefix in RESUMABLE_KEYS:
        return None
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) & set(new)):  # a key on one side only: a field added since the run began
            found = first_training_difference(old.get(k), new.get(k), f"{prefix}.{k}" if prefix else k)
            if found:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            item = a.get("id", i) if isinstance(a, dict) else i
            found = first_training_difference(a, b, f"{prefix}.{item}")
            if found:
                return found
        return None
    return None if old == new else (prefix or "config")


def _on_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
