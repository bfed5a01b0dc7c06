"""Mask sweeps: the same graph model, the same seeds, a list of attention masks.

``python -m benchmarks.graph_mask_sweep --task cora --masks graph,khop2,virtual,expander,full --seeds 0,1,2``
trains one model per mask and seed and writes, under ``--out`` (default ``runs/graph_mask_sweep``),
``graph_mask_sweep_<task>.json`` (every run), ``.md`` (the table) and ``.png`` (accuracy against pairs
attended and against training time). The mask is the only thing that changes between rows: the model,
its initial weights (seeded), the data and the training are the same.

Masks (self loops included in each, as in the recipes):

- ``graph``: the edges: node i attends j iff the edge j -> i exists;
- ``khopK`` (e.g. ``khop2``): every node within K hops (``graph_helpers.k_hop``);
- ``virtual``: the edges and one virtual node per graph, linked both ways to every node of its graph
  (``graph_helpers.virtual_nodes``); its input is a learned vector that every variant's model has;
- ``expander`` / ``expanderD``: the edges and random expander edges of degree D (default 4) inside each
  graph, drawn once per seed as in Exphormer (``graph_helpers.expander``);
- ``full``: full attention inside each graph (``SameGraph``).

Tasks: ``cora`` (Planetoid Cora, public split, under ``$ATTNMM_DATA``; the GAT-style model of
``benchmarks.graph_node_sweep``, ``recipes/configs/graph_node_gat.yaml``, trained full batch) and
``motifs`` (the house vs 5-cycle graphs of ``recipes/graph_graph.py``; the same attention layers with
the recipe's adapter, random-walk encodings and mean pooling, in mini-batches). Every epoch is
evaluated; the reported validation and test accuracies are those of the first epoch with the best
validation accuracy, so nothing is chosen on test. ``--config`` overrides the task's config (JSON).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnmm.adapters import GraphAdapter
from attnmm.masks import Graph, Mask, SameGraph
from attnmm.masks.graph_helpers import expander, k_hop, self_loops, virtual_nodes
from attnmm.nn import GraphAttentionEncoder
from benchmarks.graph_node_sweep import DEFAULTS as NODE_DEFAULTS
from benchmarks.graph_node_sweep import build_encoder

#: The motif task's config: GraphAdapter (random-walk encodings) -> attention layers -> mean pooling. Two
#: random-walk steps, not the recipe's 8: the return probability after 3 steps marks the house's triangle
#: in each node's input, and every mask then reaches 100% (the structure must come through attention).
GRAPH_DEFAULTS: dict[str, Any] = dict(
    lr=2e-3, wd=0.0, d_model=64, hidden=16, heads=4, layers=2, dropout=0.1, pe_dim=2, epochs=40, batch_size=32,
    num_graphs=1000, num_nodes=20,
)
#: Where the runs of the docs (docs/results.md, the figure of docs/make_figures.py) are stored.
STORE = Path(__file__).parent / "results"
#: The command's tasks and their kind: node classification on one graph, or classification of graphs.
TASKS = {"cora": "node", "motifs": "graph"}
_NAME = re.compile(r"^(graph|virtual|full|khop(\d+)|expander(\d*))$")


def parse_mask(name: str) -> tuple[str, int]:
    """``(kind, parameter)`` of a mask name: ``khop3`` -> ``("khop", 3)``, ``expander`` -> ``("expander", 4)``."""
    m = _NAME.match(name)
    if m is None:
        raise ValueError(f"unknown mask {name!r}; valid: graph, khopK (e.g. khop2), virtual, expander[D], full")
    if m.group(2):
        return "khop", int(m.group(2))
    if name.startswith("expander"):
        return "expander", int(m.group(3) or 4)
    return name, 0


def add_expander(data: Any, name: str, generator: torch.Generator) -> Any:
    """A shallow copy of ``data`` (one graph) with ``expander_index``, its random expander edges (2, M_x),
    when ``name`` is an expander mask; ``data`` itself otherwise. PyG's batching offsets the index."""
    kind, degree = parse_mask(name)
    if kind != "expander":
        return data
    data = copy.copy(data)
    data.expander_index = expander(int(data.num_nodes), degree, generator=generator).edge_index
    return data


def build_mask(name: str, data: Any) -> tuple[Mask, int]:
    """The mask ``name`` over a PyG ``Data`` or ``Batch``, and how many virtual nodes it appends (G or 0).

    Expander masks read the ``expander_index`` of :func:`add_expander`.
    """
    kind, k = parse_mask(name)
    N, edge_index = int(data.num_nodes), data.edge_index
    batch = getattr(data, "batch", None)
    if batch is None:
        batch = torch.zeros(N, dtype=torch.long, device=edge_index.device)
    if kind == "full":
        return SameGraph(batch), 0
    if kind == "virtual":
        G = int(batch.max()) + 1 if N else 0
        return Graph(edge_index, N + G) | virtual_nodes(N, batch) | self_loops(N + G), G
    if kind == "khop":
        return k_hop(edge_index, N, k) | self_loops(N), 0
    if kind == "expander":
        extra = getattr(data, "expander_index", None)
        if extra is None:
            raise ValueError(f"mask {name!r} needs the graph's expander edges: pass add_expander(data, ...) first")
        edge_index = torch.cat([edge_index, extra], 1)
    return Graph(edge_index, N) | self_loops(N), 0


def _say(line: str) -> None:
    print(line, flush=True)


def _merge(defaults: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    unknown = set(config) - set(defaults)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; valid: {sorted(defaults)}")
    return {**defaults, **config}


def _best(val: list[float], test: list[float]) -> dict[str, Any]:
    epoch = max(range(len(val)), key=lambda e: (val[e], -e))  # the first epoch with the best validation
    return {"val": val[epoch], "test": test[epoch], "best_epoch": epoch + 1}


def run_node(data: Any, mask: str, seed: int, config: dict[str, Any] | None = None,
             log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train the node classifier (``benchmarks.graph_node_sweep``'s config keys) on one graph with
    ``train_mask``/``val_mask``/``test_mask`` under ``mask``; accuracies in [0, 1], times in seconds."""
    c = _merge(NODE_DEFAULTS, config or {})
    data = add_expander(data, mask, torch.Generator().manual_seed(seed))
    attn_mask, extra = build_mask(mask, data)
    N, num_features, num_classes = int(data.num_nodes), data.num_features, int(data.y.max()) + 1
    torch.manual_seed(seed)
    adapter = GraphAdapter(in_channels=num_features, d_model=None, self_loops=True, dropout=c["in_drop"])
    encoder = build_encoder(num_features, num_classes, c)
    virtual = nn.Parameter(torch.zeros(1, num_features))  # virtual node input, in every variant's model
    optimizer = torch.optim.Adam([*adapter.parameters(), *encoder.parameters(), virtual], lr=c["lr"],
                                 weight_decay=c["wd"])

    def logits() -> Tensor:
        x = torch.cat([adapter(data).x, virtual.expand(extra, -1)])  # (N + G, F)
        return encoder(x, attn_mask)[:N]  # (N, C)

    val, test, train_s, started = [], [], 0.0, time.perf_counter()
    for epoch in range(c["epochs"]):
        t = time.perf_counter()
        adapter.train(), encoder.train()
        loss = F.cross_entropy(logits()[data.train_mask], data.y[data.train_mask])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        train_s += time.perf_counter() - t
        adapter.eval(), encoder.eval()
        with torch.no_grad():
            hit = logits().argmax(-1) == data.y
        val.append(float(hit[data.val_mask].float().mean()))
        test.append(float(hit[data.test_mask].float().mean()))
        if log is not None and (epoch + 1) % 25 == 0:
            log(f"    epoch {epoch + 1}/{c['epochs']}: val {100 * val[-1]:.1f} ({time.perf_counter() - started:.0f} s)")
    return {**_best(val, test), "pairs": attn_mask.nnz(N + extra), "train_s": train_s,
            "wall_s": time.perf_counter() - started, "epochs": c["epochs"]}


def prepare_graphs(splits: dict[str, list[Any]], pe_dim: int) -> dict[str, list[Any]]:
    """The splits with each graph's random-walk encoding computed once (``random_walk_pe``)."""
    transform = GraphAdapter(in_channels=1, pe="random_walk", pe_dim=pe_dim).transform()
    return {k: [transform(g.clone()) for g in graphs] for k, graphs in splits.items()}


def run_graphs(splits: dict[str, list[Any]], mask: str, seed: int, config: dict[str, Any] | None = None,
               log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train the graph classifier (:data:`GRAPH_DEFAULTS`) on ``splits`` (``train``/``val``/``test``
    lists of ``Data`` with ``y`` and, from :func:`prepare_graphs`, ``random_walk_pe``) under ``mask``."""
    from torch_geometric.loader import DataLoader

    from attnmm.nn import PoolingClassifier

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

    def logits(batch: Any) -> Tensor:
        attn_mask, extra = build_mask(mask, batch)
        tokens = adapter(batch)
        h = encoder(torch.cat([tokens.x, virtual.expand(extra, -1)]), attn_mask)  # (N + G, D)
        return head(h[: tokens.x.size(0)], tokens)  # (B, C)

    train = DataLoader(splits["train"], batch_size=c["batch_size"], shuffle=True,
                       generator=torch.Generator().manual_seed(seed))
    fixed = {k: list(DataLoader(splits[k], batch_size=c["batch_size"])) for k in ("val", "test")}
    pairs = 0  # over every graph of the splits
    for graphs in splits.values():
        for b in DataLoader(graphs, batch_size=c["batch_size"]):
            attn_mask, extra = build_mask(mask, b)
            pairs += attn_mask.nnz(int(b.num_nodes) + extra)
    val, test, train_s, started = [], [], 0.0, time.perf_counter()
    for epoch in range(c["epochs"]):
        modules.train()
        for batch in train:
            t = time.perf_counter()
            loss = F.cross_entropy(logits(batch), batch.y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            train_s += time.perf_counter() - t
        modules.eval()
        with torch.no_grad():
            acc = {k: sum(int((logits(b).argmax(-1) == b.y).sum()) for b in bs) / sum(b.num_graphs for b in bs)
                   for k, bs in fixed.items()}
        val.append(acc["val"])
        test.append(acc["test"])
        if log is not None and (epoch + 1) % 10 == 0:
            log(f"    epoch {epoch + 1}/{c['epochs']}: val {100 * val[-1]:.1f} ({time.perf_counter() - started:.0f} s)")
    num_graphs = sum(len(graphs) for graphs in splits.values())
    return {**_best(val, test), "pairs": pairs / num_graphs, "train_s": train_s,
            "wall_s": time.perf_counter() - started, "epochs": c["epochs"]}


def sweep(kind: str, data: Any, masks: list[str], seeds: list[int], config: dict[str, Any] | None = None,
          log: Callable[[str], None] | None = _say,
          after_run: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """One run per mask and seed (``run_node`` for ``kind="node"``, ``run_graphs`` for ``"graph"``), with progress
    lines to ``log``; ``after_run`` gets the runs so far after each one (to store them as they come)."""
    for name in masks:
        parse_mask(name)  # refuse a bad name before training anything
    if kind not in ("node", "graph"):
        raise ValueError(f"kind must be 'node' or 'graph', got {kind!r}")
    run = run_node if kind == "node" else run_graphs
    runs, total = [], len(masks) * len(seeds)
    for name in masks:
        for seed in seeds:
            r = {"mask": name, "seed": seed, **run(data, name, seed, config, log)}
            runs.append(r)
            if log is not None:
                log(f"[{kind} {len(runs)}/{total}] {name} seed {seed}: val {100 * r['val']:.1f}, "
                    f"test {100 * r['test']:.1f}, {r['pairs']:,.0f} pairs, train {r['train_s']:.1f} s")
            if after_run is not None:
                after_run(runs)
    return runs


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per mask, in the order run: mean and sample std over seeds of the accuracies (%) and times (s), and
    the mean number of pairs (expander edges are drawn per seed)."""
    out = []
    for name in dict.fromkeys(r["mask"] for r in runs):
        rs = [r for r in runs if r["mask"] == name]
        row: dict[str, Any] = {"mask": name, "seeds": len(rs), "pairs": statistics.fmean(r["pairs"] for r in rs)}
        for key, scale in (("val", 100.0), ("test", 100.0), ("train_s", 1.0)):
            xs = [scale * r[key] for r in rs]
            row[key], row[f"{key}_std"] = statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0
        out.append(row)
    return out


def markdown(runs: list[dict[str, Any]], kind: str) -> str:
    """The sweep's table: mask, pairs attended, validation and test accuracy (mean ± std), train time."""
    pairs = "pairs attended" if kind == "node" else "pairs attended (per graph)"
    lines = [f"| mask | {pairs} | validation acc | test acc | train time per run |", "|---|---|---|---|---|"]
    for r in summarize(runs):
        lines.append(f"| `{r['mask']}` | {r['pairs']:,.0f} | {r['val']:.2f} ± {r['val_std']:.2f} | "
                     f"{r['test']:.2f} ± {r['test_std']:.2f} | {r['train_s']:.1f} ± {r['train_s_std']:.1f} s |")
    return "\n".join(lines) + "\n"


def figure(stores: list[dict[str, Any]]) -> Any:
    """Per stored sweep, test accuracy (mean ± std over seeds) against pairs attended (marker area: train
    time) and against train time per run."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6 * len(stores)), layout="constrained")
    axes = fig.subplots(len(stores), 2, squeeze=False)
    for (left, right), store in zip(axes, stores, strict=True):
        rows = summarize(store["runs"])
        most = max(r["train_s"] for r in rows) or 1.0
        for i, r in enumerate(rows):
            size = 30 + 400 * r["train_s"] / most
            left.errorbar(r["pairs"], r["test"], yerr=r["test_std"], fmt="none", ecolor="grey", capsize=3)
            left.scatter(r["pairs"], r["test"], s=size, alpha=0.7, color=f"C{i}")
            left.annotate(r["mask"], (r["pairs"], r["test"]), textcoords="offset points", xytext=(6, 6))
            right.errorbar(r["train_s"], r["test"], xerr=r["train_s_std"], yerr=r["test_std"], fmt="o", capsize=3,
                           color=f"C{i}")
            right.annotate(r["mask"], (r["train_s"], r["test"]), textcoords="offset points", xytext=(6, 6))
        per = "" if store["kind"] == "node" else " per graph"
        left.set(xscale="log", xlabel=f"pairs attended{per} (marker area: train time)", ylabel="test accuracy (%)",
                 title=f"{store['task']}: accuracy against pairs attended")
        right.set(xscale="log", xlabel="train time per run (s)", ylabel="test accuracy (%)",
                  title=f"{store['task']}: accuracy against time ({len(store['seeds'])} seeds)")
    return fig


def load_stores(folder: Path = STORE) -> list[dict[str, Any]]:
    """The stored sweeps of ``folder`` (by default the ones docs/results.md reports), in :data:`TASKS` order."""
    paths = [folder / f"graph_mask_sweep_{task}.json" for task in TASKS]
    stores = [json.loads(p.read_text()) for p in paths if p.exists()]
    if not stores:
        raise FileNotFoundError(f"no stored sweeps in {folder}: python -m benchmarks.graph_mask_sweep --out {folder}")
    return stores


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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.graph_mask_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=list(TASKS), default="cora")
    parser.add_argument("--masks", default="graph,khop2,virtual,expander,full", help="comma-separated mask names")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (default: the task config's)")
    parser.add_argument("--config", default="{}", help="JSON overrides of the task's config")
    parser.add_argument("--out", type=Path, default=Path("runs/graph_mask_sweep"), help="output folder")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = json.loads(args.config)
    if args.epochs is not None:
        config["epochs"] = args.epochs
    masks, seeds = args.masks.split(","), [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"graph_mask_sweep_{args.task}"
    started = time.perf_counter()
    kind = TASKS[args.task]
    defaults = NODE_DEFAULTS if kind == "node" else GRAPH_DEFAULTS
    store = {"task": args.task, "kind": kind, "masks": masks, "seeds": seeds, "config": _merge(defaults, config),
             "threads": args.threads, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}

    def save(runs: list[dict[str, Any]]) -> None:  # after every run: a stopped sweep keeps what it measured
        store.update(runs=runs, wall_s=time.perf_counter() - started)
        stem.with_suffix(".json").write_text(json.dumps(store, indent=1) + "\n")

    runs = sweep(kind, load_task(args.task, config), masks, seeds, config, after_run=save)
    table = markdown(runs, kind)
    stem.with_suffix(".md").write_text(table)
    figure([store]).savefig(stem.with_suffix(".png"), dpi=110)
    print(table + f"\n{len(runs)} runs in {store['wall_s']:.0f} s; wrote {stem}.json, .md and .png", flush=True)
    return store


if __name__ == "__main__":
    main()
