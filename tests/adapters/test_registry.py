"""The adapter registry and the contract every registered adapter keeps."""

from __future__ import annotations

import pytest
import torch

from attnmm.adapters import Adapter, Tokens, get_adapter, list_adapters, register_adapter
from attnmm.masks import Mask


@pytest.mark.parametrize("name", list_adapters())
def test_every_adapter_makes_tokens(name: str) -> None:
    cls = get_adapter(name)
    adapter = cls()
    batch = cls.example_batch(2)
    adapter.eval()
    tokens = adapter(batch)
    assert isinstance(tokens, Tokens)
    assert tokens.x.size(-1) == adapter.out_dim
    assert torch.isfinite(tokens.x).all()
    assert tokens.mask is None or isinstance(tokens.mask, Mask)
    if tokens.x.dim() == 3:  # padded layout: the mask fits the tokens
        B, L, _ = tokens.x.shape
        if tokens.mask is not None:
            tokens.mask.check(L, L, B)
        if tokens.lengths is not None:
            assert tokens.lengths.shape == (B,) and int(tokens.lengths.max()) <= L
    # gradients reach the adapter's parameters
    adapter.train()
    adapter(batch).x.sum().backward()
    assert any(p.grad is not None for p in adapter.parameters())


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="an adapter named 'speech' is already registered"):
        register_adapter("speech")(type("Other", (Adapter,), {"forward": lambda self, batch: None}))


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(KeyError, match="unknown adapter 'smell'; registered: .*'speech'"):
        get_adapter("smell")


def test_only_adapters_register() -> None:
    with pytest.raises(TypeError, match="expects an Adapter subclass"):
        register_adapter("not-an-adapter")(int)  # type: ignore[type-var]
