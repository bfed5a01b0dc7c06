"""Mask sweeps on the real graph benchmarks: a recipe config's model, trained with its optimiser and schedule,
with only the attention mask changed (:mod:`studies._graphs.mask_sweep` calls this).

The model, the data and the training come from the recipe (``recipes/graph_node.py`` or
``recipes/graph_graph.py``) built from a config by ``RecipeCLI`` without running it; the adapter
still makes the tokens, but the mask the encoder attends under is the sweep's. Training is a plain
loop with the recipe's optimiser (AdamW or Adam with an L2 penalty, no decay on biases and norms) and
its warm-up cosine schedule over the sweep's (short) number of epochs; every epoch is evaluated, and the
validation and test scores are those of the first epoch with the best validation score, so nothing is
chosen on test. Replicates are the protocol's splits (Actor's geom-gcn splits, a TU set's folds) with
one seed, or seeds on a fixed split (Peptides-func).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm.lightning import MultiLabel
from attnmm.lightning.schedule import WarmupCosine

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RealTask:
    """A sweep task on real data: the recipe and config its model comes from, the data's name, the option
    that picks a split (``None``: one official split, replicates are seeds), and published anchors."""

    recipe: str
    config: str
    name: str
    split_option: str | None
    kind: str  # "node" or "graph"
    metric: str  # "acc" or "ap"
    anchors: tuple[tuple[str, float], ...]
    protocol: str
    #: recipe arguments that give the sweep the data's own edges (the masks under test add the rest)
    data_args: tuple[str, ...] = ()


#: The real-data tasks of the graph_masks_* studies (their protocol's ``budget.task``).
REAL_TASKS: dict[str, RealTask] = {
    "actor": RealTask(
        "graph_node", "recipes/configs/graph_node_actor.yaml", "Actor", "data.split_index", "node", "acc",
        (("GCN", 30.0), ("GAT", 28.0), ("MLP", 36.0), ("H2GCN", 35.7), ("GloGNN++", 37.7), ("SGFormer", 37.9)),
        "test accuracy, mean of geom-gcn's 10 splits (GAT: 27-29; GCN and MLP about)",
        ("--data.feature_neighbors", "0"),  # the config's feature neighbours are the sweep's knnK masks
    ),
    "proteins": RealTask(
        "graph_graph", "recipes/configs/graph_graph_tu.yaml", "PROTEINS", "data.fold", "graph", "acc",
        (("GIN (Errica et al.)", 73.3), ("structure-agnostic baseline (Errica et al.)", 75.8)),
        "test accuracy, 10-fold stratified CV (Errica et al. choose hyperparameters per fold, 3 runs per fold)",
    ),
    "peptides": RealTask(
        "graph_graph", "recipes/configs/graph_graph_peptides.yaml", "peptides-func", None, "graph", "ap",
        (("GCN", 59.30), ("GatedGCN", 58.64), ("Transformer+LapPE", 63.26), ("GPS", 65.35), ("Exphormer", 65.27),
         ("tuned GCN (Tönshoff et al.)", 68.60), ("GRIT", 69.88)),
        "test AP x 100, official split, about 500k parameters, mean of 4 seeds",
    ),
}


def _recipe_main(recipe: str) -> Callable[..., Any]:
    spec = importlib.util.spec_from_file_location(f"_{recipe}_recipe", ROOT / "recipes" / f"{recipe}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def build(task: RealTask, split: int | None, args: list[str] = ()) -> tuple[Any, Any]:  # type: ignore[assignment]
    """The recipe's task module and its set-up DataModule for one split (``None``: the config's), built from
    the config plus ``args`` without training."""
    argv = ["--config", str(ROOT / task.config), "--data.name", task.name, "--trainer.logger", "false", *task.data_args]
    if split is not None and task.split_option is not None:
        argv += [f"--{task.split_option}", str(split)]
    program, sys.argv[1:] = sys.argv[1:], []  # the recipe reads only the arguments given here
    try:
        cli = _recipe_main(task.recipe)([*argv, *args], run=False)
    finally:
        sys.argv[1:] = program
    cli.datamodule.setup("fit")
    return cli.model, cli.datamodule


def optimiser(model: nn.Module, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
    """The recipe's optimiser over ``model`` (a ClassificationTask) and its warm-up cosine schedule, started."""
    opt = model.optimization.build(model, model.lr, fused_ok=False)["optimizer"]
    schedule = WarmupCosine(model.optimization.warmup_fraction, model.optimization.min_lr_ratio)
    schedule.start(total_steps)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, schedule)


def _score(logits: Tensor, y: Tensor, metric: str) -> float:
    if metric == "ap":
        from torchmetrics.functional.classification import multilabel_average_precision

        target = torch.where(torch.isnan(y), -100, y).long()
        return float(multilabel_average_precision(logits.sigmoid(), target, y.size(1), ignore_index=-100))
    return float((logits.argmax(-1) == y).float().mean())


def _loss(model: Any, logits: Tensor, y: Tensor) -> Tensor:
    if isinstance(model.objective, MultiLabel):
        known = ~torch.isnan(y)
        return F.binary_cross_entropy_with_logits(logits[known], y[known].float())
    return F.cross_entropy(logits, y, label_smoothing=model.objective.label_smoothing)


def train(
    model: Any,
    data: Any,
    build_mask: Callable[[Any], tuple[Any, int]],
    kind: str,
    metric: str,
    epochs: int,
    seed: int,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train ``model`` (the recipe's ClassificationTask) on ``data`` (the set-up DataModule) with the encoder
    attending under ``build_mask(graph_or_batch) -> (mask, virtual nodes)``; scores in [0, 1], times in s."""
    torch.manual_seed(seed)
    for module in model.modules():  # fresh weights from the seed, whatever the build drew
        if module is not model and hasattr(module, "reset_parameters"):
            module.reset_parameters()
    width = getattr(model.adapter, "out_dim", None)
    virtual = nn.Parameter(torch.zeros(1, width))  # the virtual nodes' input, in every variant's model
    model.register_parameter("_virtual", virtual)

    def logits(batch: Any) -> tuple[Tensor, int]:
        mask, extra = build_mask(batch)
        tokens = model.adapter(batch)
        x = torch.cat([tokens.x, virtual.expand(extra, -1)])  # (N + G, D)
        h = model.encoder(x, mask, tokens=tokens)[: tokens.x.size(0)]
        return (h if model.head is None else model.head(h, tokens)), mask.nnz(x.size(0))

    if kind == "node":  # one graph, seen whole: its mask is built once
        graph = data.train_dataloader().dataset[0]
        once = build_mask(graph)
        build_mask = lambda _: once  # noqa: E731
        train_batches, evaluate = [graph], {"val+test": [graph]}
    else:
        from torch_geometric.loader import DataLoader

        train_batches = DataLoader(data.splits["train"], batch_size=data.batch_size, shuffle=True,
                                   generator=torch.Generator().manual_seed(seed))
        evaluate = {k: list(DataLoader(data.splits[k], batch_size=data.batch_size)) for k in ("val", "test")}
    opt, sched = optimiser(model, epochs * len(train_batches))
    history: dict[str, list[float]] = {"val": [], "test": []}
    pairs, train_s, started = 0.0, 0.0, time.perf_counter()
    for epoch in range(epochs):
        model.train()
        for batch in train_batches:
            t = time.perf_counter()
            out, _ = logits(batch)
            y = batch.y
            if kind == "node":
                out, y = out[batch.train_mask], y[batch.train_mask]
            loss = _loss(model, out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            train_s += time.perf_counter() - t
        model.eval()
        with torch.no_grad():
            for split, batches in evaluate.items():
                results = [(batch, *logits(batch)) for batch in batches]
                if kind == "node":  # the one graph: validation and test nodes from one forward
                    ((graph, out, nnz),) = results
                    for stage in ("val", "test"):
                        keep = getattr(graph, f"{stage}_mask")
                        history[stage].append(_score(out[keep], graph.y[keep], metric))
                    pairs = float(nnz)
                    continue
                out = torch.cat([o for _, o, _ in results])
                history[split].append(_score(out, torch.cat([b.y for b, _, _ in results]), metric))
                if split == "val":  # pairs per graph, over the validation graphs
                    pairs = sum(n for _, _, n in results) / sum(b.num_graphs for b, _, _ in results)
        if log is not None and (epoch + 1) % max(1, epochs // 4) == 0:
            log(f"    epoch {epoch + 1}/{epochs}: val {100 * history['val'][-1]:.1f} "
                f"({time.perf_counter() - started:.0f} s)")
    best = max(range(epochs), key=lambda e: (history["val"][e], -e))  # the first epoch with the best validation
    return {"val": history["val"][best], "test": history["test"][best], "best_epoch": best + 1, "pairs": pairs,
            "train_s": train_s, "wall_s": time.perf_counter() - started, "epochs": epochs}
