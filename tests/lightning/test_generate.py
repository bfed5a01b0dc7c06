"""Sampling from a causal model: context window, temperature 0, top-k, and the sample callback."""

from __future__ import annotations

import pytest
import torch

from attnmm.lightning.generate import generate


def _next_is_plus_one(vocab: int = 10):
    seen: list[int] = []

    def model(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["tokens"]
        seen.append(ids.size(1))
        return torch.nn.functional.one_hot((ids + 1) % vocab, vocab).float() * 10  # (B, L, V)

    return model, seen


def test_greedy_follows_the_model_and_crops_the_context() -> None:
    model, seen = _next_is_plus_one()
    out = generate(model, torch.tensor([3]), 5, context=2, temperature=0.0)
    assert out.tolist() == [3, 4, 5, 6, 7, 8]
    assert max(seen) == 2


def test_top_1_equals_greedy_and_batches_work() -> None:
    model, _ = _next_is_plus_one()
    prompt = torch.tensor([[1, 2], [7, 8]])
    sampled = generate(model, prompt, 3, context=4, temperature=1.0, top_k=1)
    assert torch.equal(sampled, generate(model, prompt, 3, context=4, temperature=0.0))
    assert sampled.shape == (2, 5)


def test_errors() -> None:
    model, _ = _next_is_plus_one()
    with pytest.raises(ValueError, match="prompt must be \\(T,\\) or \\(B, T\\) token ids with T >= 1"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 2, context=4)
    with pytest.raises(ValueError, match="temperature must be >= 0, got -1"):
        generate(model, torch.tensor([1]), 2, context=4, temperature=-1)
