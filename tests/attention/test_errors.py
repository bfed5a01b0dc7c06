"""Bad input gets an error naming the expected and the actual value."""

from __future__ import annotations

import pytest
import torch

from attnmm import attend
from attnmm.masks import Causal, Graph, Grid, Padding, Window

x = torch.randn(2, 3, 5, 4)


@pytest.mark.parametrize(
    "q,k,v,err,match",
    [
        (torch.randn(5, 4), x, x, ValueError, r"\(B, H, L, E\) \(padded\) or \(N, H, E\) \(packed\), got shape"),
        (x, torch.randn(3, 5, 4), x, ValueError, "same rank"),
        (x, torch.randn(2, 3, 5, 6), x, ValueError, "head dim E, got q E=4 and k E=6"),
        (x, x, torch.randn(2, 3, 6, 4), ValueError, "same number of keys S, got 5 and 6"),
        (x, torch.randn(2, 2, 5, 4), x, ValueError, "number of heads H, got 3, 2, 3"),
        (x, torch.randn(1, 3, 5, 4), x, ValueError, "batch size B, got 2, 1, 2"),
        (x.long(), x, x, TypeError, "q must be a floating-point tensor, got dtype torch.int64"),
        (x, x, x.double(), TypeError, "share a dtype"),
        ([1.0], x, x, TypeError, "q must be a Tensor, got list"),
    ],
)
def test_bad_qkv(q: object, k: object, v: object, err: type, match: str) -> None:
    with pytest.raises(err, match=match):
        attend(q, k, v)  # type: ignore[arg-type]


def test_mask_sized_for_other_lengths() -> None:
    with pytest.raises(ValueError, match=r"L = S = height \* width = 9 patches, got L=5, S=5"):
        attend(x, x, x, Grid(3, 3, 3))
    with pytest.raises(ValueError, match="lengths must be <= S=5"):
        attend(x, x, x, Padding([6, 2]))
    with pytest.raises(ValueError, match="built for a batch of 3 items but the input has batch size 2"):
        attend(x, x, x, Padding([1, 2, 3]) & Window(1, 1))
    nodes = torch.randn(4, 2, 8)
    with pytest.raises(ValueError, match="3 query .* but the input has L=4 queries and S=4 keys"):
        attend(nodes, nodes, nodes, Graph(torch.tensor([[0], [1]]), 3))


def test_layout_mismatch() -> None:
    nodes = torch.randn(4, 2, 8)
    with pytest.raises(TypeError, match=r"padded-layout mask but q is packed \(N, H, E\)"):
        attend(nodes, nodes, nodes, Padding([4]))


def test_bad_options() -> None:
    with pytest.raises(TypeError, match="mask must be an attnmm.masks.Mask or None, got Tensor"):
        attend(x, x, x, torch.ones(5, 5, dtype=torch.bool))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="score must be 'softmax' or 'relu', got 'tanh'"):
        attend(x, x, x, score="tanh")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.5"):
        attend(x, x, x, dropout_p=1.5)
    with pytest.raises(ValueError, match="unknown backend 'fast'; registered: 'auto', 'band'"):
        attend(x, x, x, backend="fast")
    with pytest.raises(ValueError, match="backend 'sdpa' cannot compute this attention: the mask is band"):
        attend(x, x, x, Window(1, 1), backend="sdpa")


def test_bad_bias() -> None:
    with pytest.raises(ValueError, match=r"bias must have shape \(P,\) or \(P, H\) = \(9, 3\).* got shape \(8, 3\)"):
        attend(torch.randn(1, 3, 3, 4), torch.randn(1, 3, 3, 4), torch.randn(1, 3, 3, 4), bias=torch.randn(8, 3))
    with pytest.raises(TypeError, match="bias must be a floating-point Tensor"):
        attend(x, x, x, Causal(), bias=torch.ones(15, dtype=torch.long))
