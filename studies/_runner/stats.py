"""The statistics and formatting the studies share: mean ± std, paired differences and bootstrap intervals,
and the lines a page writes about a run."""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------ summaries
def mean_std(values: Sequence[float | None], scale: float = 1.0, digits: int = 1) -> str:
    """``values`` as 'mean ± std', or the one value when there is one ("—" when none)."""
    vals = [v * scale for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return "—"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.fmean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f}"


def moments(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation (0 for one value) and count."""
    xs = [float(v) for v in values]
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0, "n": len(xs)}


def spread(mean: float, std: float, n: int, fmt: str = ".2f", unit: str = "") -> str:
    """``mean ± std`` over ``n`` replicates; one replicate has no spread to show."""
    return f"{mean:{fmt}}{unit}" if n == 1 else f"{mean:{fmt}} ± {std:{fmt}}{unit}"


def paired(a: dict[Any, float], b: dict[Any, float], least: int = 1) -> dict[str, Any] | None:
    """``a`` minus ``b`` on the replicates (keys) both hold: the differences, their mean, sample std, standard
    error, and how many ``a`` wins and ties (one shared replicate: no spread, std and sem None); None when
    they share fewer than ``least`` replicates."""
    common = sorted(set(a) & set(b), key=str)
    if len(common) < max(least, 1):
        return None
    diffs = [a[c] - b[c] for c in common]
    std = statistics.stdev(diffs) if len(diffs) > 1 else None
    return {"keys": common, "diffs": diffs, "mean": statistics.fmean(diffs), "std": std,
            "sem": None if std is None else std / math.sqrt(len(diffs)), "wins": sum(d > 0 for d in diffs),
            "ties": sum(d == 0 for d in diffs), "n": len(diffs)}


def average_precision(scores: Any, labels: Any) -> float:
    """The mean over labels of each label's average precision (LRGB's AP, the graph recipe's ``val_ap``/``test_ap``)
    of ``scores`` (G, L) for ``labels`` (G, L) in {0, 1}, arrays or tensors; a NaN label (unknown) is left out."""
    import torch
    from torchmetrics.functional.classification import multilabel_average_precision

    y = torch.as_tensor(labels)
    target = torch.where(torch.isnan(y), -100, y).long()
    return float(multilabel_average_precision(torch.as_tensor(scores).float(), target, y.size(1), ignore_index=-100))


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """The Student t interval at ``level`` of the mean of ``values`` (e.g. :func:`paired`'s ``diffs``); None
    under two values."""
    if len(values) < 2:
        return None
    from scipy.stats import t

    half = float(t.ppf(0.5 + level / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return statistics.fmean(values) - half, statistics.fmean(values) + half


# ------------------------------------------------------------------------------------------ bootstraps
def bootstrap_difference(a: Sequence[Any], b: Sequence[Any], groups: Sequence[int], resamples: int = 2000,
                         seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """Paired bootstrap over test items of the difference in mean accuracy between two models.

    ``a[r]`` and ``b[r]`` are the per-item correctness (0/1) of the two models in replicate ``r`` (a
    training seed, or a fold) on the same items; the statistic is the mean over the replicates of
    ``acc(a[r]) - acc(b[r])``. Each resample draws the items with replacement, the same draw for every
    replicate of one ``groups`` value (replicates on the same items: the seeds) and an independent draw per
    group (folds on different items). Returns the difference, the interval at ``level`` (percentiles) and
    the share of resamples <= 0, in accuracy points (x 100).

    Examples:
        >>> import numpy as np
        >>> a = [np.array([1, 1, 1, 0] * 50)]; b = [np.array([1, 0, 1, 0] * 50)]
        >>> r = bootstrap_difference(a, b, [0], resamples=500)
        >>> r["diff"], r["low"] > 0
        (25.0, True)
    """
    import numpy as np

    if not (len(a) == len(b) == len(groups)) or not a:
        raise ValueError(f"need one group per replicate of both models, got {len(a)}, {len(b)}, {len(groups)}")
    rng = np.random.default_rng(seed)
    diffs = [np.asarray(x, dtype=float) - np.asarray(y, dtype=float) for x, y in zip(a, b)]
    stat = float(np.mean([d.mean() for d in diffs]))
    draws = np.zeros(resamples)
    for g in sorted(set(groups)):
        members = [d for d, gg in zip(diffs, groups) if gg == g]
        n = len(members[0])
        if any(len(d) != n for d in members):
            sizes = [len(d) for d in members]
            raise ValueError(f"the replicates of group {g} classify the same items, so one size each; got {sizes}")
        idx = rng.integers(0, n, size=(resamples, n))
        for d in members:
            draws += d[idx].mean(1)
    draws /= len(diffs)
    tail = (1 - level) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return {"diff": round(100 * stat, 2), "low": round(100 * float(low), 2), "high": round(100 * float(high), 2),
            "p_le_0": round(float((draws <= 0).mean()), 4)}


def ratio_bootstrap(a_runs: list[dict[str, Any]], b_runs: list[dict[str, Any]], resamples: int = 2000,
                    seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """The difference of an error rate (errors over a total) between two models, ``a`` minus ``b``, and its
    ``level`` interval from resampling the units (ids) both were scored on. Each run is ``{"ids": [...],
    "errors": [...], "digits": [...]}`` (errors charged to each unit and its total), one per training seed,
    all on the same units; each unit's errors are averaged over the seeds.

    Examples:
        >>> a = [{"ids": [0, 1, 2, 3], "errors": [2, 0, 1, 1], "digits": [10, 10, 10, 10]}]
        >>> b = [{"ids": [0, 1, 2, 3], "errors": [4, 2, 3, 5], "digits": [10, 10, 10, 10]}]
        >>> diff, lo, hi = ratio_bootstrap(a, b)
        >>> round(diff, 3), lo < diff < hi < 0
        (-0.25, True)
    """
    import torch

    ids = sorted(set.intersection(*(set(r["ids"]) for r in [*a_runs, *b_runs])))

    def mean_errors(runs: list[dict[str, Any]]) -> tuple[Any, Any]:
        per = [dict(zip(r["ids"], zip(r["errors"], r["digits"], strict=True), strict=True)) for r in runs]
        errors = torch.tensor([[p[i][0] for i in ids] for p in per], dtype=torch.float64).mean(0)
        return errors, torch.tensor([per[0][i][1] for i in ids], dtype=torch.float64)

    (ea, totals), (eb, _) = mean_errors(a_runs), mean_errors(b_runs)
    g = torch.Generator().manual_seed(seed)
    draws = torch.randint(len(ids), (resamples, len(ids)), generator=g)
    ones = torch.ones_like(draws, dtype=torch.float64)
    counts = torch.zeros(resamples, len(ids), dtype=torch.float64).scatter_add_(1, draws, ones)  # of each unit
    diffs = (counts @ ea - counts @ eb) / (counts @ totals)
    tail = (1 - level) / 2
    lo, hi = torch.quantile(diffs, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    return float((ea.sum() - eb.sum()) / totals.sum()), lo, hi


# ------------------------------------------------------------------------------------------ run lines
def seconds(t: float) -> str:
    return f"{1e3 * t:.0f} ms" if t < 10 else f"{t:.1f} s"


def nbytes(n: float) -> str:
    return f"{n / 2**20:.2f} MB" if n >= 2**20 else f"{n / 2**10:.1f} KB"


def run_line(run: dict[str, Any]) -> str:
    """How a measurement was made: its command, machine and minutes."""
    return f"`{run['command']}` ({run['machine']}, {run['minutes']} min)"


def machine() -> str:
    """The machine and the time, for a measurement's record."""
    import torch

    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    gpu = f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    return f"{platform.machine()}, {os.cpu_count()} cores{gpu}, torch {torch.__version__}, {stamp}"


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip()
