"""Mask sweeps (the ``graph_masks_*`` studies): the same graph model, the same seeds, one run per mask (their
candidates, :func:`parse_mask`) and replicate (their splits or seeds); self loops are included unless the model keeps
a node's own features apart. Tasks: ``cora`` (Planetoid Cora's public split, a GAT-style model trained full
batch), ``motifs`` (house vs 5-cycle graphs, in mini-batches), and :data:`REAL_TASKS`, which train the model of
their recipe config with its optimiser and schedule for the protocol's (short) number of epochs, the mask the
encoder attends under swapped. Every epoch is evaluated; the scores are those of the first epoch with the best
validation score (:func:`studies._runner.train.best_epoch`).
"""

from __future__ import annotations

import copy
import functools
import math
import operator
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm.adapters import GraphAdapter
from attnmm.common.feature_knn import feature_knn
from attnmm.lightning import MultiLabel
from attnmm.lightning.schedule import WarmupCosine
from attnmm.masks import Graph, Mask, SameGraph
from attnmm.masks.graph_helpers import expander, k_hop, self_loops, virtual_nodes
from attnmm.nn import GraphAttentionEncoder, PoolingClassifier
from studies._graphs.splits import RECIPES, _indices
from studies._runner import stats
from studies._runner.train import ROOT, best_epoch, recipe_cli, sgd_epoch


@dataclass(frozen=True)
class RealTask:
    """A sweep task on real data: the recipe and config its model comes from (the recipe's option that picks a
    split is in :data:`studies._graphs.splits.RECIPES`), the data's name, and published anchors."""

    recipe: str
    config: str
    name: str
    kind: str  # "node" or "graph"
    metric: str  # "acc" or "ap"
    anchors: tuple[tuple[str, float], ...]
    protocol: str
    #: recipe arguments that give the sweep the data's own edges (the masks under test add the rest)
    data_args: tuple[str, ...] = ()


#: The real-data tasks of the graph_masks_* studies (their protocol's ``budget.task``).
REAL_TASKS: dict[str, RealTask] = {
    "actor": RealTask(
        "graph_node", "recipes/configs/graph_node_actor.yaml", "Actor", "node", "acc",
        (("GCN", 30.0), ("GAT", 28.0), ("MLP", 36.0), ("H2GCN", 35.7), ("GloGNN++", 37.7), ("SGFormer", 37.9)),
        "test accuracy, mean of geom-gcn's 10 splits (GAT: 27-29; GCN and MLP about)",
        ("--data.feature_neighbors", "0"),  # the config's feature neighbours are the sweep's knnK masks
    ),
    "proteins": RealTask(
        "graph_graph", "recipes/configs/graph_graph_tu.yaml", "PROTEINS", "graph", "acc",
        (("GIN (Errica et al.)", 73.3), ("structure-agnostic baseline (Errica et al.)", 75.8)),
        "test accuracy, 10-fold stratified CV (Errica et al. choose hyperparameters per fold, 3 runs per fold)",
    ),
    "peptides": RealTask(
        "graph_graph", "recipes/configs/graph_graph_peptides.yaml", "peptides-func", "graph", "ap",
        (("GCN", 59.30), ("GatedGCN", 58.64), ("Transformer+LapPE", 63.26), ("GPS", 65.35), ("Exphormer", 65.27),
         ("tuned GCN (Tönshoff et al.)", 68.60), ("GRIT", 69.88)),
        "test AP x 100, official split, about 500k parameters, mean of 4 seeds",
    ),
}
#: Cora's GAT-style model (``recipes/configs/graph_node_gat.yaml``: GraphAdapter + GraphAttentionEncoder, Adam
#: with an L2 penalty); the other keys are those of the node models the cora protocol's config also names.
NODE_DEFAULTS: dict[str, Any] = dict(
    model="gat", lr=5e-3, wd=5e-4, hidden=8, heads=8, out_heads=1, dropout=0.6, in_drop=0.6, epochs=300,
    root_weight=False, steps=10, alpha=0.1, pair_dropout=0.0, scores="uniform")
#: The motif task's config: GraphAdapter (random-walk encodings) -> attention layers -> mean pooling. Two
#: random-walk steps, not the recipe's 8: the return probability after 3 steps marks the house's triangle
#: in each node's input, and every mask then reaches 100% (the structure must come through attention).
GRAPH_DEFAULTS: dict[str, Any] = dict(
    lr=2e-3, wd=0.0, d_model=64, hidden=16, heads=4, layers=2, dropout=0.1, pe_dim=2, epochs=40, batch_size=32,
    num_graphs=1000, num_nodes=20,
)
#: The command's tasks and their kind: node classification on one graph, or classification of graphs.
TASKS = {"cora": "node", "motifs": "graph", **{name: task.kind for name, task in REAL_TASKS.items()}}
_NAME = re.compile(r"^(graph|virtual|full|self|khop(\d+)|knn(\d+)|expander(\d*))$")
_VALID = "graph, khopK (e.g. khop2), virtual, expander[D], full, self, knnK (e.g. knn10), A|B (a union)"


def parse_mask(name: str) -> tuple[str, int]:
    """``(kind, parameter)`` of a mask name: ``graph`` (the edges: i attends j iff j -> i), ``khopK`` (every node
    within K hops), ``virtual`` (the edges and one virtual node per graph, linked both ways to its nodes, its input
    a learned vector every variant's model has), ``expander[D]`` (the edges and random expander edges of degree D,
    default 4, drawn once per seed as in Exphormer), ``full`` (inside each graph), ``self``, ``knnK`` (the K most
    similar nodes by feature cosine) and a union ``A|B`` (not of ``virtual`` or ``full``): ``khop3`` ->
    ``("khop", 3)``, ``expander`` -> ``("expander", 4)``, ``graph|knn3`` -> ``("union", 0)`` (each part checked)."""
    if "|" in name:
        parts = name.split("|")
        kinds = [parse_mask(part)[0] for part in parts]
        if any(k in ("virtual", "full", "union") for k in kinds) or len(parts) < 2:
            raise ValueError(f"a union {name!r} takes masks of edges (not virtual or full); valid parts: {_VALID}")
        return "union", 0
    m = _NAME.match(name)
    if m is None:
        raise ValueError(f"unknown mask {name!r}; valid: {_VALID}")
    if m.group(2):
        return "khop", int(m.group(2))
    if m.group(3):
        return "knn", int(m.group(3))
    if name.startswith("expander"):
        return "expander", int(m.group(4) or 4)
    return name, 0


def add_expander(data: Any, name: str, generator: torch.Generator) -> Any:
    """A shallow copy of ``data`` (one graph) with ``expander_index``, its random expander edges (2, M_x),
    when ``name`` is (or unites) an expander mask; ``data`` itself otherwise. PyG's batching offsets the index."""
    degrees = [parse_mask(part)[1] for part in name.split("|") if parse_mask(part)[0] == "expander"]
    if not degrees:
        return data
    data = copy.copy(data)
    data.expander_index = expander(int(data.num_nodes), degrees[0], generator=generator).edge_index
    return data


def build_mask(name: str, data: Any, loops: bool = True) -> tuple[Mask, int]:
    """The mask ``name`` over a PyG ``Data`` or ``Batch``, and how many virtual nodes it appends (G or 0);
    with self loops unless ``loops`` is false (``full`` always has them).

    Expander masks read the ``expander_index`` of :func:`add_expander`; ``knnK`` reads the features ``x``.
    """
    kind, k = parse_mask(name)
    N, edge_index = int(data.num_nodes), data.edge_index
    batch = getattr(data, "batch", None)
    if batch is None:
        batch = torch.zeros(N, dtype=torch.long, device=edge_index.device)
    if kind == "full":
        return SameGraph(batch), 0
    own = self_loops(N)
    if kind == "virtual":
        G = int(batch.max()) + 1 if N else 0
        mask = Graph(edge_index, N + G) | virtual_nodes(N, batch)
        return (mask | self_loops(N + G) if loops else mask), G
    if kind == "union":
        return functools.reduce(operator.or_, (build_mask(part, data, loops)[0] for part in name.split("|"))), 0
    if kind == "self":
        return own, 0
    if kind == "khop":
        mask = k_hop(edge_index, N, k)
    elif kind == "knn":
        mask = feature_knn(data.x, k, batch=batch)
    else:
        if kind == "expander":
            extra = getattr(data, "expander_index", None)
            if extra is None:
                raise ValueError(f"mask {name!r} needs the graph's expander edges: pass add_expander(data, ...) first")
            edge_index = torch.cat([edge_index, extra], 1)
        mask = Graph(edge_index, N)
    return (mask | own if loops else mask), 0


def _merge(defaults: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    unknown = set(config) - set(defaults)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; valid: {sorted(defaults)}")
    return {**defaults, **config}


def run_node(data: Any, mask: str, seed: int, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train Cora's GAT-style classifier (:data:`NODE_DEFAULTS`' keys) on one graph with
    ``train_mask``/``val_mask``/``test_mask`` under ``mask``; accuracies in [0, 1], times in seconds."""
    c = _merge(NODE_DEFAULTS, config or {})
    if c["model"] != "gat":
        raise ValueError(f"the node sweep trains the GAT-style model, not {c['model']!r}")
    data = add_expander(data, mask, torch.Generator().manual_seed(seed))
    attn_mask, extra = build_mask(mask, data)
    N, num_features, num_classes = int(data.num_nodes), data.num_features, int(data.y.max()) + 1
    torch.manual_seed(seed)
    adapter = GraphAdapter(in_channels=num_features, d_model=None, self_loops=True, dropout=c["in_drop"])
    encoder = GraphAttentionEncoder(num_features, c["hidden"], num_classes, heads=c["heads"], out_heads=c["out_heads"],
                                    dropout=c["dropout"], root_weight=c["root_weight"])
    virtual = nn.Parameter(torch.zeros(1, num_features))  # virtual node input, in every variant's model
    modules = nn.ModuleList([adapter, encoder])
    optimizer = torch.optim.Adam([*modules.parameters(), virtual], lr=c["lr"], weight_decay=c["wd"])

    pairs = attn_mask.nnz(N + extra)

    def logits(graph: Any) -> tuple[Tensor, int]:
        x = torch.cat([adapter(graph).x, virtual.expand(extra, -1)])  # (N + G, F)
        return encoder(x, attn_mask)[:N], pairs  # (N, C)

    return {**_fit(logits, F.cross_entropy, data, None, seed, c["epochs"], modules, optimizer), "pairs": pairs}


def prepare_graphs(splits: dict[str, list[Any]], pe_dim: int) -> dict[str, list[Any]]:
    """The splits with each graph's random-walk encoding computed once (``random_walk_pe``)."""
    transform = GraphAdapter(in_channels=1, pe="random_walk", pe_dim=pe_dim).transform()
    return {k: [transform(g.clone()) for g in graphs] for k, graphs in splits.items()}


def run_graphs(splits: dict[str, list[Any]], mask: str, seed: int,
               config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train the graph classifier (:data:`GRAPH_DEFAULTS`) on ``splits`` (``train``/``val``/``test``
    lists of ``Data`` with ``y`` and, from :func:`prepare_graphs`, ``random_walk_pe``) under ``mask``."""
    from torch_geometric.loader import DataLoader

    c = _merge(GRAPH_DEFAULTS, config or {})
    width = splits["train"][0].random_walk_pe.size(1)
    if width != c["pe_dim"]:
        raise ValueError(f"the graphs carry {width} random-walk steps but pe_dim={c['pe_dim']}: "
                         "prepare them with prepare_graphs(splits, pe_dim)")
    generator = torch.Generator().manual_seed(seed)
    splits = {k: [add_expander(g, mask, generator) for g in graphs] for k, graphs in splits.items()}
    num_classes = 1 + max(int(g.y) for graphs in splits.values() for g in graphs)
    torch.manual_seed(seed)
    adapter = GraphAdapter(in_channels=1, d_model=c["d_model"], pe="random_walk", pe_dim=c["pe_dim"], self_loops=False)
    encoder = GraphAttentionEncoder(c["d_model"], c["hidden"], c["d_model"], num_layers=c["layers"], heads=c["heads"],
                                    dropout=c["dropout"], root_weight=True)
    head = PoolingClassifier(c["d_model"], num_classes)
    virtual = nn.Parameter(torch.zeros(1, c["d_model"]))  # virtual node tokens, in every variant's model
    modules = nn.ModuleList([adapter, encoder, head])
    optimizer = torch.optim.Adam([*modules.parameters(), virtual], lr=c["lr"], weight_decay=c["wd"])

    def logits(batch: Any) -> tuple[Tensor, int]:
        attn_mask, extra = build_mask(mask, batch)
        tokens = adapter(batch)
        h = encoder(torch.cat([tokens.x, virtual.expand(extra, -1)]), attn_mask)  # (N + G, D)
        return head(h[: tokens.x.size(0)], tokens), 0  # (B, C); the pairs are counted below

    pairs = 0  # over every graph of the splits
    for graphs in splits.values():
        for b in DataLoader(graphs, batch_size=c["batch_size"]):
            attn_mask, extra = build_mask(mask, b)
            pairs += attn_mask.nnz(int(b.num_nodes) + extra)
    result = _fit(logits, F.cross_entropy, splits, c["batch_size"], seed, c["epochs"], modules, optimizer)
    return {**result, "pairs": pairs / sum(len(graphs) for graphs in splits.values())}


def _score(logits: Tensor, y: Tensor, metric: str) -> float:
    if metric == "ap":
        return stats.average_precision(logits.sigmoid(), y)
    return float((logits.argmax(-1) == y).float().mean())


def _loss(model: Any, logits: Tensor, y: Tensor) -> Tensor:
    if isinstance(model.objective, MultiLabel):
        known = ~torch.isnan(y)
        return F.binary_cross_entropy_with_logits(logits[known], y[known].float())
    return F.cross_entropy(logits, y, label_smoothing=model.objective.label_smoothing)


def _fit(logits: Callable[[Any], tuple[Tensor, int]], loss: Callable[[Tensor, Tensor], Tensor], data: Any,
         batch_size: int | None, seed: int, epochs: int, modules: nn.Module, optimizer: torch.optim.Optimizer,
         metric: str = "acc", schedule: Any = None) -> dict[str, Any]:
    """``epochs`` epochs of training ``modules`` (:func:`~studies._runner.train.best_epoch`) on one graph with
    ``train_mask``/``val_mask``/``test_mask`` (``batch_size`` None) or on the ``train`` graphs of the splits
    ``data`` in batches (shuffled by ``seed``). ``logits(batch)`` gives the outputs and the pairs attended,
    ``loss(outputs, y)`` the training loss; scored by ``metric`` on the validation and test nodes or graphs,
    with the pairs (per validation graph)."""
    from torch_geometric.loader import DataLoader

    if batch_size is None:  # the one graph, seen whole
        batches: Any = [data]
    else:
        batches = DataLoader(data["train"], batch_size=batch_size, shuffle=True,
                             generator=torch.Generator().manual_seed(seed))
        fixed = {k: list(DataLoader(data[k], batch_size=batch_size)) for k in ("val", "test")}

    def train_loss(batch: Any) -> Tensor:
        out, _ = logits(batch)
        keep = batch.train_mask if batch_size is None else slice(None)
        return loss(out[keep], batch.y[keep])

    def score() -> dict[str, float]:
        if batch_size is None:  # validation and test nodes from one forward
            out, nnz = logits(data)
            return {**{s: _score(out[getattr(data, f"{s}_mask")], data.y[getattr(data, f"{s}_mask")], metric)
                       for s in ("val", "test")}, "pairs": float(nnz)}
        got = {}
        for part, bs in fixed.items():
            results = [logits(b) for b in bs]
            got[part] = _score(torch.cat([o for o, _ in results]), torch.cat([b.y for b in bs]), metric)
            if part == "val":  # pairs per graph, over the validation graphs
                got["pairs"] = sum(n for _, n in results) / sum(b.num_graphs for b in bs)
        return got

    return best_epoch(lambda: sgd_epoch(modules, batches, train_loss, optimizer, schedule), score, epochs)


def run_real(task: str, name: str, split: int | None, seed: int, epochs: int,
             args: Sequence[str] = ()) -> dict[str, Any]:
    """One run of mask ``name`` on a real-data task (:data:`REAL_TASKS`) and split (None: its one official
    split): the model, data, optimiser and schedule of its recipe config (built by the recipe's CLI, not run),
    fresh weights from ``seed``, ``epochs`` epochs, the mask the encoder attends under swapped (the adapter still
    makes the tokens); ``args`` are recipe options. Its data and draws depend only on its mask, split and seed."""
    parse_mask(name)
    spec = REAL_TASKS[task]
    argv = ["--config", str(ROOT / spec.config), "--data.name", spec.name, "--trainer.logger", "false", *spec.data_args]
    if split is not None:
        argv += [f"--{RECIPES[spec.recipe]}", str(split)]
    cli = recipe_cli(spec.recipe, [*argv, *args])
    model, data = cli.model, cli.datamodule
    data.setup("fit")
    generator = torch.Generator().manual_seed(seed)
    if spec.kind == "node":
        data.data = add_expander(data.data, name, generator)
    else:
        data.splits = {k: [add_expander(g, name, generator) for g in gs] for k, gs in data.splits.items()}
    build = functools.partial(build_mask, name, loops=getattr(model.adapter, "self_loops", True))
    torch.manual_seed(seed)
    for module in model.modules():  # fresh weights from the seed, whatever the build drew
        if module is not model and hasattr(module, "reset_parameters"):
            module.reset_parameters()
    virtual = nn.Parameter(torch.zeros(1, getattr(model.adapter, "out_dim", None)))  # the virtual nodes' input
    model.register_parameter("_virtual", virtual)

    def logits(batch: Any) -> tuple[Tensor, int]:
        mask, extra = build(batch)
        tokens = model.adapter(batch)
        x = torch.cat([tokens.x, virtual.expand(extra, -1)])  # (N + G, D)
        h = model.encoder(x, mask, tokens=tokens)[: tokens.x.size(0)]
        return (h if model.head is None else model.head(h, tokens)), mask.nnz(x.size(0))

    if spec.kind == "node":  # one graph, seen whole: its mask is built once
        graph = data.train_dataloader().dataset[0]
        once = build(graph)
        build = lambda _: once  # noqa: E731
    batch_size = None if spec.kind == "node" else data.batch_size
    optimizer = model.optimization.build(model, model.lr, fused_ok=False)["optimizer"]
    warmup = WarmupCosine(model.optimization.warmup_fraction, model.optimization.min_lr_ratio)
    warmup.start(epochs * (1 if batch_size is None else math.ceil(len(data.splits["train"]) / batch_size)))
    result = _fit(logits, functools.partial(_loss, model), graph if batch_size is None else data.splits, batch_size,
                  seed, epochs, model, optimizer, spec.metric, torch.optim.lr_scheduler.LambdaLR(optimizer, warmup))
    return {"mask": name, "seed": seed, "split": split, **result}


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per mask, in the order run: mean and sample std over the replicates (seeds or splits) of the scores
    (%) and times (s), and the mean number of pairs (expander edges are drawn per replicate)."""
    out = []
    for name in dict.fromkeys(r["mask"] for r in runs):
        rs = [r for r in runs if r["mask"] == name]
        row: dict[str, Any] = {"mask": name, "seeds": len(rs), "pairs": statistics.fmean(r["pairs"] for r in rs)}
        for key, scale in (("val", 100.0), ("test", 100.0), ("train_s", 1.0)):
            m = stats.moments([scale * r[key] for r in rs])
            row[key], row[f"{key}_std"] = m["mean"], m["std"]
        out.append(row)
    return out


def paired(runs: list[dict[str, Any]], mask: str, reference: str) -> dict[str, Any] | None:
    """``mask``'s test score minus ``reference``'s on the same replicates (split, seed), in points
    (:func:`studies._runner.stats.paired`); ``None`` without a shared replicate."""
    def by(name: str) -> dict[tuple[Any, Any], float]:
        return {(r.get("split"), r["seed"]): 100 * r["test"] for r in runs if r["mask"] == name}

    return stats.paired(by(mask), by(reference))


def _replicates(store: dict[str, Any]) -> str:
    splits = [s for s in store.get("splits") or [] if s is not None]
    n, what = (len(splits), "split") if splits else (len(store["seeds"]), "seed")
    return f"{n} {what}" + ("s" if n != 1 else "")


def figure(stores: list[dict[str, Any]], anchors: bool = False) -> Any:
    """Per stored sweep, test score (mean ± std over the replicates) against pairs attended (marker area:
    train time) and against train time per run; with ``anchors``, the published numbers of a real-data
    task as horizontal lines."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig = Figure(figsize=(10, 3.6 * len(stores)), layout="constrained")
    axes = fig.subplots(len(stores), 2, squeeze=False)
    for (left, right), store in zip(axes, stores, strict=True):
        rows = summarize(store["runs"])
        most = max(r["train_s"] for r in rows) or 1.0
        for i, r in enumerate(rows):
            size = 30 + 400 * r["train_s"] / most
            left.errorbar(r["pairs"], r["test"], yerr=r["test_std"], fmt="none", ecolor="grey", capsize=3)
            left.scatter(r["pairs"], r["test"], s=size, alpha=0.7, color=f"C{i % 10}")
            right.errorbar(r["train_s"], r["test"], xerr=r["train_s_std"], yerr=r["test_std"], fmt="o", capsize=3,
                           color=f"C{i % 10}", label=r["mask"])  # a legend: masks of similar cost would overlap
        spec = REAL_TASKS.get(store["task"])
        if anchors and spec is not None:
            for ax in (left, right):
                for j, (_, value) in enumerate(spec.anchors):
                    ax.axhline(value, color="grey", lw=0.8, ls=(0, (4, 2 + j)))
            values = [v for _, v in spec.anchors] + [r["test"] for r in rows]
            for label, value in _anchor_labels(spec.anchors, 0.03 * (max(values) - min(values))):
                right.annotate(label, (1.0, value), xycoords=("axes fraction", "data"), fontsize=7,
                               color="grey", ha="right", va="bottom")
        per = "" if store["kind"] == "node" else " per graph"
        score = "test AP x 100" if store.get("metric") == "ap" else "test accuracy (%)"
        left.set(xscale="log", xlabel=f"pairs attended{per} (marker area: train time)", ylabel=score,
                 title=f"{store['task']}: {score.split(' (')[0]} against pairs attended")
        right.set(xscale="log", xlabel="train time per run (s)", ylabel=score,
                  title=f"{store['task']}: against time ({_replicates(store)})")
        right.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # seconds as plain numbers
        right.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        for ax in (left, right):
            ax.xaxis.set_minor_formatter(NullFormatter())
        right.legend(title="mask", fontsize=7, title_fontsize=7, ncol=2, loc="best", framealpha=0.9)
    return fig


def _anchor_labels(anchors: Sequence[tuple[str, float]], gap: float) -> list[tuple[str, float]]:
    """The published numbers' labels, those closer than ``gap`` to the next joined into one (GPS 65.35 and
    Exphormer 65.27 would print over each other), each placed at its group's highest value."""
    groups: list[list[tuple[str, float]]] = []
    for label, value in sorted(anchors, key=lambda a: a[1]):
        if groups and value - groups[-1][-1][1] < gap:
            groups[-1].append((label, value))
        else:
            groups.append([(label, value)])
    return [(", ".join(label for label, _ in g), g[-1][1]) for g in groups]


def load_task(task: str, config: dict[str, Any]) -> Any:
    """The task's data: Cora's full batch, or the motif splits with their encodings."""
    if task == "cora":
        from attnmm.data import PlanetoidDataModule

        dm = PlanetoidDataModule(name="Cora", split="public")
        dm.prepare_data()
        dm.setup("fit")
        return next(iter(dm.train_dataloader()))
    from attnmm.data import MotifGraphsDataModule

    c = _merge(GRAPH_DEFAULTS, config)
    dm = MotifGraphsDataModule(num_graphs=c["num_graphs"], num_nodes=c["num_nodes"], seed=0)
    dm.setup()
    return prepare_graphs(dm.splits, c["pe_dim"])


# ---------------------------------------------------------------- the hooks of the graph_masks_* studies
def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Any:
    """A set of a sweep: ``{"task": "actor", "split": 3, "part": "train"}`` (``split`` null: the task's one
    split; ``part`` train, which holds the validation nodes or graphs the epoch is chosen on, or test). On the
    real-data tasks its node (Actor) or graph indices; on Cora and the generated motifs the part's name."""
    from studies._runner import Items

    task = spec["task"]
    if task not in REAL_TASKS:
        return Items.of(spec, fold=[f"{task}:{spec.get('split')}:{spec['part']}"])
    name = REAL_TASKS[task].name
    parts = ("train", "val") if spec["part"] == "train" else (spec["part"],)
    ids = [f"{name}:{i}" for p in parts for i in _indices(name, spec.get("split") or 0)[p]]
    return Items.of(spec, **{"node" if REAL_TASKS[task].kind == "node" else "graph": ids})


def run(candidate: dict[str, Any], seed: int, train: Any, evaluate: Any, budget: dict[str, Any]) -> Any:
    """One mask (``candidate["mask"]``) trained on the train set's split with ``seed``; scored on the test set."""
    task, split, mask = budget["task"], train.payload.get("split"), candidate["mask"]
    if task in REAL_TASKS:
        r = run_real(task, mask, split, seed, budget["epochs"])
    else:
        config = budget.get("config", {})
        data = load_task(task, config)
        r = (run_node if TASKS[task] == "node" else run_graphs)(data, mask, seed, config)
    metric = REAL_TASKS[task].metric if task in REAL_TASKS else "acc"
    detail = {k: r[k] for k in ("val", "best_epoch", "pairs", "train_s", "wall_s", "epochs")}
    return {name: {metric: r["test"]} for name in evaluate}, detail


def as_store(view: Any) -> dict[str, Any]:
    """The sweep as one dict (its setting in the store's ``detail``, the runs in the protocol's order of masks
    and replicates), the form :func:`names` and :func:`figure` read."""
    splits = [s.name for s in view.protocol.splits]
    runs = []
    for mask in view.protocol.candidates:
        recs = sorted((r for r in view.records("test") if r["candidate"] == mask),
                      key=lambda r: (splits.index(r["split"]), r["seed"]))
        for r in recs:
            split = view.protocol.spec(view.protocol.split(r["split"]).train).get("split")
            score = next(iter(next(iter(r["scores"].values())).values()))
            runs.append({"mask": mask, "seed": r["seed"], "split": split, "val": r["detail"]["val"], "test": score,
                         **{k: v for k, v in r["detail"].items() if k != "val"}})
    return {**view.detail, "runs": runs}


def context(detail: dict[str, Any], view: Any) -> dict[str, Any]:
    """The names the sweep's page (studies/_graphs/sweep.md) reads besides the store's detail."""
    return names(as_store(view))


def names(store: dict[str, Any]) -> dict[str, Any]:
    """The page's names from a sweep's store (:func:`as_store`): its runs, the task's :class:`RealTask` ``spec``,
    per mask a row of :func:`summarize` with ``d``, its paired test difference to the ``reference`` mask (``self``
    on real data where it ran, else none), the splits run, and when sweeps (or their parts, side by side) were
    resumed and how long they stood stopped, which their running time (``wall_s``) leaves out."""
    runs, spec = store["runs"], REAL_TASKS.get(store["task"])
    reference = "self" if spec is not None and any(r["mask"] == "self" for r in runs) else None
    parts = store.get("parts") or [store]
    rows = [{**r, "d": paired(runs, r["mask"], reference) if reference not in (None, r["mask"]) else None}
            for r in summarize(runs)]
    return {"runs": runs, "spec": spec, "reference": reference, "rows": rows, "metric": store.get("metric", "acc"),
            "splits": [s for s in store.get("splits") or [] if s is not None], "replicates": _replicates(store),
            "parts": store.get("parts", []), "note": store.get("note"),
            "resumed": sorted({t for p in parts for t in p.get("resumed", [])}),
            "paused": max(float(p.get("paused_s", 0.0)) for p in parts)}


def summary(view: Any) -> list[dict[str, Any]]:
    """docs/results.md's row: the best mask's test score, from the page's names (:func:`names`)."""
    n, p = context({}, view), view.protocol.data
    best = max(n["rows"], key=lambda r: r["test"])
    what = "AP x 100" if n["metric"] == "ap" else "accuracy (%)"
    anchors = ", ".join(f"{label} {value:.1f}" for label, value in n["spec"].anchors) if n["spec"] else "—"
    return [{"task": p["task"], "dataset": p["dataset"], "split": p["split_protocol"],
             "metric": f"test {what}, best mask of a sweep", "anchors": anchors, "order": p.get("order", 50),
             "result": f"`{best['mask']}` {stats.spread(best['test'], best['test_std'], best['seeds'])} "
                       f"({n['replicates']}); {len(n['rows'])} masks"}]
