"""The short-range peer: Morgan (ECFP) fingerprints of each peptide's SMILES into gradient-boosted trees.

A peptide is the bit vector of its Morgan fingerprint (RDKit; every atom's circular neighbourhood up to
``radius`` bonds, hashed and folded to ``bits`` bits), and each of the 10 function labels gets its own
LightGBM binary classifier on those bits. The features see nothing beyond ``radius`` bonds of any atom,
so the peer says what short-range chemistry alone scores. Its hyperparameters (radius, bits, trees and
learning rate) are a small grid: each selection run scores the whole grid on validation; the test runs
train only the point with the highest mean validation AP over the selection runs (the store's, which the
runner passes) and score the test set.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from studies._runner.protocol import ProtocolError
from studies._runner.stats import average_precision


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
    return {f"r{radius}_b{bits}_lr{lr:g}_t{trees}": {"radius": radius, "bits": bits, "lr": lr, "trees": trees}
            for radius, bits, lr, trees in itertools.product(spec["radius"], spec["bits"], spec["lr"], spec["trees"])}


def fit_predict(x: np.ndarray, y: np.ndarray, evaluate: Mapping[str, np.ndarray], lr: float, trees: Sequence[int],
                seed: int, params: Mapping[str, Any] | None = None) -> dict[int, dict[str, np.ndarray]]:
    """One LightGBM ensemble per label, ``max(trees)`` trees at learning rate ``lr``, trained on ``x`` (G, F) and
    ``y`` (G, L) on one thread (the same trees anywhere), with the candidate's ``params`` (LightGBM's names); per
    tree count of ``trees``, the probabilities (n, L) its first trees give every array of ``evaluate``."""
    import lightgbm

    config = {"objective": "binary", "learning_rate": lr, "seed": seed, "num_threads": 1, "verbose": -1,
              **(params or {})}
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
    """The SMILES and the 10 labels (G, 10) of every peptide of LRGB's raw CSV, in the file's order (the
    order of the graphs and of the official split's indices)."""
    from attnmm.data.peptides import PEPTIDES_CSV, _folder, _read_rows

    path = _folder(None, download=False) / "raw" / PEPTIDES_CSV
    rows = _read_rows(path.read_bytes(), path)
    return [s for s, _ in rows], np.array([y for _, y in rows], dtype=np.float32)


@functools.cache
def _bits(radius: int, bits: int) -> np.ndarray:
    return morgan(_table()[0], radius, bits)


def chosen_point(candidate: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, float]]:
    """The grid point of highest mean validation AP over the selection ``records`` of ``candidate``, and every
    point's mean (:func:`choose`)."""
    runs = [{n: statistics.fmean(s.values()) for n, s in r["detail"]["points"].items()} for r in records
            if r["candidate"] == candidate["name"]]
    return choose(runs, list(grid(candidate["grid"])))


def run(candidate: Mapping[str, Any], seed: int, train: Any, evaluate: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train on the peptides ``train`` (Items of indices of the CSV) and score the AP of each set of ``evaluate``
    (the runner's sets): a selection run scores every grid point (the scores are the best point's, the detail
    holds every point's); a test run only the chosen point (:func:`chosen_point` of ``evaluate.selection``)."""
    labels, points, extra = _table()[1], grid(candidate["grid"]), {}
    if evaluate.kind == "test":
        seeds = evaluate.protocol.seeds("select")
        if len([r for r in evaluate.selection if r["candidate"] == candidate["name"]]) < len(seeds):
            raise ProtocolError(f"the fingerprint peer's test needs its {len(seeds)} selection runs in the store: run "
                                "its selection first (python -m studies peptides_field select --candidate "
                                "fingerprint), merging any parts")
        point, means = chosen_point(candidate, evaluate.selection)
        points, extra = {point: points[point]}, {"mean_val_ap": means[point]}
    train_ids, sets = list(train.payload), {n: list(evaluate[n].payload) for n in evaluate}
    scores: dict[str, dict[str, float]] = {}
    groups: dict[tuple[int, int, float], list[int]] = {}
    for p in points.values():
        groups.setdefault((p["radius"], p["bits"], p["lr"]), []).append(p["trees"])
    started = time.perf_counter()
    for (radius, bits, lr), trees in groups.items():
        x = _bits(radius, bits)
        probs = fit_predict(x[train_ids], labels[train_ids], {n: x[i] for n, i in sets.items()}, lr, trees, seed,
                            candidate.get("params"))
        for t in trees:
            scores[f"r{radius}_b{bits}_lr{lr:g}_t{t}"] = {n: average_precision(probs[t][n], labels[i])
                                                          for n, i in sets.items()}
    best = max(points, key=lambda n: (statistics.fmean(scores[n].values()), -list(points).index(n)))
    detail = {"point": best, "points": scores, "wall_s": round(time.perf_counter() - started, 1), **extra}
    return {n: {"ap": scores[best][n]} for n in sets}, detail
