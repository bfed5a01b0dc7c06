"""PoolingClassifier: the MLP head (hidden layers of width D before the output layer) and sum pooling."""

from __future__ import annotations

import pytest
import torch

from attnmm.adapters import Tokens
from attnmm.nn import PoolingClassifier


def test_hidden_layers_compose_before_the_output_layer() -> None:
    torch.manual_seed(0)
    h = torch.randn(7, 8)  # packed nodes of two graphs
    tokens = Tokens(h, batch=torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    head = PoolingClassifier(8, 3, hidden_layers=2).eval()
    z = torch.stack([h[:3].mean(0), h[3:].mean(0)])  # (B, D): mean per graph
    for layer in head.hidden or []:
        z = layer(z)
    torch.testing.assert_close(head(h, tokens), head.linear(z))
    assert sum(isinstance(m, torch.nn.Linear) for m in head.modules()) == 3
    plain = PoolingClassifier(8, 3)  # no hidden layers: the checkpoints of before load as they were
    assert plain.hidden is None and set(plain.state_dict()) == {"linear.weight", "linear.bias"}


def test_sum_pooling_adds_each_items_tokens() -> None:
    torch.manual_seed(1)
    h = torch.randn(7, 4)  # packed nodes of two graphs
    head = PoolingClassifier(4, 2, pooling="sum")
    packed = Tokens(h, batch=torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    torch.testing.assert_close(head.pool(h, packed), torch.stack([h[:3].sum(0), h[3:].sum(0)]))
    padded = torch.randn(2, 5, 4)  # the padded layout: only the first lengths[b] tokens count
    got = head.pool(padded, Tokens(padded, lengths=torch.tensor([5, 2])))
    torch.testing.assert_close(got, torch.stack([padded[0].sum(0), padded[1, :2].sum(0)]))
    torch.testing.assert_close(head.pool(padded, Tokens(padded)), padded.sum(1))
    with pytest.raises(ValueError, match="'mean', 'max' or 'sum'"):
        PoolingClassifier(4, 2, pooling="median")  # type: ignore[arg-type]
