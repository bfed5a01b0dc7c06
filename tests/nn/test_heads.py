"""PoolingClassifier's MLP head: hidden layers of width D before the output layer, on pooled graphs."""

from __future__ import annotations

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
