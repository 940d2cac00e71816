"""Rewards for the per-function metrics tests (loaded as ``file.py:function`` specs, so the scorer's workers
import them too): a TRL one, a per-answer one, the two summed by hand with weights 1 and 0.5, and one paying 2."""


def accuracy(completions, solution, **kwargs):
    return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]


def brevity(completion, sample):
    """Shorter answers score more; None (unscorable) for an empty one."""
    return 1.0 - min(len(completion), 8) / 8 if completion else None


def weighted_by_hand(completions, solution, **kwargs):
    """1.0 x accuracy + 0.5 x brevity, written out: the weighted pair as a single reward (None when both are)."""
    out = []
    for a, b in zip(accuracy(completions, solution), [brevity(c, {}) for c in completions]):
        out.append(1.0 * a if b is None else 1.0 * a + 0.5 * b)
    return out


def doubled(completions, solution, **kwargs):
    """2 for a right answer: a reward outside [0, 1]."""
    return [2.0 * a for a in accuracy(completions, solution)]
