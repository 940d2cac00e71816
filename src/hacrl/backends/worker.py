"""One agent's side of training: everything the agent owns, behind a message interface that carries
only tokenizer-neutral data, so that it runs the same in the trainer's process (``local`` backend) or
in its own Ray actor on its own devices (``ray`` backend).

An ``AgentWorker`` owns the model, tokenizer, optimizer, optional reference model, rollout engine and
its own random stream. In and out go problem texts, answers as ``Trajectory`` records (texts and scalars),
the update's ``UpdateRequest`` (the pool without token ids, ω), and metrics. The worker keeps its own answers'
token ids and rollout log-probs from ``rollout`` to ``update`` itself (``own_answers``): they never leave it.
Loading is in ``loading``, the divergence checks in ``divergence``, the data-parallel group in
``data_parallel``; the update itself is one call of ``hacrl.learner.learn.learn``.

Each worker samples from its own seeded torch RNG stream (swapped in around generation), so an agent's
answers do not depend on which other agents ran before it in the same process: the local and the Ray
backend draw the same samples for the same seed.

Data parallel (``agents[i].data_parallel = W``, Ray only): W workers hold replicas of one agent
(``data_parallel``); rank 0 writes the checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from hacrl.backends.data_parallel import (
    gather_samples,
    join_group,
    my_share,
    rendezvous_address,
    weights_digest,
)
from hacrl.backends.divergence import check_update, diverged, diverges_in
from hacrl.backends.loading import from_checkpoint, load_worker_agent, quiet_transformers
from hacrl.backends.own_answers import PENDING_FILE, OwnAnswers
from hacrl.backends.resolve import agent_seed, make_engine
from hacrl.config import Config, Derived
from hacrl.failpoints import failpoint
from hacrl.learner.algorithms import derive_for, resolve
from hacrl.learner.learn import Schedule, StaleSettings, learn
from hacrl.learner.old_logprobs import recompute_logprobs
from hacrl.learner.request import UpdateRequest
from hacrl.learner.settings import loss_settings
from hacrl.learner.trust import CUT_TO, TRUST_FILE, LearnerTrust
from hacrl.learner.window import WINDOW_FILE, LearnerWindow
from hacrl.rollout import SamplingParams
from hacrl.rollout.base import generate_answers, logprob_gap
from hacrl.types import Trajectory

logger = logging.getLogger(__name__)

RNG_FILE = "rng.pt"


class AgentWorker:
    """One agent of the run ``cfg`` (the ``index``-th of ``cfg.agents``); ``resume_from`` a checkpoint.
    ``derived``: the run's derived values (``hacrl.config.derive``), resolved once by the trainer and handed to
    every worker; None (a worker built on its own): ``derive_for(cfg)``.

    ``env`` is set in the worker's process first (the Ray backend forwards ``HACRL_FAILPOINT`` with it)."""

    def __init__(self, cfg: Config, index: int, derived: Derived | None = None, *, resume_from: Path | None = None,
                 step: int = 0, env: dict[str, str] | None = None, threads: int | None = None, rank: int = 0,
                 world: int = 1, defer_setup: bool = False, quiet: bool = False) -> None:
        os.environ.update(env or {})
        if quiet:  # a Ray actor: no per-process progress bars interleaved in the driver's output
            quiet_transformers()
        if threads:
            torch.set_num_threads(threads)
        self.cfg, self.index, self.rank, self.world = cfg, index, rank, world
        os.environ["HACRL_RANK"] = str(rank)  # rank-targeted failpoints (hacrl.failpoints)
        self.dp_group: Any = None  # set by init_data_parallel
        self.spec = cfg.agents[index]
        self.algo = resolve(cfg.algorithm)  # the named algorithm with the ingredients the config sets
        self.derived = derived if derived is not None else derive_for(cfg)
        self.settings = loss_settings(cfg.algorithm, kl_coef=self.spec.kl_coef,
                                      rollout_correction=self.derived.rollout_correction)
        self.step_idx = step
        self._resume_from = resume_from
        self.own = OwnAnswers(index, self.spec.id)  # own answers' tokens, kept from rollout to update
        self.window = LearnerWindow.for_run(cfg, index)  # the adaptive cross window's ℓ_0 per source, or None
        self.trust = LearnerTrust.for_run(cfg, index, self.algo)  # the trust method's τ per partner, or None
        if not defer_setup:
            self.setup()

    def setup(self) -> None:
        """Build the engine and load the agent (a Ray actor does it in a method call, not in its
        constructor, so that a failure arrives with its original exception)."""
        cfg, resume_from = self.cfg, self._resume_from
        self.engine = make_engine(cfg)
        self.agent = load_worker_agent(cfg, self.index, resume_from)
        self._rng = torch.Generator().manual_seed(agent_seed(cfg.run.seed, self.index) + 104_729 * self.rank).get_state()
        rng_file = resume_from / "agents" / self.spec.id / self._rng_file if resume_from else None
        if rng_file is not None and rng_file.is_file():
            self._rng = from_checkpoint(rng_file, lambda: torch.load(rng_file, weights_only=True))
        pending = resume_from / "agents" / self.spec.id / PENDING_FILE if resume_from else None
        if pending is not None and pending.is_file():
            self.step_idx = self.own.load(pending)
        if self.window is not None and resume_from:
            window = self.window
            from_checkpoint(resume_from / "agents" / self.spec.id / WINDOW_FILE,
                            lambda: window.restore(resume_from, self.spec.id))
        if self.trust is not None and resume_from:
            trust = self.trust
            from_checkpoint(resume_from / "agents" / self.spec.id / TRUST_FILE,
                            lambda: trust.restore(resume_from, self.spec.id))

    @property
    def _rng_file(self) -> str:
        return RNG_FILE if self.rank == 0 else f"rng-rank{self.rank}.pt"

    # ---- messages -------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        a = self.agent
        return {"id": a.id, "index": a.index, "model_class": type(a.model).__name__,
                "parameters": a.num_parameters, "trainable": a.num_trainable, "vocab": len(a.tokenizer),
                "source": a.source, "device": str(a.device), "host": socket.gethostname(), "pid": os.getpid(),
                "rank": self.rank, "world": self.world}

    def rendezvous(self) -> str:
        """Rank 0: a ``tcp://host:port`` address for the data-parallel group."""
        return rendezvous_address()

    def init_data_parallel(self, address: str) -> None:
        """Join this agent's data-parallel group (every rank calls it at the same time)."""
        self.dp_group = join_group(self.agent, self.spec, address, self.rank, self.world, self._resume_from)
        if self.spec.fsdp and self._resume_from:  # sharding built a new optimizer and scheduler
            self.agent.load_scheduler(self._resume_from / "agents" / self.spec.id)

    @contextlib.contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Run with this agent's CPU random stream (and a derived CUDA one), leaving the global one as it was."""
        device = self.agent.device
        cuda = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.set_rng_state(self._rng)
            if cuda:
                torch.cuda.manual_seed(int(torch.randint(0, 2**62, (1,))))
            yield
            self._rng = torch.get_rng_state()

    def rollout(self, prompts: list[str], params: SamplingParams, *, recompute: bool | None = None,
                tag: int | None = None) -> tuple[list[Trajectory], dict]:
        """``params.n`` answers to each prompt, unscored and without their token ids (kept here for the
        update). With ``recompute`` (None: ``Derived.recompute_old_logprobs``), π_old is the training forward
        pass's log-probs and the gap to the engine's is returned as metrics (rollout/training mismatch). ``tag``
        (the asynchronous mode): the round's number, its answers kept as ``(tag, position in the returned
        list)`` beside earlier rounds' not yet trained on (``OwnAnswers``); None: they replace the last step's."""
        start = time.perf_counter()
        self._wake_up()
        share = my_share(len(prompts), self.rank, self.world)
        rendered = [self.agent.render_prompt(prompts[i]) for i in share]
        with self._own_rng(), diverges_in(self.agent.model, self.spec, "rollout", self.step_idx + 1):
            params = dataclasses.replace(params, seed=int(torch.randint(0, 2**31 - 1, (1,))))
            samples = self.engine.generate(self.agent, rendered, params) if rendered else []
        failpoint("rollout", self.step_idx + 1, self.spec.id)
        if not all(math.isfinite(sum(s.logps)) for s in samples):
            raise diverged(self.spec, "rollout", self.step_idx + 1, "the sampled answers' log-probabilities are not finite")
        metrics: dict[str, float] = {}
        if (self.derived.recompute_old_logprobs if recompute is None else recompute) and samples:
            recompute_start = time.perf_counter()
            recomputed = recompute_logprobs(self.agent, rendered, samples, self.cfg.trainer.micro_batch_size)
            metrics["busy_old_logprobs_s"] = time.perf_counter() - recompute_start
            metrics.update(logprob_gap(samples, recomputed))
            samples = recomputed
        samples = [dataclasses.replace(s, prompt_index=share.start + s.prompt_index) for s in samples]
        self.own.keep(gather_samples(samples, self.dp_group, self.world), tag)
        texts = self.agent.decode_answers([list(s.token_ids) for s in samples])
        out = [Trajectory(s.prompt_index, self.index, text, s.finished, float(sum(s.logps)), len(s.token_ids))
               for s, text in zip(samples, texts, strict=True)]
        metrics["busy_s"] = time.perf_counter() - start
        return out, metrics

    def update(self, request: UpdateRequest) -> dict[str, Any]:
        """Train on ``request.pool``; the worker's own answers get back their token ids and log-probs.

        With the adaptive cross window (``LearnerWindow``) the update uses this learner's ℓ_0 per source, feeds
        the window the cross ratios it saw, and the result holds the bounds used (``window_lower/<source id>``).

        The asynchronous mode (docs/async.md) passes ``own_keys`` (used up here) and ``forget``. Own answers whose
        ``version_gap`` > 0 train against π_prox, this version's pass, with the staleness weight
        (``correct_stale_rows``); the result then holds ``staleness_is/*``."""
        start = time.perf_counter()
        pool = self.own.attach(request.pool, request.own_keys)
        self.own.forget(request.forget)
        agent, cfg = self.agent, self.cfg
        stale = StaleSettings(cfg.async_.staleness_correction, cfg.async_.staleness_cap,
                              engine_behaviour=self.derived.rollout_correction != "off")
        schedule = Schedule(self.derived.minibatch_size, self.derived.rows_per_prompt,
                            cfg.run.seed * 1_000_003 + self.step_idx * 131 + agent.index,
                            cfg.trainer.micro_batch_size, self.spec.grad_clip, cfg.trainer.shared_prompt_forward)
        lower0 = self.window.bounds() if self.window is not None else None
        # the cross ratios the update saw: the adaptive window moves on them, trust counts what its floor kept
        ratios: dict[int, list[float]] | None = {} if lower0 is not None or self.trust is not None else None
        trust_metrics: dict[str, float] = {}
        trust = baseline = None
        algo = self.algo
        if self.trust is not None:  # this step's validation check (if any) moves the trust before the update
            trust_metrics = self.trust.observe(request.validation[self.index] if request.validation else None)
            if self.trust.switched():  # every partner cut: trust_cut_to's algorithm, no τ
                algo = CUT_TO[self.trust.cut_to]
            else:
                trust = self.trust.settings()
                baseline = self.trust.baseline(trust[0])
                trust_metrics.update(self.trust.metrics(*trust))
        lr = agent.lr  # this step's rate (agents[i].lr_schedule), for every minibatch of the step
        metrics = learn(agent, pool, request.omega_NN, algo, self.settings, schedule,
                        stale=stale if cfg.trainer.mode == "async" else None, dp_group=self.dp_group,
                        cross_lower0=lower0, observed_ratios=ratios, trust=trust, baseline_N=baseline,
                        before_update=self._sleep_engine_for_training)
        if self.trust is not None:
            if trust is not None:
                trust_metrics.update(self.trust.kept(*trust, ratios or {}))
            trust_metrics.update(self.trust.observe_ratios(ratios or {}))  # the cut (algorithm.trust_cut), if on
        metrics.update(trust_metrics)
        check_update(agent.model, metrics, self.spec, self.step_idx + 1)
        agent.step_lr()
        metrics["lr"] = lr
        sync = getattr(self.engine, "sync_weights", None)
        self._wake_up(gather=sync is None)  # an engine with weights of its own: pushed from the shards
        if sync is not None:
            sync(agent)
        self.step_idx += 1
        failpoint("update", self.step_idx, self.spec.id)
        metrics["busy_s"] = time.perf_counter() - start
        if self.window is not None:  # the bounds it used first, as logged before the window moved here
            metrics = {**self.window.observe(lower0 or [], ratios or {}), **metrics}
        return metrics

    def generate_answers(self, prompts: list[str], params: SamplingParams, batch_size: int = 256) -> list[Trajectory]:
        """Answers for evaluation, ``batch_size`` prompts per engine call: unscored trajectories (prompt index,
        text, finished, log-prob sum, token count), without their token ids; ``params.n`` per prompt, prompt-major."""
        self._wake_up()
        share = my_share(len(prompts), self.rank, self.world)
        with self._own_rng(), diverges_in(self.agent.model, self.spec, "eval", self.step_idx):
            out: list[Trajectory] = generate_answers(self.agent, self.engine, prompts, params, batch_size=batch_size,
                                                     indices=share)
        return out

    def save(self, path: Path) -> None:
        """Weights, tokenizer, optimizer (and reference) plus this worker's random stream (data parallel:
        rank 0 writes the replica, every rank its stream; sharded: every rank its shards, rank 0 the
        gathered Hugging Face export)."""
        if self.spec.fsdp:
            from hacrl.learner import sharding

            sharding.reshard_full(self.agent.model)
            path.mkdir(parents=True, exist_ok=True)
            sharding.save_sharded(self.agent, path, self.dp_group)
            sharding.export_pretrained(self.agent, path, self.rank)
            if self.rank == 0:
                self.agent.save_scheduler(path)
        elif self.rank == 0:
            self.agent.save(path)
        else:
            path.mkdir(parents=True, exist_ok=True)
        failpoint("save", self.step_idx, self.spec.id)
        torch.save(self._rng, path / self._rng_file)
        if self.cfg.trainer.mode == "async" and self.rank == 0:
            self.own.save(path / PENDING_FILE, self.step_idx)
        if self.window is not None and self.rank == 0:
            self.window.save(path)
        if self.trust is not None and self.rank == 0:
            self.trust.save(path)

    def pending_keys(self) -> list[tuple[int, int]]:
        """The ``(tag, position)`` of the own answers kept for a later update (tests and the checkpoint's check)."""
        return self.own.keys()

    def weights_digest(self) -> str:
        """A hash of the trainable weights (replicas of one agent must agree)."""
        return weights_digest(self.agent.model)

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()

    # ---- engines that hold device memory of their own ----------------------------------------------
    def _sleep_engine_for_training(self) -> None:
        from hacrl.learner.sharding import reshard_full

        reshard_full(self.agent.model)  # sharded: back to 1/W of the weights for the update
        sleep = getattr(self.engine, "sleep", None)
        if sleep is not None:
            sleep(self.agent)

    def _wake_up(self, gather: bool = True) -> None:
        """Before generating: a sharded agent gathers its full weights (``sharding.gather_full``; every rank
        does it at the same point), so ranks generate (and recompute π_old) for different prompts without
        collectives. ``gather=False`` after the update for an engine with weights of its own: the model
        stays sharded and ``sync_weights`` gathers it one layer at a time (``rollout.vllm.weight_pieces``)."""
        from hacrl.learner.sharding import gather_full

        if gather:
            gather_full(self.agent.model)
        wake = getattr(self.engine, "wake_up", None)
        if wake is not None:
            wake(self.agent)
