"""hacrl: Heterogeneous Agent Collaborative Reinforcement Learning.

Several language models that differ in size, architecture, tokenizer or training state answer the same
prompts; all verified answers go into one shared pool; each model learns from the whole pool with HACPO
(arXiv 2603.02604). ``import hacrl`` needs only torch and transformers; everything else loads lazily.
"""

__version__ = "0.1.0"
