"""Validation-only sweep of the node recipe's hyperparameters (Cora's public split, or Actor's ten splits).

:func:`validation_scores` trains a Cora model
(``{}`` is the GAT-style one of ``recipes/configs/graph_node_gat.yaml``: GraphAdapter +
GraphAttentionEncoder, Adam with an L2 penalty, 300 full-batch epochs) in a plain loop for each
config and seed and returns three validation scores: the
best validation accuracy, and two cross-fitted accuracies (the epoch chosen on one half of the
validation nodes by accuracy or by loss, measured on the other half). It never computes a test
number: choose on this, then run the recipe for the test accuracy.

Config keys: ``model`` (``"gat"``: GraphAttentionEncoder; ``"propagation"``: PropagationEncoder,
the default recipe's model with ``hidden: 64, dropout: 0.5, in_drop: 0.5, lr: 0.01, pair_dropout:
0.5``; ``"ego"``: EgoNeighbourEncoder, the Actor config's model), ``lr``, ``wd``, ``hidden``,
``dropout`` (attention and hidden layers), ``in_drop`` (the adapter's input dropout), ``epochs``; for
``"gat"`` ``heads``, ``out_heads``, ``root_weight``; for ``"propagation"`` ``steps``, ``alpha``,
``pair_dropout``, ``scores`` and ``score_heads`` (the heads of ``scores: "additive"``); for ``"ego"``
``hops``, ``normalize``, ``scores``, ``score_heads`` and ``pair_dropout``. The mask: ``self_loops``
(the adapter's), ``knn`` (K > 0 adds every node's K most similar nodes by feature cosine,
:func:`~attnmm.common.feature_knn.feature_knn`), ``undirected`` (the data's ``to_undirected``).

``--name Actor --splits 0-9`` runs every config on each of geom-gcn's splits (replicates are splits x
seeds, ``--seeds 1`` for one seed per split).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from attnmm.adapters import GraphAdapter
from attnmm.common.feature_knn import feature_knn
from attnmm.data import NodeDataModule
from attnmm.nn import EgoNeighbourEncoder, GraphAttentionEncoder, PropagationEncoder

DEFAULTS: dict[str, Any] = dict(
    model="gat", lr=5e-3, wd=5e-4, hidden=8, heads=8, out_heads=1, dropout=0.6, in_drop=0.6, epochs=300,
    root_weight=False, steps=10, alpha=0.1, pair_dropout=0.0, scores="uniform", score_heads=1,
    hops=1, normalize=False, self_loops=True, knn=0, undirected=False,
)


def build_encoder(num_features: int, num_classes: int, c: dict[str, Any]) -> torch.nn.Module:
    """The encoder of a (complete) sweep config."""
    if c["model"] == "gat":
        return GraphAttentionEncoder(
            num_features, c["hidden"], num_classes, heads=c["heads"], out_heads=c["out_heads"],
            dropout=c["dropout"], root_weight=c["root_weight"],
        )
    if c["model"] == "propagation":
        return PropagationEncoder(
            num_features, c["hidden"], num_classes, steps=c["steps"], alpha=c["alpha"], dropout=c["dropout"],
            pair_dropout=c["pair_dropout"], scores=c["scores"], heads=c["score_heads"],
        )
    if c["model"] == "ego":
        return EgoNeighbourEncoder(
            num_features, c["hidden"], num_classes, hops=c["hops"], dropout=c["dropout"], normalize=c["normalize"],
            scores=c["scores"], heads=c["score_heads"], pair_dropout=c["pair_dropout"],
        )
    raise ValueError(f"model must be 'gat', 'propagation' or 'ego', got {c['model']!r}")


def _cross_fitted(correct: torch.Tensor, score: torch.Tensor, splits: int = 5) -> float:
    """Accuracy of the epoch chosen on one half of the validation nodes, measured on the other half.

    ``correct`` (T, V) says per epoch and validation node whether the prediction was right; ``score``
    (T, V) is what the choice maximises per node (correctness, or minus the loss). Each of ``splits``
    fixed random halvings is used both ways, and the results are averaged. Unlike the best validation
    accuracy, which rewards noisy training curves for their lucky epochs, this is an unbiased estimate
    of the accuracy after checkpoint selection (on half the validation set).
    """
    v = correct.shape[1]
    generator = torch.Generator().manual_seed(0)
    accs = []
    for _ in range(splits):
        perm = torch.randperm(v, generator=generator)
        halves = perm[: v // 2], perm[v // 2 :]
        for choose, measure in (halves, halves[::-1]):
            epoch = int(score[:, choose].mean(1).argmax())  # the first best epoch, like the recipe
            accs.append(float(correct[epoch, measure].float().mean()))
    return sum(accs) / len(accs)


def validation_scores(data: Any, num_features: int, num_classes: int, seed: int, **config: Any) -> dict[str, float]:
    """Validation scores of one training run (fractions in [0, 1]).

    ``best``: the best validation accuracy over the epochs (what a checkpoint chosen by accuracy has);
    ``cross_acc``: the cross-fitted accuracy when the epoch is chosen by validation accuracy, and
    ``cross_loss`` when it is chosen by validation loss (see :func:`_cross_fitted`).
    """
    unknown = set(config) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; valid: {sorted(DEFAULTS)}")
    c = {**DEFAULTS, **config}
    torch.manual_seed(seed)
    adapter = GraphAdapter(in_channels=num_features, d_model=None, self_loops=c["self_loops"], dropout=c["in_drop"])
    encoder = build_encoder(num_features, num_classes, c)
    mask = adapter(data).mask
    if c["knn"]:
        mask = mask | feature_knn(data.x, c["knn"])
    params = [*adapter.parameters(), *encoder.parameters()]
    optimizer = torch.optim.Adam(params, lr=c["lr"], weight_decay=c["wd"])
    y_val = data.y[data.val_mask]
    correct, neg_loss = [], []
    for _ in range(c["epochs"]):
        adapter.train(), encoder.train()
        out = encoder(adapter(data).x, mask)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        adapter.eval(), encoder.eval()
        with torch.no_grad():
            logits = encoder(adapter(data).x, mask)[data.val_mask]
            correct.append(logits.argmax(-1) == y_val)
            neg_loss.append(-F.cross_entropy(logits, y_val, reduction="none"))
    hits = torch.stack(correct)  # (T, V)
    return {
        "best": float(hits.float().mean(1).max()),
        "cross_acc": _cross_fitted(hits, hits.float()),
        "cross_loss": _cross_fitted(hits, torch.stack(neg_loss)),
    }


def load_graph(name: str, split: int = 0, undirected: bool = False) -> Any:
    """The full-batch graph: a Planetoid graph's public split, or split ``split`` of Actor's ten."""
    dm = NodeDataModule(name=name, split_index=split, to_undirected=undirected)
    dm.prepare_data()
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))
