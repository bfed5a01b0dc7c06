"""The short-range peer: Morgan (ECFP) fingerprints of each peptide's SMILES into gradient-boosted trees.

A peptide is the bit vector of its Morgan fingerprint (RDKit; every atom's circular neighbourhood up to
``radius`` bonds, hashed and folded to ``bits`` bits), and each of the 10 function labels gets its own
LightGBM binary classifier on those bits. The features see nothing beyond ``radius`` bonds of any atom,
so the peer says what short-range chemistry alone scores. Its hyperparameters (radius, bits, trees and
learning rate) are a small grid, chosen on the validation set only (the grid's numbers are stored).
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
import itertools
import json
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

#: What every grid point's trees share (LightGBM's names); rows and columns are subsampled, so the seed matters.
TREE_DEFAULTS: dict[str, Any] = {
    "num_leaves": 31, "min_data_in_leaf": 20, "bagging_fraction": 0.8, "bagging_freq": 1, "feature_fraction": 0.5,
}


def read_smiles(root: str | Path | None = None) -> tuple[list[str], np.ndarray]:
    """The SMILES and the 10 labels (G, 10) of every peptide of LRGB's raw CSV, in the file's order (the
    order of the graphs and of the official split's indices)."""
    from attnmm.data import resolve_root
    from attnmm.data.peptides import PEPTIDES_CSV

    path = resolve_root(root, "lrgb/peptides-functional") / "raw" / PEPTIDES_CSV
    rows = list(csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode("utf-8"))))
    return [r["smiles"] for r in rows], np.array([json.loads(r["labels"]) for r in rows], dtype=np.float32)


def morgan(smiles: Sequence[str], radius: int, bits: int) -> np.ndarray:
    """The Morgan fingerprint bits (G, ``bits``) uint8 of each SMILES (ECFP-(2 x ``radius``), folded to
    ``bits``); a SMILES RDKit cannot parse raises ValueError."""
    from rdkit import Chem, RDLogger
    from rdkit.Chem import rdFingerprintGenerator

    if radius < 0 or bits < 1:
        raise ValueError(f"radius must be >= 0 and bits >= 1, got {radius} and {bits}")
    RDLogger.DisableLog("rdApp.*")
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    out = np.zeros((len(smiles), bits), dtype=np.uint8)
    for i, s in enumerate(smiles):
        mol = Chem.MolFromSmiles(s)
        if mol is None:
            raise ValueError(f"RDKit cannot parse SMILES {i}: {s[:80]!r}")
        out[i, list(generator.GetFingerprint(mol).GetOnBits())] = 1
    return out


def grid(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The grid points of a candidate's ``grid`` ({"radius": [...], "bits": [...], "lr": [...], "trees": [...]}),
    named ``r2_b1024_lr0.05_t200``, in a fixed order (the tree counts of one radius, width and learning rate are
    prefixes of one ensemble: :func:`fit_predict` trains it once)."""
    points = {}
    for radius, bits, lr, trees in itertools.product(spec["radius"], spec["bits"], spec["lr"], spec["trees"]):
        points[f"r{radius}_b{bits}_lr{lr:g}_t{trees}"] = {"radius": radius, "bits": bits, "lr": lr, "trees": trees}
    return points


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """The mean over labels of each label's average precision (LRGB's AP; the recipe's ``val_ap``/``test_ap``)."""
    from torchmetrics.functional.classification import multilabel_average_precision

    target = torch.as_tensor(labels).long()
    return float(multilabel_average_precision(torch.as_tensor(scores).float(), target, labels.shape[1]))


def fit_predict(x: np.ndarray, y: np.ndarray, evaluate: Mapping[str, np.ndarray], lr: float, trees: Sequence[int],
                seed: int, params: Mapping[str, Any] | None = None,
                threads: int = 1) -> dict[int, dict[str, np.ndarray]]:
    """One LightGBM ensemble per label, ``max(trees)`` trees at learning rate ``lr``, trained on ``x`` (G, F) and
    ``y`` (G, L); per tree count of ``trees``, the probabilities (n, L) its first trees give every array of
    ``evaluate``."""
    import lightgbm

    config = {"objective": "binary", "learning_rate": lr, "seed": seed, "num_threads": threads, "verbose": -1,
              **TREE_DEFAULTS, **(params or {})}
    out = {t: {name: np.zeros((len(a), y.shape[1])) for name, a in evaluate.items()} for t in trees}
    for label in range(y.shape[1]):
        data = lightgbm.Dataset(x, label=y[:, label], params={"verbose": -1})
        booster = lightgbm.train(config, data, num_boost_round=max(trees))
        for t in trees:
            for name, a in evaluate.items():
                out[t][name][:, label] = booster.predict(a, num_iteration=t)
    return out


def choose(grids: Iterable[Mapping[str, float]], names: Sequence[str]) -> tuple[str, dict[str, float]]:
    """The grid point with the highest mean validation AP over the selection runs (each a {point: AP}
    mapping), ties to the earlier point, and every point's mean."""
    runs = list(grids)
    if not runs:
        raise ValueError("no selection runs to choose from")
    missing = [n for n in names if any(n not in g for g in runs)]
    if missing:
        raise ValueError(f"grid points {missing} miss a selection run's score")
    means = {n: statistics.fmean(g[n] for g in runs) for n in names}
    return max(names, key=lambda n: (means[n], -names.index(n))), means


@functools.cache
def _table() -> tuple[list[str], np.ndarray]:
    return read_smiles()


@functools.cache
def _bits(radius: int, bits: int) -> np.ndarray:
    return morgan(_table()[0], radius, bits)


def run(candidate: Mapping[str, Any], seed: int, train: Sequence[int], evaluate: Mapping[str, Sequence[int]],
        point: str | None = None, threads: int = 1) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """Train on the peptides ``train`` (indices of the CSV) and score the AP of each set of ``evaluate``: every
    grid point of ``candidate`` (a selection run; the scores are the best point's, the detail holds every
    point's), or only ``point`` (a test run of the chosen point)."""
    labels = _table()[1]
    points = grid(candidate["grid"])
    if point is not None:
        points = {point: points[point]}
    scores: dict[str, dict[str, float]] = {}
    groups: dict[tuple[int, int, float], list[int]] = {}
    for p in points.values():
        groups.setdefault((p["radius"], p["bits"], p["lr"]), []).append(p["trees"])
    started = time.perf_counter()
    for (radius, bits, lr), trees in groups.items():
        x = _bits(radius, bits)
        probs = fit_predict(x[list(train)], labels[list(train)], {n: x[list(i)] for n, i in evaluate.items()}, lr,
                            trees, seed, candidate.get("params"), threads)
        for t in trees:
            name = f"r{radius}_b{bits}_lr{lr:g}_t{t}"
            scores[name] = {n: average_precision(probs[t][n], labels[list(i)]) for n, i in evaluate.items()}
    wall = round(time.perf_counter() - started, 1)
    best = max(points, key=lambda n: (statistics.fmean(scores[n].values()), -list(points).index(n)))
    detail = {"point": best, "points": scores, "wall_s": wall}
    return {n: {"ap": scores[best][n]} for n in evaluate}, detail
