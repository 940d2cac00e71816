"""``selected_logprobs`` against the textbook ``log_softmax(...).gather(...)``: values and gradients in
float64 for every chunking path, and its float32 result from bf16 logits."""

from __future__ import annotations

import pytest
import torch

from hacrl.core.logprobs import _chunks, selected_logprobs


def _textbook(logits_BTV: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits_BTV, dim=-1).gather(-1, targets_BT[..., None]).squeeze(-1)


def test_hand_computed_values():
    # row 0: uniform over 4 → log(1/4); row 1: z = (2, 0, 0, 0), target 0 → 2 − log(e² + 3)
    z = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]]], dtype=torch.float64)
    got = selected_logprobs(z, torch.tensor([[3, 0]]))
    want = torch.tensor([[-torch.log(torch.tensor(4.0)).item(), 2 - torch.log(torch.tensor(7.38905609893065 + 3)).item()]],
                        dtype=torch.float64)
    assert torch.allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("chunk_bytes", [1, 4 * 7 * 3, 4 * 7 * 5 * 2, 1 << 30])  # per position, sub-row, rows, all
def test_values_and_gradients_equal_the_textbook_formula(chunk_bytes):
    g = torch.Generator().manual_seed(0)
    z = (3 * torch.randn(4, 5, 7, generator=g, dtype=torch.float64)).requires_grad_(True)
    y = torch.randint(0, 7, (4, 5), generator=g)
    w = torch.randn(4, 5, generator=g, dtype=torch.float64)  # an arbitrary upstream gradient
    want = _textbook(z, y)
    (want_grad,) = torch.autograd.grad((want * w).sum(), z)
    got = selected_logprobs(z, y, chunk_bytes=chunk_bytes)
    (got_grad,) = torch.autograd.grad((got * w).sum(), z)
    assert got.dtype == torch.float64
    assert torch.allclose(got, want, atol=1e-12, rtol=0)
    assert torch.allclose(got_grad, want_grad, atol=1e-12, rtol=0)


def test_chunks_cover_every_position_once():
    for shape, budget in [((3, 10, 4), 16 * 3), ((3, 10, 4), 16 * 25), ((2, 1, 4), 1), ((5, 3, 2), 1 << 20)]:
        seen = torch.zeros(shape[:2], dtype=torch.long)
        for b0, b1, t0, t1 in _chunks(torch.Size(shape), budget):
            seen[b0:b1, t0:t1] += 1
        assert torch.equal(seen, torch.ones_like(seen)), (shape, budget)


@pytest.mark.parametrize("shape, budget, want", [
    # 3 positions of 10 floats (40 bytes each) fit 120 bytes exactly: one whole row per block
    ((2, 3, 10), 120, [(0, 1, 0, 3), (1, 2, 0, 3)]),
    # rows of one position (8 bytes): four rows fit 32 bytes, so one block holds them all
    ((4, 1, 2), 32, [(0, 4, 0, 1)]),
    # a budget below one position still moves one position at a time, never two
    ((1, 3, 10), 10, [(0, 1, 0, 1), (0, 1, 1, 2), (0, 1, 2, 3)]),
    # two positions of a row per block (80 of 100 bytes), the last block the remainder
    ((1, 3, 10), 100, [(0, 1, 0, 2), (0, 1, 2, 3)]),
])
def test_chunks_are_as_large_as_the_budget_allows_and_no_larger(shape, budget, want):
    blocks = _chunks(torch.Size(shape), budget)
    assert blocks == want
    vocab = shape[2]
    for b0, b1, t0, t1 in blocks:  # float32 bytes of a block: within the budget, or one position if it is smaller
        assert (b1 - b0) * (t1 - t0) * vocab * 4 <= max(budget, vocab * 4)


def test_float32_logprobs_whatever_torchs_default_dtype():
    z = torch.randn(2, 3, 5)
    y = torch.zeros(2, 3, dtype=torch.long)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = selected_logprobs(z, y)
    finally:
        torch.set_default_dtype(default)
    assert got.dtype == torch.float32  # float32 logits give float32 log-probs, as the docstring says


def test_bf16_logits_give_float32_logprobs_and_bf16_gradients():
    g = torch.Generator().manual_seed(1)
    z32 = torch.randn(2, 3, 50, generator=g)
    z = z32.to(torch.bfloat16).requires_grad_(True)
    y = torch.randint(0, 50, (2, 3), generator=g)
    got = selected_logprobs(z, y)
    assert got.dtype == torch.float32
    assert torch.allclose(got, _textbook(z.detach().float(), y), atol=1e-6)
    got.sum().backward()
    ref = z.detach().float().requires_grad_(True)
    _textbook(ref, y).sum().backward()
    assert z.grad is not None and z.grad.dtype == torch.bfloat16
    assert torch.allclose(z.grad.float(), ref.grad, atol=1e-2)  # bf16 rounding of onehot − softmax


def test_shape_mismatch_is_one_line():
    with pytest.raises(ValueError, match="logits"):
        selected_logprobs(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))
    # [B, T] logits with [B, T] targets: the targets match logits.shape[:2], the logits still are not [B, T, V]
    with pytest.raises(ValueError, match=r"logits \[B, T, V\] and targets \[B, T\] expected, got \(2, 3\)"):
        selected_logprobs(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long))
