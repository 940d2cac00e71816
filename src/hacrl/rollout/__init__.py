"""Rollout engines behind one protocol: ``hf`` (default, CPU/GPU); ``vllm`` is an optional extra."""

from hacrl.rollout import hf as _hf  # noqa: F401  (registers "hf")
from hacrl.rollout import vllm as _vllm  # noqa: F401  (registers "vllm"; imports vllm itself only when used)
from hacrl.rollout.base import ENGINES, RolloutEngine, Sample, SamplingParams, generate_answers, get_engine

__all__ = ["ENGINES", "RolloutEngine", "Sample", "SamplingParams", "generate_answers", "get_engine"]
