"""The validation-only Cora sweep trains the recipe's model and reports a validation accuracy."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from studies._graphs.node_models import _cross_fitted, validation_scores


def _graph() -> Data:
    g = torch.Generator().manual_seed(0)
    n = 30
    y = torch.arange(n) % 3
    x = torch.nn.functional.one_hot(y, 3).float() + 0.1 * torch.randn(n, 3, generator=g)
    src = torch.arange(n).repeat(2)
    edge_index = torch.stack([src, (src + torch.tensor([3, 6]).repeat_interleave(n)) % n])  # within each class
    train = torch.zeros(n, dtype=torch.bool)
    train[:12] = True
    return Data(x=x, y=y, edge_index=edge_index, train_mask=train, val_mask=~train)


def test_sweep_run_learns_a_separable_graph() -> None:
    acc = validation_scores(_graph(), 3, 3, seed=0, epochs=30, lr=0.05, hidden=4, heads=2, dropout=0.0,
                            in_drop=0.0)["best"]
    assert 0.9 <= acc <= 1.0


def test_unknown_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown config keys"):
        validation_scores(_graph(), 3, 3, seed=0, learning_rate=0.1)


def test_cross_fitted_scores_the_chosen_epoch_on_the_other_half() -> None:
    # epoch 1 is right on every node, epoch 0 on none: any half chooses epoch 1, which scores 1 elsewhere
    correct = torch.tensor([[False] * 10, [True] * 10])
    assert _cross_fitted(correct, correct.float()) == 1.0
    # a real run: all three scores are accuracies, and the cross-fitted one never beats the best epoch
    scores = validation_scores(_graph(), 3, 3, seed=0, epochs=20, lr=0.05, hidden=4, heads=2, dropout=0.0,
                               in_drop=0.0, model="propagation", steps=2)
    assert set(scores) == {"best", "cross_acc", "cross_loss"}
    assert all(0.0 <= v <= 1.0 for v in scores.values()) and scores["cross_acc"] <= scores["best"]
