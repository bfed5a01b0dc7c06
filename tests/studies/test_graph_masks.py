"""The mask sweep trains the same model under each mask on a tiny graph and reports a table and a plot; the
graph_masks_* studies run it under the study runner and render their pages from their stores."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest
import torch
from torch_geometric.data import Batch, Data

from attnmm.data.graphs import motif_graphs
from attnmm.masks import SameGraph
from studies._graphs import mask_sweep as gms
from studies._runner import Study, View, template

matplotlib.use("Agg")

MASKS = ["graph", "khop2", "virtual", "expander", "full"]
FAST = dict(epochs=15, lr=0.05, hidden=4, heads=2, dropout=0.0, in_drop=0.0)


def _graph() -> Data:
    """30 nodes in 3 classes, each node linked to nodes of its class; 12 train, 9 val, 9 test nodes."""
    g = torch.Generator().manual_seed(0)
    n = 30
    y = torch.arange(n) % 3
    x = torch.nn.functional.one_hot(y, 3).float() + 0.1 * torch.randn(n, 3, generator=g)
    src = torch.arange(n).repeat(2)
    edge_index = torch.stack([src, (src + torch.tensor([3, 6]).repeat_interleave(n)) % n])
    split = torch.arange(n)
    return Data(x=x, y=y, edge_index=edge_index, train_mask=split < 12, val_mask=(split >= 12) & (split < 21),
                test_mask=split >= 21)


def _pages(store: dict) -> dict[str, str]:
    """The blocks of the sweep's pages, rendered from ``store`` (:func:`gms.as_store`'s form) through the page.md
    of its task's study."""
    page = gms.ROOT / "studies" / f"graph_masks_{store['task']}" / "page.md"
    return {k: "\n".join(v) + "\n" for k, v in template.pages(page, store, gms.names(store)).items()}


def _table(store: dict) -> str:
    """The sweep's table: on real data the table lines of its section."""
    if store["task"] not in gms.REAL_TASKS:
        return _pages(store)["results"]
    return "".join(line + "\n" for line in _pages(store)["docs/graphs.md#sweep"].splitlines() if line.startswith("|"))


def _section(store: dict) -> str:
    pages = _pages(store)
    assert pages["results"] == pages["docs/graphs.md#sweep"].replace("](figures/", "](../../docs/figures/")
    return pages["docs/graphs.md#sweep"]


def test_mask_names() -> None:
    assert gms.parse_mask("khop3") == ("khop", 3)
    assert gms.parse_mask("expander") == ("expander", 4) and gms.parse_mask("expander6") == ("expander", 6)
    with pytest.raises(ValueError, match="valid: graph, khopK"):
        gms.parse_mask("hop2")


def test_masks_of_a_batch() -> None:
    g = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    batch = Batch.from_data_list([g, g])
    N = 6
    graph, extra = gms.build_mask("graph", batch)
    assert extra == 0 and graph.nnz(N) == 6 + N  # the edges and self loops
    full, _ = gms.build_mask("full", batch)
    assert isinstance(full, SameGraph) and full.nnz(N) == 2 * 9
    virtual, G = gms.build_mask("virtual", batch)
    assert G == 2 and virtual.nnz(N + G) == 6 + (N + G) + 2 * N  # edges, self loops, both ways to the hub
    assert gms.build_mask("khop2", batch)[0].nnz(N) == 2 * 9  # a 3-cycle: two hops reach every node
    with pytest.raises(ValueError, match="add_expander"):
        gms.build_mask("expander", batch)
    gen = torch.Generator().manual_seed(0)
    with_x = Batch.from_data_list([gms.add_expander(g, "expander2", gen) for g in (g, g)])
    mask, _ = gms.build_mask("expander2", with_x)
    dense = mask.dense(N)
    assert not dense[:3, 3:].any() and not dense[3:, :3].any()  # expander edges stay inside each graph
    assert gms.add_expander(g, "graph", gen) is g


def test_node_sweep_same_model_and_seeds(tmp_path: Path) -> None:
    runs = [{"mask": m, "seed": s, **gms.run_node(_graph(), m, s, FAST)} for m in MASKS for s in (0, 1)]
    by_mask = {r["mask"]: r for r in runs if r["seed"] == 0}
    assert by_mask["graph"]["val"] >= 0.9  # the graph mask separates the classes
    assert by_mask["full"]["pairs"] == 30 * 30 and by_mask["graph"]["pairs"] == 60 + 30
    assert all(0.0 <= r["test"] <= 1.0 and r["train_s"] > 0 and 1 <= r["best_epoch"] <= 15 for r in runs)
    # the same seed gives the same run
    again = gms.run_node(_graph(), "graph", 0, FAST)
    assert (again["val"], again["test"], again["best_epoch"]) == tuple(by_mask["graph"][k] for k in ("val", "test",
                                                                                                    "best_epoch"))
    table = _table({"task": "cora", "kind": "node", "seeds": [0, 1], "runs": runs})
    assert table.count("\n") == 2 + len(MASKS) and "| `khop2` | 150 |" in table
    fig = gms.figure([{"task": "cora", "kind": "node", "seeds": [0, 1], "runs": runs}])
    fig.savefig(tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_graph_sweep_on_motifs() -> None:
    graphs = motif_graphs(16, num_nodes=6)
    splits = gms.prepare_graphs({"train": graphs[:8], "val": graphs[8:12], "test": graphs[12:]}, pe_dim=2)
    config = dict(epochs=2, batch_size=4, d_model=8, hidden=4, heads=2)
    runs = [{"mask": m, **gms.run_graphs(splits, m, 0, config)} for m in ("graph", "virtual", "full")]
    pairs = {r["mask"]: r["pairs"] for r in runs}
    assert pairs["graph"] < pairs["virtual"] < pairs["full"] == 11 * 11  # per graph: 6 + 5 motif nodes
    with pytest.raises(ValueError, match="prepare_graphs"):
        gms.run_graphs(splits, "graph", 0, {**config, "pe_dim": 4})


def test_a_study_runs_the_sweep_and_renders_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gms, "load_task", lambda task, config: _graph())
    folder = tmp_path / "graph_masks_cora"
    folder.mkdir()
    config = {k: v for k, v in FAST.items() if k != "epochs"} | {"epochs": 3}
    protocol = {"sets": {"train": {"task": "cora", "split": None, "part": "train"},
                         "test": {"task": "cora", "split": None, "part": "test"}},
                "train": "train", "validation": [], "test": ["test"],
                "candidates": {"graph": {"mask": "graph"}, "full": {"mask": "full"}},
                "seeds": {"select": [], "test": [0]}, "budget": {"task": "cora", "config": config},
                "test_candidates": ["graph", "full"]}
    (folder / "protocol.json").write_text(json.dumps(protocol))
    shared = gms.ROOT / "studies" / "_graphs" / "sweep.md"
    page = (gms.ROOT / "studies" / "graph_masks_cora" / "page.md").read_text()
    (folder / "page.md").write_text(page.replace("../_graphs/sweep.md", str(shared)))
    study = Study(folder, gms)
    new = study.run("test", progress=False)
    assert [r["candidate"] for r in new] == ["graph", "full"] and new[0]["detail"]["epochs"] == 3
    scored = json.loads((folder / "store.json").read_text())["scored"]
    assert scored == {study.protocol.hash: {"fold": ["cora:None:test"]}}
    study.store.data["detail"] = {"task": "cora", "kind": "node", "seeds": [0]}
    store = gms.as_store(View(study))
    assert [r["mask"] for r in store["runs"]] == ["graph", "full"]  # the protocol's order, not the store's
    assert View(study).pages["results"][0].startswith("| mask |")
    gms.figure([store]).savefig(tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").exists()


def test_self_knn_and_unions() -> None:
    assert gms.parse_mask("knn10") == ("knn", 10) and gms.parse_mask("self") == ("self", 0)
    assert gms.parse_mask("graph|knn3") == ("union", 0)
    with pytest.raises(ValueError, match="not virtual or full"):
        gms.parse_mask("graph|full")
    data = _graph()
    N = 30
    own, _ = gms.build_mask("self", data)
    assert own.nnz(N) == N
    knn, _ = gms.build_mask("knn3", data, loops=False)
    assert knn.nnz(N) == 3 * N and not knn.dense(N).diagonal().any()
    union, _ = gms.build_mask("graph|knn3", data, loops=False)
    dense = union.dense(N)
    assert torch.equal(dense, gms.build_mask("graph", data, loops=False)[0].dense(N) | knn.dense(N))
    assert gms.build_mask("graph|knn3", data)[0].dense(N).diagonal().all()  # self loops by default
    assert "| `graph\\|knn3` |" in _table({"task": "cora", "kind": "node", "seeds": [0], "runs": [
        {"mask": "graph|knn3", "seed": 0, "pairs": 1, "val": 0.5, "test": 0.5, "train_s": 1.0}]})


def _real_store(task: str, runs: list[dict]) -> dict:
    return {"task": task, "kind": gms.TASKS[task], "masks": sorted({r["mask"] for r in runs}), "seeds": [0],
            "splits": sorted({r["split"] for r in runs}), "metric": "acc", "threads": 1, "wall_s": 60.0,
            "started": "2026-12-01 00:00 UTC", "command": "python -m benchmarks.graph_mask_sweep --task " + task,
            "config": {"recipe_config": gms.REAL_TASKS[task].config, "epochs": 2}, "runs": runs}


def test_sweep_on_a_generated_actor_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from _graph_data import write_actor

    write_actor(tmp_path / "data")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    args = [f"--data.root={tmp_path / 'data'}"]
    runs = [gms.run_real("actor", m, split, 0, 2, args)
            for m in ("self", "graph", "graph|knn2", "virtual", "expander") for split in (0, 1)]
    assert [(r["mask"], r["split"]) for r in runs][:2] == [("self", 0), ("self", 1)]
    pairs = {r["mask"]: r["pairs"] for r in runs}
    assert pairs["self"] == 30 and pairs["graph"] < pairs["graph|knn2"]  # no self loops: the ego is apart
    assert all(0 <= r["test"] <= 1 and 1 <= r["best_epoch"] <= 2 for r in runs)
    again = gms.run_real("actor", "graph", 1, 0, 2, args)
    assert (again["val"], again["test"]) == next((r["val"], r["test"]) for r in runs if r["mask"] == "graph"
                                                 and r["split"] == 1)  # seeded: the same run again
    store = _real_store("actor", runs)
    table = _table(store)
    assert "test − `self`, paired" in table.splitlines()[0] and table.count("/2 higher)") == 4
    section = _section(store)
    assert "**2 epochs** (a short schedule)" in section and "SGFormer 37.9" in section
    gms.figure([store], anchors=True).savefig(tmp_path / "actor.png")


def test_sweep_on_generated_tu_folds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from _graph_data import write_tu

    write_tu(tmp_path / "data", "PROTEINS", graphs=40)
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    args = [f"--data.root={tmp_path / 'data'}", "--data.batch_size=8"]
    runs = [gms.run_real("proteins", m, 3, 0, 1, args) for m in ("self", "graph", "virtual", "expander", "full")]
    pairs = {r["mask"]: r["pairs"] for r in runs}
    assert pairs["self"] < pairs["graph"] < pairs["virtual"] and pairs["graph"] <= pairs["full"]
    assert all(r["split"] == 3 and 0 <= r["val"] <= 1 for r in runs)


def test_sweep_on_generated_peptides_scores_average_precision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rdkit")
    from _graph_data import write_peptides

    write_peptides(tmp_path / "data")
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    args = [f"--data.root={tmp_path / 'data'}", "--data.batch_size=3"]
    runs = [gms.run_real("peptides", m, None, 0, 1, args) for m in ("graph", "virtual", "full")]
    assert [r["split"] for r in runs] == [None] * 3
    assert all(0 <= r["val"] <= 1 and 0 <= r["test"] <= 1 for r in runs)  # average precision over the labels


def test_a_resumed_sweep_says_when_it_stood_stopped() -> None:
    runs = [{"mask": m, "seed": 0, "split": s, "val": 0.3 + 0.01 * s, "test": 0.3, "pairs": 10.0, "train_s": 1.0,
             "best_epoch": 1} for m in ("self", "graph") for s in (0, 1)]
    store = {**_real_store("actor", runs), "paused_s": 600.0,
             "resumed": ["2026-12-01 01:00 UTC", "2026-12-01 02:00 UTC"]}
    assert "(2026-12-01 00:00 UTC, resumed 2026-12-01 01:00 UTC, resumed " in _section(store)
    assert "; stopped 10 min in all, not counted, 1 min running for 4 runs" in _section(store)
    assert _table(store).count("/2 higher)") == 1


def test_a_sweep_run_in_parts_names_each_part() -> None:
    def runs(splits: tuple[int, ...]) -> list[dict]:
        return [{"mask": m, "seed": 0, "split": s, "val": 0.3 + 0.01 * s, "test": 0.3 + 0.02 * (m == "graph"),
                 "pairs": 10.0, "train_s": 1.0, "best_epoch": 1} for m in ("self", "graph") for s in splits]

    a, b = _real_store("actor", runs((0, 1))), _real_store("actor", runs((2, 3)))
    a["command"] += " --splits 0-1"
    b.update(command=b["command"] + " --splits 2-3", started="2026-12-01 00:01 UTC", wall_s=90.0, paused_s=120.0,
             resumed=["2026-12-02 00:00 UTC"])
    merged = {**a, "runs": a["runs"] + b["runs"], "splits": [0, 1, 2, 3], "wall_s": 90.0,
              "parts": [{k: p[k] for k in ("command", "started", "wall_s", "resumed", "paused_s") if k in p}
                        for p in (a, b)]}
    assert "1 thread each, merged with `--merge`). Part b ran later. The model" in _section(
        {**merged, "note": "Part b ran later."})
    section = _section(merged)
    assert f"`{a['command']}` and `{b['command']}`, side by side" in section and "splits 0-3" in section
    assert ("(2026-12-01 00:00 UTC, resumed 2026-12-02 00:00 UTC; stopped 2 min in all, not counted, 2 min running "
            "for 8 runs, 1 thread each" in section)
    assert _table(merged).count("/4 higher)") == 1


def test_one_run_per_mask_shows_no_spread() -> None:
    # Peptides-func has one official split: a sweep of one seed has one run per mask and nothing to average
    runs = [{"mask": m, "seed": 0, "split": None, "val": v, "test": v - 0.02, "pairs": 10.0 * (i + 1),
             "train_s": 100.0, "best_epoch": 3} for i, (m, v) in enumerate((("self", 0.46), ("graph", 0.48)))]
    store = {**_real_store("peptides", runs), "metric": "ap"}
    table = _table(store)
    assert "| `graph` | 20 | 48.00 | 46.00 | 100.0 s | +2.00 (one run) |" in table and "±" not in table
    section = _section(store)
    assert "one run per mask, so no spread is shown" in section and "; seed 0." in section
    assert gms._replicates(store) == "1 seed"
    d = gms.paired(runs, "graph", "self")
    assert d is not None and d["n"] == 1 and d["sem"] is None and d["mean"] == pytest.approx(2.0)
    assert gms.paired(runs, "virtual", "self") is None  # no shared replicate
    matplotlib.use("Agg")
    assert gms.figure([store], anchors=True) is not None


def test_close_published_numbers_share_one_label() -> None:
    labels = gms._anchor_labels((("GCN", 59.30), ("GatedGCN", 58.64), ("GPS", 65.35), ("Exphormer", 65.27)), 0.8)
    assert labels == [("GatedGCN, GCN", 59.30), ("Exphormer, GPS", 65.35)]
    assert gms._anchor_labels((("A", 1.0), ("B", 3.0)), 0.5) == [("A", 1.0), ("B", 3.0)]
