"""Validation-only sweep of the Cora recipe's hyperparameters.

``python -m benchmarks.graph_node_sweep '[{}, {"lr": 0.01}]' --seeds 10`` trains a Cora model
(``{}`` is the GAT-style one of ``recipes/configs/graph_node_gat.yaml``: GraphAdapter +
GraphAttentionEncoder, Adam with an L2 penalty, 300 full-batch epochs) in a plain loop for each
config and seed, and prints the mean and standard deviation over seeds of three validation scores: the
best validation accuracy, and two cross-fitted accuracies (the epoch chosen on one half of the
validation nodes by accuracy or by loss, measured on the other half). It never computes a test
number: choose on this, then run the recipe for the test accuracy.

Config keys: ``model`` (``"gat"``: GraphAttentionEncoder; ``"propagation"``: PropagationEncoder,
the default recipe's model with ``hidden: 64, dropout: 0.5, in_drop: 0.5, lr: 0.01, pair_dropout:
0.5``), ``lr``, ``wd``, ``hidden``, ``dropout`` (attention and hidden layers), ``in_drop`` (the
adapter's input dropout), ``epochs``; for ``"gat"`` ``heads``, ``out_heads``, ``root_weight``; for
``"propagation"`` ``steps``, ``alpha``, ``pair_dropout``, ``scores`` and ``score_heads`` (the heads of
``scores: "additive"``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
import torch.nn.functional as F

from attnmm.adapters import GraphAdapter
from attnmm.data import PlanetoidDataModule
from attnmm.nn import GraphAttentionEncoder, PropagationEncoder

DEFAULTS: dict[str, Any] = dict(
    model="gat", lr=5e-3, wd=5e-4, hidden=8, heads=8, out_heads=1, dropout=0.6, in_drop=0.6, epochs=300,
    root_weight=False, steps=10, alpha=0.1, pair_dropout=0.0, scores="uniform", score_heads=1,
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
    raise ValueError(f"model must be 'gat' or 'propagation', got {c['model']!r}")


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
    adapter = GraphAdapter(in_channels=num_features, d_model=None, self_loops=True, dropout=c["in_drop"])
    encoder = build_encoder(num_features, num_classes, c)
    params = [*adapter.parameters(), *encoder.parameters()]
    optimizer = torch.optim.Adam(params, lr=c["lr"], weight_decay=c["wd"])
    y_val = data.y[data.val_mask]
    correct, neg_loss = [], []
    for _ in range(c["epochs"]):
        adapter.train(), encoder.train()
        tokens = adapter(data)
        out = encoder(tokens.x, tokens.mask)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        adapter.eval(), encoder.eval()
        with torch.no_grad():
            tokens = adapter(data)
            logits = encoder(tokens.x, tokens.mask)[data.val_mask]
            correct.append(logits.argmax(-1) == y_val)
            neg_loss.append(-F.cross_entropy(logits, y_val, reduction="none"))
    hits = torch.stack(correct)  # (T, V)
    return {
        "best": float(hits.float().mean(1).max()),
        "cross_acc": _cross_fitted(hits, hits.float()),
        "cross_loss": _cross_fitted(hits, torch.stack(neg_loss)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.graph_node_sweep", description=__doc__)
    parser.add_argument(
        "configs", help='JSON list of configs, e.g. \'[{}, {"lr": 0.01}]\' ({} is the GAT-style config)'
    )
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..n-1 per config (default: 10)")
    parser.add_argument("--name", default="Cora", help="Planetoid dataset (default: Cora)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dm = PlanetoidDataModule(name=args.name, split="public")
    dm.prepare_data()
    dm.setup("fit")
    data = next(iter(dm.train_dataloader()))
    num_classes = int(data.y.max()) + 1
    for config in json.loads(args.configs):
        started = time.perf_counter()
        runs = [validation_scores(data, data.num_features, num_classes, s, **config) for s in range(args.seeds)]
        parts = []
        for key, label in (("best", "best validation accuracy"), ("cross_acc", "cross-fitted (chosen by accuracy)"),
                           ("cross_loss", "cross-fitted (chosen by loss)")):
            accs = torch.tensor([r[key] for r in runs]) * 100
            parts.append(f"{label} {accs.mean():.2f} +- {accs.std():.2f}")
        print(f"{json.dumps(config)}: {'; '.join(parts)} over {args.seeds} seeds "
              f"({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
