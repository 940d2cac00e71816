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
