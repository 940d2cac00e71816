"""Agents: a causal LM with its tokenizer, prompt rendering, optimizer and reference model."""

from hacrl.agents.agent import Agent, TokenBatch, load_agent, pad_batch, token_logprobs

__all__ = ["Agent", "TokenBatch", "load_agent", "pad_batch", "token_logprobs"]
