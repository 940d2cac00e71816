"""hacrl: Heterogeneous Agent Collaborative Reinforcement Learning.

Several language models that differ in size, architecture, tokenizer or training state answer the same
prompts; all verified answers go into one shared pool; each model learns from the whole pool with HACPO
(arXiv 2603.02604). ``import hacrl`` needs only torch and transformers; everything else loads lazily.

``from hacrl import HACRLTrainer`` (also ``TrainResult``, ``TrainingFailed``, ``train``) is the Python trainer of
:mod:`hacrl.api`, loaded on first use (a module attribute, PEP 562): ``import hacrl`` itself imports nothing else.
"""

from typing import Any

__version__ = "0.1.0"

_API = ("HACRLTrainer", "TrainResult", "TrainingFailed", "train")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from hacrl import api  # the top layer, imported on first use only (tests/meta/test_layers.py: FACADE)

        return getattr(api, name)
    raise AttributeError(f"module 'hacrl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
