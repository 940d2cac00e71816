"""The ``vllm`` rollout engine (extra ``hacrl[vllm]``): sampling with one in-process ``vllm.LLM`` per agent.

Design:

- **Lazy.** ``vllm`` is imported inside methods only; without it, constructing the engine raises a
  one-line :class:`~hacrl.errors.InputError`. Options come from ``rollout.engine_options``; an unknown
  key is an InputError naming ``rollout.engine_options.<key>``.
- **One LLM per agent**, keyed by ``agent.id``, built on the agent's first ``generate`` from its
  *current* weights: config + weights are written to a temporary directory (not ``agent.source``, which
  is wrong after a resume or for a LoRA agent) and vLLM loads that. No tokenizer is loaded
  (``skip_tokenizer_init``): prompts are token ids and nothing is detokenized. ``dtype`` defaults to the
  agent's own (vLLM's ``"auto"`` would run a float32 model in float16/bfloat16).
- **Sampling.** Each (prompt, sample) pair is one request with ``n=1``, prompt-major like ``hf``
  (prefix caching shares the prompt's KV). With ``params.seed`` the request for prompt i, sample j gets
  seed ``seed + i*n + j``, so the same call gives the same samples. Generation stops only at
  ``agent.eos_id`` (``ignore_eos`` + ``stop_token_ids``: a model's other EOS ids don't stop it, as in
  ``hf``); the EOS is kept with its log-prob and ``finished`` means "ended with EOS".
- **Log-probs.** vLLM V1 returns *raw* log-probs by default (``logprobs_mode="raw_logprobs"``: the model's
  log-softmax before temperature / top-p), i.e. ``Sample.logps`` holds the temperature-1 policy's
  log-probs at every temperature, unlike ``hf``. The trainer recomputes π_old by the training forward
  pass for this engine; these measure the engine/trainer mismatch and are the behaviour policy of the
  rollout correction (``algorithm.rollout_correction``, ``hacrl.core.correction``: on by default here).
- **Weight sync** (``sync_weights``, after each update): through vLLM's public RPC, not its internals.
  Every engine is built with ``worker_extension_cls=`` :class:`WeightSyncExtension`, which vLLM mixes
  into its worker class; ``LLM.collective_rpc("hacrl_load_weights", ...)`` then hands the worker the
  trained tensors, which it loads with vLLM's own in-place reload (``Worker.reload_weights``: the
  layerwise loader that also redoes the CPU/quantised kernels' weight repacking; a plain
  ``model.load_weights`` on vLLM versions without it) — then the prefix cache is reset
  (``LLM.reset_prefix_cache``). Tensors go in chunks of whole decoder layers (a fused q/k/v or gate/up
  parameter is never split between two reloads), at most ~256 MiB past the first layer, so a merged LoRA
  copy or a message to an out-of-process engine core never holds the whole model. A sharded agent
  (``fsdp``, one engine per replica) takes the same path with pieces from the shards
  (:func:`weight_pieces`): one decoder layer all-gathered at a time on every rank (a collective, in
  step), pushed into that rank's engine, dropped before the next; a LoRA adapter is merged within its
  layer's piece (linear layers; DoRA and embedding adapters refused in one line). The engine itself is
  built from the weights the worker gathered for the first rollout, on every replica at once (vLLM makes
  its own process groups within the replicas' default group); a failed in-place load is a one-line error
  there, not a rebuild (vLLM's engine shutdown destroys the default process group). It works with
  vLLM's multiprocessing on or off. Off is set here unless the user set it: the engine core then lives in
  the agent worker's own process, the tensors are handed over as they are, and scripts need no
  ``__main__`` guard. On (``VLLM_ENABLE_V1_MULTIPROCESSING=1``), they travel as bytes (:func:`to_wire`:
  vLLM's message decoder does not rebuild a tensor inside an RPC argument). Fallback: if the RPC
  fails (an architecture or quantisation vLLM cannot reload in place), the engine is rebuilt from a saved
  copy after every update (slow, always correct; logged once). A LoRA agent sends merged weights under the
  base model's names: W + ΔW per LoRA layer, one tensor at a time (the training model is not modified;
  DoRA and ``modules_to_save`` are refused).
- **Sleep mode** (``enable_sleep_mode``): ``sleep`` frees the engine's GPU memory during training
  (``LLM.sleep(level=1)``: weights to CPU, KV cache dropped); ``wake_up``, ``generate`` and
  ``sync_weights`` wake it. vLLM allows one sleep-mode engine per process (its memory pool is
  process-wide): one agent per process (``backend.name=ray``), else a one-line error. Without sleep mode
  ``sleep``/``wake_up`` are no-ops.

Limits: tensor parallel size 1; an engine lives in its agent worker's process and shares its GPU with
training (size ``gpu_memory_utilization`` for that). Targets vLLM 0.10+ (V1). On CPU (vLLM's CPU build,
``bash scripts/setup_vllm.sh``): ``pytest -m vllm_cpu tests/rollout`` in ``.venv-vllm``; the CPU attention
kernel takes head sizes 32, 64, 80, 96, 112, 128, ... only (not the shipped ``llama-bpe``'s 24), and
``VLLM_CPU_KVCACHE_SPACE`` (GiB) sizes the KV cache. GPU tests: ``pytest -m gpu tests/gpu/test_vllm.py``;
``bash bench/gpu_smoke.sh`` runs them and 3 real steps.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from hacrl.errors import InputError
from hacrl.rollout.base import ENGINES, Sample, SamplingParams

logger = logging.getLogger(__name__)

NEEDS_VLLM = ("rollout.engine=vllm needs vLLM: pip install 'hacrl[vllm]' on a CUDA machine, or its CPU build in "
              "its own environment: bash scripts/setup_vllm.sh")
DTYPES = (None, "auto", "float32", "bfloat16", "float16")
LOGPROBS_MODES = (None, "raw_logprobs", "processed_logprobs")  # newer vLLM only; unset: its default, raw
OPTIONS = "rollout.engine_options"
EXTENSION = "hacrl.rollout.vllm.WeightSyncExtension"  # vLLM imports it by this name in its worker
CHUNK_BYTES = 256 << 20  # a weight-sync message: whole decoder layers up to about this size


def _vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise InputError(NEEDS_VLLM) from None
    return vllm


@ENGINES.register("vllm")
class VLLMEngine:
    def __init__(self, *, gpu_memory_utilization: float = 0.3, max_model_len: int | None = None,
                 enable_sleep_mode: bool = False, dtype: str | None = None, enforce_eager: bool = False,
                 seed: int = 0, enable_prefix_caching: bool = True, max_num_seqs: int | None = None,
                 logprobs_mode: str | None = None, **unknown: Any) -> None:
        if unknown:
            raise InputError(f"{OPTIONS}.{min(unknown)}: unknown option of the vllm engine; valid: dtype, "
                             "enable_prefix_caching, enable_sleep_mode, enforce_eager, gpu_memory_utilization, "
                             "logprobs_mode, max_model_len, max_num_seqs, seed")
        for key, value, ok, rule in (
            ("gpu_memory_utilization", gpu_memory_utilization, 0.0 < gpu_memory_utilization <= 1.0, "in (0, 1]"),
            ("dtype", dtype, dtype in DTYPES, f"one of {DTYPES[1:]}"),
            ("logprobs_mode", logprobs_mode, logprobs_mode in LOGPROBS_MODES, f"one of {LOGPROBS_MODES[1:]}"),
        ):
            if not ok:
                raise InputError(f"{OPTIONS}.{key} must be {rule}, got {value!r}")
        if not _vllm_installed():
            raise InputError(NEEDS_VLLM)
        optional = {"max_model_len": max_model_len, "max_num_seqs": max_num_seqs, "logprobs_mode": logprobs_mode}
        self.llm_kwargs: dict[str, Any] = {
            "gpu_memory_utilization": gpu_memory_utilization, "enable_sleep_mode": enable_sleep_mode,
            "enforce_eager": enforce_eager, "seed": seed, "enable_prefix_caching": enable_prefix_caching,
            "skip_tokenizer_init": True, "worker_extension_cls": EXTENSION,
            **{k: v for k, v in optional.items() if v is not None},  # else vLLM's default
        }
        self.dtype = dtype
        self.sleep_mode = enable_sleep_mode
        self._llms: dict[str, Any] = {}
        self._asleep: set[str] = set()
        self._synced: set[str] = set()  # agents whose weights went in place at least once
        self._rebuild: set[str] = set()  # agents whose in-place load failed: rebuilt after every update
        self._remote: set[str] = set()  # agents whose engine core runs in another process (vLLM multiprocessing)
        self._tmp: str | None = None

    # ---- sampling -----------------------------------------------------------------------------
    def generate(self, agent: Any, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        vllm = _import_vllm()
        llm = self._llm(agent)
        common = {"n": 1, "max_tokens": params.max_new_tokens, "logprobs": 0, "detokenize": False,
                  "ignore_eos": True, "stop_token_ids": [agent.eos_id],
                  "temperature": 0.0 if params.greedy else params.temperature,
                  "top_p": 1.0 if params.greedy else params.top_p}
        rows = [(i, j) for i in range(len(prompts)) for j in range(params.n)]
        seeds = [None if params.seed is None else params.seed + i * params.n + j for i, j in rows]
        outputs = llm.generate([{"prompt_token_ids": list(prompts[i])} for i, _ in rows],
                               [vllm.SamplingParams(**common, seed=s) for s in seeds], use_tqdm=False)
        return [_to_sample(i, out.outputs[0], agent.eos_id) for (i, _), out in zip(rows, outputs, strict=True)]

    def _llm(self, agent: Any) -> Any:
        if agent.id not in self._llms:
            self._llms[agent.id] = self._build(agent)
        self.wake_up(agent)
        return self._llms[agent.id]

    def _build(self, agent: Any) -> Any:
        vllm = _import_vllm()
        if self.sleep_mode and _sleep_pool_in_use():
            raise InputError(f"{OPTIONS}.enable_sleep_mode: vLLM allows one sleep-mode engine per process and "
                             f"agent {agent.id} would be the second; set it false, or use backend.name=ray")
        _check_cpu_head_size(agent)
        from hacrl.agents.shards import is_gathered, is_sharded

        if is_sharded(agent.model) and not is_gathered(agent.model):  # gathers on this rank alone would hang
            raise RuntimeError(f"vllm[{agent.id}]: a sharded agent's engine is built from the weights gathered "
                               "for its first rollout (sharding.gather_full)")
        if os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":  # default: in this process
            self._remote.add(agent.id)
        self._tmp = self._tmp or tempfile.mkdtemp(prefix="hacrl-vllm-")
        path = Path(self._tmp) / f"agent-{agent.index}"
        shutil.rmtree(path, ignore_errors=True)
        start = time.perf_counter()
        save_weights(agent.model, path)
        dtype = self.dtype or str(_base_model(agent.model).dtype).removeprefix("torch.")
        llm = vllm.LLM(model=str(path), dtype=dtype, **self.llm_kwargs)
        logger.info("vllm[%s]: engine built (%s) in %.1fs", agent.id, dtype, time.perf_counter() - start)
        return llm

    # ---- optional hooks -----------------------------------------------------------------------
    def sync_weights(self, agent: Any) -> None:
        """Load the agent's current weights into its engine (no-op before the engine exists; a sharded agent
        still takes part in every gather, as the other ranks' pushes need it)."""
        if agent.id not in self._llms:
            from hacrl.agents.shards import is_sharded

            for _ in weight_pieces(agent.model) if is_sharded(agent.model) else ():
                pass
            return
        if self._sync_in_place(agent):
            return
        self._drop(agent.id)  # release the old engine's memory before building the new one
        self._llms[agent.id] = self._build(agent)

    @torch.no_grad()
    def _sync_in_place(self, agent: Any) -> bool:
        if agent.id in self._rebuild:
            return False
        self.wake_up(agent)
        llm = self._llms[agent.id]
        pieces = weight_pieces(agent.model)
        try:
            for chunk in pieces:
                message = [to_wire(n, t) for n, t in chunk] if agent.id in self._remote else chunk
                loaded = llm.collective_rpc("hacrl_load_weights", args=(message,))
                if min(loaded) < len(chunk):
                    raise RuntimeError(f"vLLM's worker loaded {min(loaded)} of {len(chunk)} tensors")
                del chunk, message  # a sharded agent's gathered piece goes before the next is gathered
        except Exception as exc:  # noqa: BLE001  (whatever broke: fall back to the slow, safe path)
            for _ in pieces:  # a sharded agent: this rank still takes part in the other ranks' gathers
                pass
            from hacrl.agents.shards import is_sharded

            if is_sharded(agent.model):  # vLLM's engine shutdown would tear down the replicas' process group
                raise RuntimeError(f"vllm[{agent.id}]: the in-place weight load failed ({type(exc).__name__}: "
                                   f"{exc}) and a sharded agent's engine cannot be rebuilt; use rollout.engine=hf "
                                   "for this model") from None
            logger.warning("vllm[%s]: in-place weight load failed (%s: %s); rebuilding the engine from a saved "
                           "copy after every update instead", agent.id, type(exc).__name__, exc)
            self._rebuild.add(agent.id)
            return False
        llm.reset_prefix_cache()  # cached prefixes hold KV computed with the old weights
        if agent.id not in self._synced:
            logger.info("vllm[%s]: weights synced in place (collective_rpc)", agent.id)
            self._synced.add(agent.id)
        return True

    def sleep(self, agent: Any) -> None:
        if self.sleep_mode and agent.id in self._llms and agent.id not in self._asleep:
            self._llms[agent.id].sleep(level=1)
            self._asleep.add(agent.id)

    def wake_up(self, agent: Any) -> None:
        if agent.id in self._asleep:
            self._llms[agent.id].wake_up()
            self._llms[agent.id].reset_prefix_cache()
            self._asleep.discard(agent.id)

    def close(self) -> None:
        for agent_id in list(self._llms):
            self._drop(agent_id)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _drop(self, agent_id: str) -> None:
        llm = self._llms.pop(agent_id, None)
        self._asleep.discard(agent_id)
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception as exc:  # noqa: BLE001  (best effort: the references go below anyway)
            logger.debug("vllm[%s]: shutdown: %s", agent_id, exc)
        del llm
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _check_cpu_head_size(agent: Any) -> None:
    """vLLM's CPU attention kernel takes a few head sizes only; say so in one line instead of its traceback."""
    try:
        from vllm.platforms import current_platform
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        if not current_platform.is_cpu():
            return
        sizes = CPUAttentionBackend.get_supported_head_sizes()
    except Exception:  # noqa: BLE001  (another vLLM layout: let vLLM's own check speak)
        return
    config = _base_model(agent.model).config
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if head not in sizes:
        raise InputError(f"agents.{agent.id}.model: head size {head} is not supported by vLLM's CPU attention "
                         f"kernel (supported: {', '.join(map(str, sizes))}); use rollout.engine=hf for this "
                         "model, or a GPU build of vLLM")


def _sleep_pool_in_use() -> bool:
    """Whether vLLM's process-wide sleep-mode memory pool already holds an engine (vLLM asserts it is
    empty when it loads one)."""
    try:
        from vllm.device_allocator.cumem import CuMemAllocator

        return CuMemAllocator.get_instance().get_current_usage() > 0
    except Exception:  # noqa: BLE001  (moved, or built without it: let vLLM's own check speak)
        return False


def _to_sample(prompt_index: int, completion: Any, eos_id: int) -> Sample:
    ids = list(completion.token_ids)
    if eos_id in ids:
        ids = ids[: ids.index(eos_id) + 1]
    logps = tuple(float(completion.logprobs[t][tok].logprob) for t, tok in enumerate(ids))
    return Sample(prompt_index, tuple(ids), logps, bool(ids) and ids[-1] == eos_id)


class WeightSyncExtension:
    """Mixed into vLLM's worker class (``worker_extension_cls``); its methods are called with
    ``LLM.collective_rpc``. ``self`` is vLLM's worker."""

    def hacrl_load_weights(self, weights: list[Any]) -> int:
        """Load checkpoint-format (HF-named) tensors into the running model in place; returns how many
        tensors it was given (vLLM's reload warns about, and keeps, any parameter it did not receive).
        ``weights``: (name, tensor) pairs in process, :func:`to_wire` tuples from another process."""
        weights = [from_wire(*w) if len(w) == 4 else tuple(w) for w in weights]
        reload = getattr(self, "reload_weights", None)
        if reload is not None:  # vLLM's layerwise reload: loads, then redoes the kernels' weight processing
            reload(weights_iterator=iter(weights), is_checkpoint_format=True)
            return len(weights)
        loaded = self.model_runner.model.load_weights(weights)  # type: ignore[attr-defined]  (older vLLM)
        return len(weights) if loaded is None else len(loaded)


def to_wire(name: str, tensor: torch.Tensor) -> tuple[str, str, list[int], bytes]:
    """A tensor as plain values for vLLM's messages to another process (its msgpack decoder turns a
    tensor inside an RPC argument back into a list, not a tensor)."""
    t = tensor.detach().to("cpu").contiguous()
    return name, str(t.dtype).removeprefix("torch."), list(t.shape), t.view(-1).view(torch.uint8).numpy().tobytes()


def from_wire(name: str, dtype: str, shape: list[int], data: bytes) -> tuple[str, torch.Tensor]:
    """Inverse of :func:`to_wire`."""
    return name, torch.frombuffer(bytearray(data), dtype=torch.uint8).view(getattr(torch, dtype)).reshape(shape)


def weight_chunks(weights: Iterator[tuple[str, torch.Tensor]], limit: int = CHUNK_BYTES
                  ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """``weights`` in lists of whole decoder layers (``*.layers.<i>.*`` names stay together: vLLM fuses
    q/k/v and gate/up into one parameter, which must be reloaded at once), each list closed once it holds
    ``limit`` bytes.

    >>> w = [(f"m.layers.{i // 2}.{n}", torch.zeros(4)) for i, n in enumerate("abcdef")]
    >>> [[name for name, _ in chunk] for chunk in weight_chunks(iter(w), limit=20)]
    [['m.layers.0.a', 'm.layers.0.b'], ['m.layers.1.c', 'm.layers.1.d'], ['m.layers.2.e', 'm.layers.2.f']]
    """
    chunk: list[tuple[str, torch.Tensor]] = []
    size, group = 0, None
    for name, tensor in weights:
        head, sep, tail = name.partition(".layers.")
        key = f"{head}.layers.{tail.split('.', 1)[0]}" if sep else name
        if chunk and key != group and size >= limit:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, tensor))
        size += tensor.numel() * tensor.element_size()
        group = key
    if chunk:
        yield chunk


def weight_pieces(model: Any) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """What a weight push sends, a list at a time, in the base model's checkpoint names. Unsharded:
    :func:`hf_weights` in :func:`weight_chunks`. Sharded (FSDP2): one decoder layer, or one tensor outside
    them, gathered from the shards at a time (``hacrl.agents.shards.full_pieces``; a collective unless the
    model is gathered: every rank iterates to the end), a LoRA layer merged within its piece
    (:func:`merged_piece`)."""
    from hacrl.agents.shards import full_pieces, is_sharded

    if not is_sharded(model):
        yield from weight_chunks(hf_weights(model))
        return
    for piece in full_pieces(model):
        chunk = merged_piece(model, piece)
        del piece
        yield chunk
        del chunk


def merged_piece(model: Any, piece: list[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
    """A piece of whole parameters (``model.named_parameters`` names) in the base model's checkpoint
    names; a LoRA model's linear layers merged, W + scaling · B A (the adapter tensors are in the same
    piece: a LoRA layer lies inside one decoder layer). A LoRA embedding or DoRA is refused in one line."""
    from hacrl.agents.lora import is_lora

    if not is_lora(model):
        return piece
    from peft.tuners.lora import LoraLayer

    prefix = "base_model.model."
    full = {name.removeprefix(prefix): t for name, t in piece}
    out = []
    for name, tensor in full.items():
        if ".modules_to_save." in name or ".original_module." in name:
            raise NotImplementedError(f"{name}: LoRA modules_to_save are not supported by the vllm engine")
        if ".lora_" in name:
            continue
        layer_name, sep, leaf = name.partition(".base_layer.")
        if sep:
            layer = model.get_base_model().get_submodule(layer_name)
            if leaf == "weight" and isinstance(layer, LoraLayer) and not layer.merged:
                for adapter in layer.active_adapters:
                    if layer.use_dora.get(adapter, False) or adapter in layer.lora_embedding_A:
                        raise NotImplementedError(f"{layer_name}: a sharded agent's LoRA pushes into the vllm engine "
                                                  "for linear layers only (no DoRA, no embedding adapters)")
                    if adapter in layer.lora_A:
                        delta = full[f"{layer_name}.lora_B.{adapter}.weight"] @ full[f"{layer_name}.lora_A.{adapter}.weight"]
                        delta = delta.T if layer.fan_in_fan_out else delta
                        tensor = tensor + (delta * layer.scaling[adapter]).to(tensor.dtype)
            name = f"{layer_name}.{leaf}"
        out.append((name, tensor))
    return out


def _base_model(model: Any) -> Any:
    from hacrl.agents.lora import is_lora

    return model.get_base_model() if is_lora(model) else model


@torch.no_grad()
def hf_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) in the base model's checkpoint names; a LoRA model's layers come merged, W + ΔW."""
    from hacrl.agents.lora import is_lora

    if not is_lora(model):
        yield from model.state_dict().items()
        return
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    lora_layers: dict[str, Any] = {n: m for n, m in base.named_modules() if isinstance(m, LoraLayer)}
    for name, tensor in base.state_dict().items():
        if ".modules_to_save." in name or ".original_module." in name:
            raise NotImplementedError(f"{name}: LoRA modules_to_save are not supported by the vllm engine")
        if ".lora_" in name:
            continue
        if ".base_layer." in name:
            layer_name, _, leaf = name.partition(".base_layer.")
            name = f"{layer_name}.{leaf}"
            layer = lora_layers[layer_name]
            if leaf == "weight" and not layer.merged:
                for adapter in layer.active_adapters:
                    if layer.use_dora.get(adapter, False):
                        raise NotImplementedError(f"{layer_name}: DoRA is not supported by the vllm engine")
                    if adapter in layer.lora_A or adapter in layer.lora_embedding_A:
                        tensor = tensor + layer.get_delta_weight(adapter).to(tensor.dtype)
        yield name, tensor


def save_weights(model: Any, path: Path) -> None:
    """A checkpoint vLLM can load: the base model's ``config.json`` + ``model.safetensors`` of
    :func:`weight_pieces` (CPU copies, so tied tensors are written twice; loaders skip the tied head)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    _base_model(model).config.save_pretrained(path)
    tensors = {name: t.detach().to("cpu", copy=True).contiguous() for chunk in weight_pieces(model) for name, t in chunk}
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
