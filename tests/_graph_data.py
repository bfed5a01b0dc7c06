"""Tiny generated graph data in the raw formats the graph DataModules read: the TU text files, Geom-GCN's
Actor files and LRGB's Peptides-func CSV and split pickle."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np

#: Small molecules (RDKit parses them all); the peptides writer cycles through them.
SMILES = ("CCO", "c1ccccc1O", "CC(=O)N[C@@H](C)C(=O)O", "C1CCNC1C(=O)O", "NCC(=O)O", "CC(C)C[C@H](N)C(=O)O")


def write_tu(root: Path, name: str = "TOY", graphs: int = 20, classes: int = 2, node_labels: int | None = 3,
             node_attributes: int = 0, edge_labels: int | None = None, seed: int = 0) -> list[int]:
    """``<root>/TUDataset/<name>/raw/<name>_*.txt``: ``graphs`` rings of 3 to 6 nodes (edges both ways) with
    graph labels 1..classes (TU files number from 1; the first graphs cycle through the classes), node labels
    and attributes and edge labels as asked. Returns the labels, renumbered from 0."""
    rng = np.random.default_rng(seed)
    raw = root / "TUDataset" / name / "raw"
    raw.mkdir(parents=True)
    edges, indicator, labels, node_lab, node_att, edge_lab = [], [], [], [], [], []
    first = 1  # TU node ids start at 1
    for g in range(graphs):
        n = 3 + g % 4
        for i in range(n):
            j = (i + 1) % n
            edges += [(first + i, first + j), (first + j, first + i)]
            if edge_labels:
                label = int(rng.integers(edge_labels))
                edge_lab += [label, label]
        indicator += [g + 1] * n
        node_lab += [int(v) for v in rng.integers(0, node_labels or 1, n)]
        node_att += [rng.normal(size=node_attributes).round(3).tolist() for _ in range(n)]
        labels.append(1 + g % classes)
        first += n
    (raw / f"{name}_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
    (raw / f"{name}_graph_indicator.txt").write_text("".join(f"{g}\n" for g in indicator))
    (raw / f"{name}_graph_labels.txt").write_text("".join(f"{c}\n" for c in labels))
    if node_labels:
        (raw / f"{name}_node_labels.txt").write_text("".join(f"{v}\n" for v in node_lab))
    if node_attributes:
        (raw / f"{name}_node_attributes.txt").write_text("".join(", ".join(map(str, a)) + "\n" for a in node_att))
    if edge_labels:
        (raw / f"{name}_edge_labels.txt").write_text("".join(f"{v}\n" for v in edge_lab))
    return [c - 1 for c in labels]


def write_actor(root: Path, nodes: int = 30, features: int = 8, classes: int = 3) -> None:
    """Geom-GCN's Actor files under ``<root>/actor/raw``: features and labels, directed edges (a ring plus
    chords), and ten splits whose training part starts at node ``i`` for split ``i``."""
    rng = np.random.default_rng(0)
    raw = root / "actor" / "raw"
    raw.mkdir(parents=True)
    lines = ["node_id\tfeature\tlabel"]
    for v in range(nodes):
        on = sorted({int(f) for f in rng.integers(0, features, 3)} | {v % features})
        lines.append(f"{v}\t{','.join(map(str, on))}\t{v % classes}")
    (raw / "out1_node_feature_label.txt").write_text("\n".join(lines) + "\n")
    edges = [(v, (v + 1) % nodes) for v in range(nodes)] + [(v, (v + 7) % nodes) for v in range(0, nodes, 3)]
    (raw / "out1_graph_edges.txt").write_text("\n".join(["node_id\tnode_id", *(f"{a}\t{b}" for a, b in edges)]) + "\n")
    for i in range(10):
        order = np.roll(np.arange(nodes), -i)
        masks = {key: np.zeros(nodes, dtype=np.uint8) for key in ("train_mask", "val_mask", "test_mask")}
        masks["train_mask"][order[: nodes // 2]] = 1
        masks["val_mask"][order[nodes // 2 : 4 * nodes // 5]] = 1
        masks["test_mask"][order[4 * nodes // 5 :]] = 1
        np.savez(raw / f"film_split_0.6_0.2_{i}.npz", **masks)


def write_peptides(root: Path, peptides: int = 12, split: tuple[int, int, int] = (6, 3, 3)) -> np.ndarray:
    """LRGB's ``lrgb/peptides-functional/raw/peptide_multi_class_dataset.csv.gz`` (index, smiles,
    peptide_seq, labels as a list string, identifier) and the split pickle of numpy index arrays. Returns
    the labels (peptides, 10)."""
    rng = np.random.default_rng(0)
    folder = root / "lrgb" / "peptides-functional"
    (folder / "raw").mkdir(parents=True)
    labels = rng.integers(0, 2, (peptides, 10))
    rows = [",smiles,peptide_seq,labels,identifier"]
    for i in range(peptides):
        rows.append(f'{i},{SMILES[i % len(SMILES)]},AG,"{labels[i].tolist()}",{i}')
    with gzip.open(folder / "raw" / "peptide_multi_class_dataset.csv.gz", "wt") as f:
        f.write("\n".join(rows) + "\n")
    order = rng.permutation(peptides)
    a, b = split[0], split[0] + split[1]
    index = {"train": order[:a], "val": order[a:b], "test": order[b : b + split[2]]}
    with open(folder / "splits_random_stratified_peptide.pickle", "wb") as f:
        pickle.dump(index, f)
    return labels
