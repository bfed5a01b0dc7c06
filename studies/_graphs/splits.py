"""A recipe over every split of its protocol (the ``actor_splits`` and ``tu_splits`` studies): a run is
``recipes/graph_node.py fit`` (or ``graph_graph.py``) on one split of Actor's ten geom-gcn splits or a TU set's
ten folds with a candidate's overrides, its sets the split's node or graph indices, which the runner compares."""

from __future__ import annotations

import functools
from typing import Any

from studies._runner import stats
from studies._runner.train import fit_scores, workdir

#: Per recipe: the option that picks a split.
RECIPES = {"graph_node": "data.split_index", "graph_graph": "data.fold"}


def command(recipe: str, config: str, name: str, split: int, seed: int, extra: list[str]) -> list[str]:
    """The recipe's ``fit`` command line for one split (one thread), paths relative to the repository."""
    return [f"recipes/{recipe}.py", "fit", "--config", config, "--data.name", name, f"--{RECIPES[recipe]}", str(split),
            "--seed_everything", str(seed), "--torch_threads", "1", *extra]


def metric_of(store: dict[str, Any]) -> str:
    """The headline metric of a store: ``test_acc``, or ``val_acc`` for a selection run (a split run scores
    accuracy: :func:`run`)."""
    return "val_acc" if store["select"] else "test_acc"


def paired(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per split, A's headline metric (:func:`metric_of`) minus B's (in points), over the splits both hold
    (:func:`studies._runner.stats.paired`: mean, std, standard error, wins and ties)."""
    key = metric_of(a)
    va = {r["split"]: 100 * r["metrics"][key] for r in a["runs"]}
    vb = {r["split"]: 100 * r["metrics"][key] for r in b["runs"]}
    d = stats.paired(va, vb, least=2)
    if d is None:
        common = len(set(va) & set(vb))
        raise ValueError(f"A and B share {common} splits with {key!r}; paired differences need at least 2")
    return {"metric": key, "splits": d["keys"], **d}


def table(by: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The table of labelled stores: the splits any holds, and per label the score (points) of each split, their
    mean and std and the stores' wall time."""
    splits = sorted({r["split"] for s in by.values() for r in s["runs"]})
    key = metric_of(next(iter(by.values()))) if by else None
    rows = []
    for label, store in by.items():
        scores = {r["split"]: 100 * r["metrics"][key] for r in store["runs"] if key in r["metrics"]}
        m = stats.moments(scores.values()) if scores else {"mean": float("nan"), "std": 0.0}
        rows.append({"label": label, "by": scores, "wall_s": store.get("wall_s", 0.0), **m})
    return {"splits": splits, "rows": rows}


# ---------------------------------------------------------------- the hooks of the actor_splits and tu_splits studies
@functools.cache
def _indices(name: str, split: int) -> dict[str, list[int]]:
    """The node (Actor) or graph (TU) indices of each part of one split."""
    if name == "Actor":
        from attnmm.data import NodeDataModule

        dm = NodeDataModule(name=name, split_index=split)
        dm.prepare_data()
        dm.setup("fit")
        data = next(iter(dm.train_dataloader()))
        return {p: data[f"{p}_mask"].nonzero().view(-1).tolist() for p in ("train", "val", "test")}
    from attnmm.data import GraphDataModule

    dm = GraphDataModule(name=name, pe="none", **({} if name == "peptides-func" else {"fold": split}))
    dm.setup("fit")
    return {p: dm.split_indices[p].tolist() for p in ("train", "val", "test")}


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Any:
    """``{"name": "PROTEINS", "split": 3, "part": "val"}``: that part's graphs (or Actor's nodes) of fold 3."""
    from studies._runner import Items

    kind = "node" if spec["name"] == "Actor" else "graph"
    ids = [f"{spec['name']}:{i}" for i in _indices(spec["name"], spec["split"])[spec["part"]]]
    return Items.of(spec, **{kind: ids})


def run(candidate: dict[str, Any], seed: int, train: Any, evaluate: Any, budget: dict[str, Any]) -> Any:
    """``fit`` of the recipe with the candidate's overrides on the train set's split; a selection run with
    ``--test_after_fit false`` (validation metrics only)."""
    spec, select = train.payload, evaluate.kind == "select"
    cmd = command(budget["recipe"], budget["config"], spec["name"], spec["split"], seed, candidate["extra"])
    run_dir = workdir(budget) / f"{spec['name']}_{'select' if select else 'test'}" / f"split_{spec['split']}"
    scores, out = fit_scores(cmd, run_dir, evaluate, "acc")
    return scores, {k: out[k] for k in ("metrics", "best_epoch", "monitor", "monitored", "wall_s") if k in out}


def stores(view: Any, kind: str) -> dict[str, dict[str, Any]]:
    """Per candidate (and, for tests, per dataset), the runs as the table reads them."""
    out: dict[str, dict[str, Any]] = {}
    for r in view.records(kind):
        spec = view.protocol.spec(view.protocol.split(r["split"]).train)
        label = r["candidate"] if kind == "select" else f"{r['candidate']} on {spec['name']}"
        store = out.setdefault(label, {"select": kind == "select", "runs": [], "wall_s": 0.0})
        store["runs"].append({"split": spec["split"], "metrics": r["detail"]["metrics"]})
        store["wall_s"] += r["detail"].get("wall_s", 0.0)
    return out


def context(detail: dict[str, Any], view: Any) -> dict[str, Any]:
    """The names of the page (studies/_graphs/splits.md): the selection and the test runs' :func:`table`, and the
    paired difference of the two test rows the protocol's ``paired`` names."""
    pair = view.protocol.data.get("paired")
    tests = stores(view, "test")
    d = paired(tests[pair[0]], tests[pair[1]]) if pair else None
    return {"tables": {kind: table(stores(view, kind)) for kind in ("select", "test")},
            "paired": d and {**d, "a": pair[0], "b": pair[1]}}
