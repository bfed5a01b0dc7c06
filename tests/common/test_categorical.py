"""CategoricalEncoder: the sum of one embedding per column equals a linear layer on the one-hot columns."""

from __future__ import annotations

import pytest
import torch

from attnmm.nn import CategoricalEncoder


def test_equals_a_linear_layer_on_the_one_hot_columns() -> None:
    torch.manual_seed(0)
    cards = [5, 1, 3, 7]
    enc = CategoricalEncoder(cards, d_model=6)
    x = torch.stack([torch.randint(0, k, (20,)) for k in cards], dim=1)  # (N, F)
    one_hot = torch.cat([torch.nn.functional.one_hot(x[:, c], k).float() for c, k in enumerate(cards)], dim=1)
    weight = torch.cat([e.weight for e in enc.embeddings])  # (sum K_c, D)
    torch.testing.assert_close(enc(x), one_hot @ weight)
    enc(x).square().sum().backward()  # every table gets the gradient of its rows
    for c, e in enumerate(enc.embeddings):
        assert e.weight.grad is not None
        unused = torch.ones(cards[c], dtype=torch.bool)
        unused[x[:, c]] = False
        assert not e.weight.grad[unused].any()


def test_repr_empty_input_and_errors() -> None:
    enc = CategoricalEncoder([3, 2], d_model=4)
    assert repr(enc) == "CategoricalEncoder([3, 2], d_model=4)"
    assert enc(torch.zeros(0, 2, dtype=torch.long)).shape == (0, 4)
    with pytest.raises(ValueError, match=r"column 1 holds categories 0 to 2, but its table has 2"):
        enc(torch.tensor([[0, 2], [1, 0]]))
    with pytest.raises(ValueError, match=r"integer categories of shape \(N, F\) = \(N, 2\)"):
        enc(torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"integer categories of shape"):
        enc(torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="non-empty list"):
        CategoricalEncoder([], 4)
    with pytest.raises(ValueError, match=r"cardinalities\[1\] must be an int >= 1"):
        CategoricalEncoder([3, 0], 4)
