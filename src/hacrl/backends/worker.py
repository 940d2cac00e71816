"""One agent's side of training: everything the agent owns, behind a message interface that carries
only tokenizer-neutral data, so that it runs the same in the trainer's process (``local`` backend) or
in its own Ray actor on its own devices (``ray`` backend).

An ``AgentWorker`` owns the model, tokenizer, optimizer, optional reference model, rollout engine and
its own random stream. In and out go problem texts, answers as ``Trajectory`` records (texts and scalars),
the step's pool without token ids, ω and capabilities, and metrics. The worker keeps its own answers' token ids and
rollout log-probs from ``rollout`` to ``update`` itself: they never leave it.

Each worker samples from its own seeded torch RNG stream (swapped in around generation), so an agent's
answers do not depend on which other agents ran before it in the same process: the local and the Ray
backend draw the same samples for the same seed.

Data parallel (``agents[i].data_parallel = W``, Ray only): W workers hold replicas of one agent and form
a ``torch.distributed`` group (NCCL on GPUs, Gloo on CPUs). Rank r answers its contiguous share of the
prompts from its own random stream; the ranks exchange their own answers' tokens so each can build the
whole view; in the update each rank runs every W-th micro-batch and gradients are summed before every
optimizer step, so the replicas stay identical (``learner.update_learner``). Rank 0 writes the checkpoint.
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

from hacrl.agents.agent import DTYPES, Agent, load_agent, token_logprobs
from hacrl.backends.devices import check_device, warn_slow_cpu_precision
from hacrl.backends.resolve import agent_seed, make_engine, resolve_model_path
from hacrl.config import Config, Derived
from hacrl.errors import DamagedCheckpoint, InputError, TrainingDiverged
from hacrl.failpoints import failpoint
from hacrl.learner.algorithms import ALGORITHMS, derive_for
from hacrl.learner.request import UpdateRequest
from hacrl.learner.update import (
    LossSettings,
    ViewRow,
    assign_advantages,
    assign_staleness_weights,
    build_view,
    minibatches,
    update_learner,
)
from hacrl.pool import TrajectoryPool
from hacrl.rollout import SamplingParams
from hacrl.rollout.base import Sample, logprob_gap
from hacrl.types import Trajectory

logger = logging.getLogger(__name__)

RNG_FILE = "rng.pt"
PENDING_FILE = "own_pending.pt"  # the asynchronous mode: the worker's version and its own answers not trained on yet


class AgentWorker:
    """One agent of the run ``cfg`` (the ``index``-th of ``cfg.agents``); ``resume_from`` a checkpoint.
    ``derived``: the run's derived values (``hacrl.config.derive``), resolved once by the trainer and handed to
    every worker; None (a worker built on its own): ``derive_for(cfg)``.

    ``env`` is set in the worker's process first (the Ray backend forwards ``HACRL_FAILPOINT`` with it)."""

    def __init__(self, cfg: Config, index: int, derived: Derived | None = None, *, resume_from: Path | None = None,
                 step: int = 0,
                 env: dict[str, str] | None = None, threads: int | None = None, rank: int = 0,
                 world: int = 1, defer_setup: bool = False, quiet: bool = False) -> None:
        os.environ.update(env or {})
        if quiet:  # a Ray actor: no per-process progress bars interleaved in the driver's output
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            hf_logging.set_verbosity_error()
        if threads:
            torch.set_num_threads(threads)
        self.cfg = cfg
        self.index = index
        self.rank, self.world = rank, world
        os.environ["HACRL_RANK"] = str(rank)  # rank-targeted failpoints (hacrl.failpoints)
        self.dp_group: Any = None  # set by init_data_parallel
        self.spec = cfg.agents[index]
        self.algo = ALGORITHMS.get(cfg.algorithm.name)
        self.derived = derived if derived is not None else derive_for(cfg)
        a = cfg.algorithm
        self.settings = LossSettings(a.clip_low, a.clip_high, a.alpha, a.delta, a.delta_step, a.max_log_ratio,
                                     self.spec.kl_coef, a.imitation_coef, self.derived.rollout_correction,
                                     a.rollout_correction_cap)
        self.step_idx = step
        self._resume_from = resume_from
        # own answers kept from rollout to update, by (round tag, position in the round): in lock-step the step's
        # (tag -1, replaced by every rollout); in the asynchronous mode every round's until its update takes
        # them, so answers a later update takes survive the rounds in between (``update``'s ``own_keys``)
        self._own: dict[tuple[int, int], Sample] = {}
        if not defer_setup:
            self.setup()

    def setup(self) -> None:
        """Build the engine and load the agent (a Ray actor does it in a method call, not in its
        constructor, so that a failure arrives with its original exception)."""
        cfg, resume_from = self.cfg, self._resume_from
        self.engine = make_engine(cfg)
        self.agent = self._load(resume_from)
        self._rng = torch.Generator().manual_seed(agent_seed(cfg.run.seed, self.index) + 104_729 * self.rank).get_state()
        rng_file = resume_from / "agents" / self.spec.id / self._rng_file if resume_from else None
        if rng_file is not None and rng_file.is_file():
            self._rng = _from_checkpoint(rng_file, lambda: torch.load(rng_file, weights_only=True))
        pending = resume_from / "agents" / self.spec.id / PENDING_FILE if resume_from else None
        if pending is not None and pending.is_file():
            self._load_pending(pending)

    def _load(self, resume_from: Path | None) -> Agent:
        spec, cfg = self.spec, self.cfg
        check_device(spec.device, f"agents.{spec.id}.device")
        warn_slow_cpu_precision(spec)
        field = f"agents.{spec.id}.model"
        try:
            path = resume_from / "agents" / spec.id if resume_from else resolve_model_path(spec.model, field)
            if spec.lora:
                resolve_model_path(spec.model, field)
        except FileNotFoundError as exc:  # an unknown builtin:<name>
            raise InputError(f"{field}: {exc}") from None
        lora = spec.lora.model_dump() if spec.lora else None
        # a LoRA agent resumes as its base model plus the checkpoint's adapter
        agent = load_agent(
            spec.id, self.index, resolve_model_path(spec.model, field) if lora else path, lora=lora,
            adapter_path=path if lora and resume_from else None,
            dtype=spec.dtype, device=spec.device, template=spec.template,
            system_prompt=spec.system_prompt, chat_template_kwargs=spec.chat_template_kwargs,
            max_prompt_tokens=spec.max_prompt_tokens,
            max_answer_tokens=spec.max_answer_tokens or cfg.rollout.max_new_tokens,
        )
        agent.source = spec.model
        if spec.autocast:
            agent.autocast_dtype = DTYPES[spec.autocast]
        if spec.gradient_checkpointing:
            from hacrl.agents.agent import enable_checkpointing

            enable_checkpointing(agent.model)  # non-reentrant, without transformers 5's FutureWarning
        agent.configure_optimizer(lr=spec.lr, weight_decay=spec.weight_decay)
        if spec.kl_coef > 0:
            if resume_from and (path / "reference").is_dir():
                from transformers import AutoModelForCausalLM

                ref = _from_checkpoint(path / "reference", lambda: AutoModelForCausalLM.from_pretrained(
                    path / "reference", dtype=agent.model.dtype))
                agent.ref_model = ref.to(agent.device).eval().requires_grad_(False)
            else:
                agent.enable_reference()
        if resume_from:
            _from_checkpoint(path / "optimizer.pt", lambda: agent.load_optimizer(path))
        return agent

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
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return f"tcp://{_node_ip()}:{port}"

    def init_data_parallel(self, address: str) -> None:
        """Join this agent's data-parallel group (every rank calls it at the same time)."""
        import torch.distributed as dist

        backend = "nccl" if self.agent.device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method=address, rank=self.rank, world_size=self.world)
        self.dp_group = dist.group.WORLD
        if self.spec.fsdp:  # shard now that the group exists; a sharded checkpoint's shards go back in
            from hacrl.learner import sharding

            mixed = self.spec.fsdp_mixed_precision
            sharding.shard_agent(self.agent, self.dp_group, offload=self.spec.cpu_offload, lr=self.spec.lr,
                                 weight_decay=self.spec.weight_decay, compute_dtype=DTYPES[mixed] if mixed else None)
            ckpt = self._resume_from / "agents" / self.spec.id if self._resume_from else None
            if ckpt is not None and sharding.has_sharded(ckpt):
                sharding.load_sharded(self.agent, ckpt, self.dp_group)

    def _my_share(self, n: int) -> range:
        per = -(-n // self.world)
        return range(min(n, self.rank * per), min(n, (self.rank + 1) * per))

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
        pass's log-probs and the gap to the
        engine's is returned as metrics (rollout/training mismatch). ``tag`` (the asynchronous mode): the
        round's number, its answers kept as ``(tag, position in the returned list)`` beside earlier rounds' not
        yet trained on; None: the step's answers replace the last step's."""
        start = time.perf_counter()
        self._wake_up()
        share = self._my_share(len(prompts))
        rendered = [self.agent.render_prompt(prompts[i]) for i in share]
        with self._own_rng(), self._diverges_in("rollout", self.step_idx + 1):
            params = dataclasses.replace(params, seed=int(torch.randint(0, 2**31 - 1, (1,))))
            samples = self.engine.generate(self.agent, rendered, params) if rendered else []
        failpoint("rollout", self.step_idx + 1, self.spec.id)
        if not all(math.isfinite(sum(s.logps)) for s in samples):
            raise self._diverged("rollout", self.step_idx + 1, "the sampled answers' log-probabilities are not finite")
        metrics: dict[str, float] = {}
        if (self.derived.recompute_old_logprobs if recompute is None else recompute) and samples:
            recompute_start = time.perf_counter()
            recomputed = self._recompute_logprobs(rendered, samples)
            metrics["busy_old_logprobs_s"] = time.perf_counter() - recompute_start
            metrics.update(logprob_gap(samples, recomputed))
            samples = recomputed
        samples = [dataclasses.replace(s, prompt_index=share.start + s.prompt_index) for s in samples]
        gathered = self._gather(samples)
        if tag is None:
            self._own = {(-1, i): s for i, s in enumerate(gathered)}
        else:
            self._own.update({(tag, i): s for i, s in enumerate(gathered)})
        texts = self.agent.decode_answers([list(s.token_ids) for s in samples])
        out = [Trajectory(s.prompt_index, self.index, text, s.finished, float(sum(s.logps)), len(s.token_ids))
               for s, text in zip(samples, texts, strict=True)]
        metrics["busy_s"] = time.perf_counter() - start
        return out, metrics

    def _gather(self, samples: list[Sample]) -> list[Sample]:
        """Every rank's answers, in rank order (each rank trains on the whole view)."""
        if self.dp_group is None:
            return samples
        import torch.distributed as dist

        parts: list[Any] = [None] * self.world
        dist.all_gather_object(parts, samples, group=self.dp_group)
        return [s for part in parts for s in part]

    @torch.no_grad()
    def _recompute_logprobs(self, rendered: list[list[int]], samples: list[Sample]) -> list[Sample]:
        """π_old as the training forward pass sees it (temperature ≠ 1, top-p < 1, or another engine); the
        engine's own log-probs stay in ``behav_logps`` (the rollout correction's behaviour policy)."""
        out = []
        mb = self.cfg.trainer.micro_batch_size
        agent = self.agent
        for start in range(0, len(samples), mb):
            chunk = samples[start : start + mb]
            batch = agent.batch([rendered[s.prompt_index] for s in chunk], [list(s.token_ids) for s in chunk])
            with agent.autocast():
                logp_BT = token_logprobs(agent.model, batch).cpu()
            for i, s in enumerate(chunk):
                lp = tuple(logp_BT[i][batch.answer_mask_BT[i]].tolist())
                out.append(Sample(s.prompt_index, s.token_ids, lp, s.finished, behav_logps=s.logps))
        return out

    def update(self, request: UpdateRequest) -> dict[str, Any]:
        """Train on ``request.pool``; the worker's own answers get back their token ids and log-probs.

        ``request.cross_lower0``: the adaptive cross window's ℓ_0 per source agent (None: the fixed 1 − δ); then
        the result also holds ``cross_ratios``, source → the ratios of that source's answers the update saw.

        The asynchronous mode (docs/async.md) passes ``own_keys`` (used up here), ``version_gaps`` and ``forget``
        (``UpdateRequest``). Own answers with a gap train against π_prox, this version's pass, with the
        staleness weight (``assign_staleness_weights``); the result then holds ``staleness_is/*``."""
        start = time.perf_counter()
        own_keys, version_gaps, cross_lower0 = request.own_keys, request.version_gaps, request.cross_lower0
        pool = self._with_own_tokens(request.pool, None if own_keys is None else list(own_keys))
        for key in request.forget:
            self._own.pop(tuple(key), None)  # type: ignore[arg-type]
        agent, cfg = self.agent, self.cfg
        prompts = {i: p.prompt for i, p in enumerate(pool.problems)}
        rows = build_view(agent, pool, self.algo, prompts)
        stale_metrics = self._correct_stale(rows, pool, list(version_gaps)) if version_gaps is not None else {}
        assign_advantages(rows, agent.index, self.algo, request.omega_NN)
        mbs = minibatches(rows, self.derived.minibatch_size, self.derived.rows_per_prompt,
                          seed=cfg.run.seed * 1_000_003 + self.step_idx * 131 + agent.index)
        self._sleep_engine_for_training()
        ratios: dict[int, list[float]] | None = {} if cross_lower0 is not None else None
        metrics: dict[str, Any] = update_learner(
            agent, mbs, self.algo, self.settings, micro_batch_size=cfg.trainer.micro_batch_size,
            grad_clip=self.spec.grad_clip, dp_group=self.dp_group, shared_prompt=cfg.trainer.shared_prompt_forward,
            cross_lower0=cross_lower0, observed_ratios=ratios)
        self._check_update(metrics)
        sync = getattr(self.engine, "sync_weights", None)
        self._wake_up(gather=sync is None)  # an engine with weights of its own: pushed from the shards
        if sync is not None:
            sync(agent)
        self.step_idx += 1
        failpoint("update", self.step_idx, self.spec.id)
        metrics["optimizer_steps"] = len(mbs)
        metrics["truncated_frac"] = sum(r.truncated for r in rows) / max(len(rows), 1)
        metrics.update(stale_metrics)
        metrics["busy_s"] = time.perf_counter() - start
        if ratios is not None:
            metrics["cross_ratios"] = ratios
        return metrics

    # ---- divergence: stop where a loss, gradient, weight or log-prob becomes non-finite ------------------
    def _check_update(self, metrics: dict[str, float]) -> None:
        """After the optimizer steps: the losses and gradient norm the learner reported, then the weights."""
        step = self.step_idx + 1
        bad = sorted(k for k, v in metrics.items() if ("loss" in k or k in ("grad_norm", "kl"))
                     and not math.isfinite(v))
        if bad:
            kinds = [w for w, hit in (("loss", any("loss" in k for k in bad)), ("KL", "kl" in bad),
                                      ("gradient norm", "grad_norm" in bad)) if hit]
            shown = ", ".join(f"{k} {metrics[k]}" for k in bad)
            raise self._diverged("update", step, f"its {' and '.join(kinds)} became non-finite ({shown})")
        # this rank's shard of a sharded parameter (no collective here: the metrics above are the same on every rank)
        params = [(n, _local(p)) for n, p in self.agent.model.named_parameters() if p.requires_grad]
        flags = [torch.isfinite(p).all() for _, p in params if p.numel()]
        if flags and not bool(torch.stack(flags).all()):
            name = next(n for n, p in params if not bool(torch.isfinite(p).all()))
            raise self._diverged("update", step, f"its weights became non-finite ({name})")

    @contextlib.contextmanager
    def _diverges_in(self, phase: str, step: int) -> Iterator[None]:
        """An engine that meets non-finite logits raises FloatingPointError: say which agent, step and phase."""
        try:
            yield
        except (FloatingPointError, RuntimeError) as exc:
            if not isinstance(exc, FloatingPointError) and "probability tensor contains" not in str(exc):
                raise  # (transformers' generate samples with torch.multinomial, which says this)
            largest = max((float(_local(p).abs().max()) for p in self.agent.model.parameters()
                           if _local(p).numel()), default=0.0)
            what = str(exc) if isinstance(exc, FloatingPointError) else "non-finite sampling probabilities"
            raise self._diverged(phase, step, f"{what} (largest weight magnitude {largest:.3g})") from None

    def _diverged(self, phase: str, step: int, what: str) -> TrainingDiverged:
        spec = self.spec
        return TrainingDiverged(f"agent {spec.id!r} diverged at step {step} ({phase}): {what}; lower "
                                f"agents.{spec.id}.lr (now {spec.lr:g}) or agents.{spec.id}.grad_clip "
                                f"(now {spec.grad_clip:g})")

    def _correct_stale(self, rows: list[ViewRow], pool: TrajectoryPool, version_gaps: list[int]) -> dict[str, float]:
        """The decoupled objective on own rows written by an older version (docs/async.md): π_prox recomputed
        by this version's pass for the stale ones, and their weights; ``staleness_is/*`` metrics."""
        if len(version_gaps) != len(pool.trajectories):
            raise RuntimeError(f"agent {self.spec.id}: {len(version_gaps)} version gaps for {len(pool.trajectories)} "
                               f"answers")
        # the own rows of build_view, in its order: pool.scored()'s stable sort by prompt, own answers only
        pairs = sorted(zip(pool.trajectories, version_gaps, strict=True), key=lambda x: x[0].prompt_index)
        gaps = [g for t, g in pairs if t.source == self.index and t.reward is not None]
        own = [r for r in rows if r.is_own]
        stale = [r for r, g in zip(own, gaps, strict=True) if g > 0]
        prox = self._recompute_logprobs([r.prompt_ids for r in stale], [
            Sample(i, tuple(r.answer_ids), (), True) for i, r in enumerate(stale)]) if stale else []
        metrics = assign_staleness_weights(
            own, gaps, {id(r): s.logps for r, s in zip(stale, prox, strict=True)},
            mode=self.cfg.async_.staleness_correction, cap=self.cfg.async_.staleness_cap,
            max_log_ratio=self.cfg.algorithm.max_log_ratio,
            engine_behaviour=self.derived.rollout_correction != "off")
        return {f"staleness_is/{k}": v for k, v in metrics.items()}

    def _with_own_tokens(self, pool: TrajectoryPool, keys: list[tuple[int, int]] | None = None) -> TrajectoryPool:
        own_positions = [i for i, t in enumerate(pool.trajectories) if t.source == self.index]
        if keys is None:  # lock-step: the pool holds exactly the step's own answers
            if len(own_positions) != len(self._own):
                raise RuntimeError(f"agent {self.spec.id}: the pool holds {len(own_positions)} of its answers, "
                                   f"it generated {len(self._own)} (update without a matching rollout)")
            samples = list(self._own.values())
        else:
            missing = [tuple(k) for k in keys if tuple(k) not in self._own]
            if len(keys) != len(own_positions) or missing:
                raise RuntimeError(f"agent {self.spec.id}: the pool holds {len(own_positions)} of its answers for "
                                   f"{len(keys)} keys; {len(missing)} not kept here (update without a matching "
                                   f"rollout)")
            samples = [self._own.pop(tuple(k)) for k in keys]  # type: ignore[arg-type]
        trajectories = list(pool.trajectories)
        for i, s in zip(own_positions, samples, strict=True):
            t = trajectories[i]
            if t.prompt_index != s.prompt_index or t.num_tokens != len(s.token_ids):
                raise RuntimeError(f"agent {self.spec.id}: pool answer {i} does not match its rollout")
            behav = float(sum(s.behav_logps)) if s.behav_logps is not None else None
            trajectories[i] = dataclasses.replace(t, token_ids=s.token_ids, token_logps=s.logps, behav_logp_sum=behav)
        return TrajectoryPool(pool.problems, trajectories)

    def generate_answers(self, prompts: list[str], params: SamplingParams, batch_size: int = 256) -> list[Trajectory]:
        """Answers for evaluation, ``batch_size`` prompts per engine call: unscored trajectories (prompt index,
        text, finished, log-prob sum, token count), without their token ids; ``params.n`` per prompt, prompt-major."""
        self._wake_up()
        share = self._my_share(len(prompts))
        out: list[Trajectory] = []
        with self._own_rng(), self._diverges_in("eval", self.step_idx):
            for start in range(share.start, share.stop, batch_size):
                rendered = [self.agent.render_prompt(p) for p in prompts[start : min(start + batch_size, share.stop)]]
                samples = self.engine.generate(self.agent, rendered, params)
                texts = self.agent.decode_answers([list(s.token_ids) for s in samples])
                out.extend(Trajectory(start + s.prompt_index, self.index, text, s.finished, float(sum(s.logps)),
                                      len(s.token_ids)) for s, text in zip(samples, texts, strict=True))
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
        elif self.rank == 0:
            self.agent.save(path)
        else:
            path.mkdir(parents=True, exist_ok=True)
        failpoint("save", self.step_idx, self.spec.id)
        torch.save(self._rng, path / self._rng_file)
        if self.cfg.trainer.mode == "async" and self.rank == 0:
            self._save_pending(path / PENDING_FILE)

    def _save_pending(self, path: Path) -> None:
        """The asynchronous mode: this worker's version and its own answers not yet trained on (their token ids
        and log-probs never leave the worker; without them the pool's pending own answers could not train)."""
        own = [[tag, pos, s.prompt_index, list(s.token_ids), list(s.logps), s.finished,
                None if s.behav_logps is None else list(s.behav_logps)] for (tag, pos), s in self._own.items()]
        torch.save({"version": self.step_idx, "own": own}, path)

    def _load_pending(self, path: Path) -> None:
        state = _from_checkpoint(path, lambda: torch.load(path, weights_only=True))
        self.step_idx = int(state["version"])
        self._own = {(int(tag), int(pos)): Sample(int(i), tuple(ids), tuple(lp), bool(fin),
                                                 None if behav is None else tuple(behav))
                     for tag, pos, i, ids, lp, fin, behav in state["own"]}

    def pending_keys(self) -> list[tuple[int, int]]:
        """The ``(tag, position)`` of the own answers kept for a later update (tests and the checkpoint's check)."""
        return sorted(self._own)

    def weights_digest(self) -> str:
        """A hash of the trainable weights (replicas of one agent must agree)."""
        import hashlib

        from hacrl.learner.sharding import gather_full

        h = hashlib.sha256()
        gather_full(self.agent.model)  # sharded: the full weights (every rank calls it)
        for name, p in self.agent.model.named_parameters():
            h.update(name.encode())
            # a copy: numpy() pins a tensor's storage, which FSDP must free when it reshards
            h.update(p.detach().cpu().flatten().clone().view(torch.uint8).numpy().tobytes())
        return h.hexdigest()

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


def _local(p: torch.Tensor) -> torch.Tensor:
    """A parameter's values held here: the local shard of a DTensor (FSDP), else the tensor itself."""
    to_local = getattr(p, "to_local", None)
    return (to_local() if to_local is not None else p).detach()


def _from_checkpoint(path: Path, load: Any) -> Any:
    """``load()``, with a file of the checkpoint that cannot be read reported as one line naming it."""
    try:
        return load()
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a cut-short zip, a bad header, a pickle error: a damaged file
        ckpt = path.parents[2] if path.parent.parent.name == "agents" else path
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        raise DamagedCheckpoint(f"checkpoint {ckpt} is damaged: {path.relative_to(ckpt)} cannot be read "
                                f"({type(exc).__name__}: {lines[0][:160] if lines else ''}); resume from an "
                                f"earlier checkpoint (--resume <checkpoints/step-*>) or start over (--overwrite)"
                                ) from None


def _node_ip() -> str:
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # noqa: BLE001 - outside Ray: this host
        return "127.0.0.1"
