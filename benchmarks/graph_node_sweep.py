"""Validation-only sweep of the Cora recipe's hyperparameters.

``python -m benchmarks.graph_node_sweep '[{}, {"lr": 0.01}]' --seeds 10`` trains the recipe's model
(``recipes/configs/graph_node.yaml``: GraphAdapter + GraphAttentionEncoder, Adam with an L2 penalty,
300 full-batch epochs, the first epoch of best validation accuracy kept) in a plain loop for each
config and seed, and prints the mean and standard deviation of the best validation accuracy. It never
computes a test number: choose on this, then run the recipe for the test accuracy.

Config keys: ``lr``, ``wd``, ``hidden``, ``heads``, ``out_heads``, ``dropout`` (attention and hidden
layers), ``in_drop`` (the adapter's input dropout), ``epochs``, ``root_weight``.
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
from attnmm.nn import GraphAttentionEncoder

DEFAULTS: dict[str, Any] = dict(
    lr=5e-3, wd=5e-4, hidden=8, heads=8, out_heads=1, dropout=0.6, in_drop=0.6, epochs=300, root_weight=False
)


def best_val_acc(data: Any, num_features: int, num_classes: int, seed: int, **config: Any) -> float:
    """Best validation accuracy of one training run."""
    unknown = set(config) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; valid: {sorted(DEFAULTS)}")
    c = {**DEFAULTS, **config}
    torch.manual_seed(seed)
    adapter = GraphAdapter(in_channels=num_features, d_model=None, self_loops=True, dropout=c["in_drop"])
    encoder = GraphAttentionEncoder(
        num_features, c["hidden"], num_classes, heads=c["heads"], out_heads=c["out_heads"], dropout=c["dropout"],
        root_weight=c["root_weight"],
    )
    params = [*adapter.parameters(), *encoder.parameters()]
    optimizer = torch.optim.Adam(params, lr=c["lr"], weight_decay=c["wd"])
    best = 0.0
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
            pred = encoder(tokens.x, tokens.mask).argmax(-1)
            best = max(best, float((pred[data.val_mask] == data.y[data.val_mask]).float().mean()))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.graph_node_sweep", description=__doc__)
    parser.add_argument("configs", help='JSON list of configs, e.g. \'[{}, {"lr": 0.01}]\' ({} is the recipe)')
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
        runs = [best_val_acc(data, data.num_features, num_classes, s, **config) for s in range(args.seeds)]
        accs = torch.tensor(runs) * 100
        print(
            f"{json.dumps(config)}: best validation accuracy {accs.mean():.2f} +- {accs.std():.2f} "
            f"over {args.seeds} seeds ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
