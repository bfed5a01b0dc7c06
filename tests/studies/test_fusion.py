"""The fusion study: the paired bootstrap on toy tables, and the conditions section and figure rendered from
the last draw's store (the study runs nothing more: every FSDD test recording is scored)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import studies.fusion as fusion
from studies._runner import ProtocolError, Study, View
from studies._runner.stats import bootstrap_difference


def test_bootstrap_of_a_known_difference() -> None:
    rng = np.random.default_rng(0)
    a = rng.random(1000) < 0.9
    b = a.copy()
    b[:100] = ~b[:100]  # the second model differs on 100 pairs
    r = bootstrap_difference([a], [b], [0], resamples=1000)
    assert r["diff"] == pytest.approx(100 * (a.mean() - b.mean()))
    assert r["low"] < r["diff"] < r["high"]
    same = bootstrap_difference([a], [a], [0], resamples=200)
    assert same == {"diff": 0.0, "low": 0.0, "high": 0.0, "p_le_0": 1.0}
    # a clear gain: the interval excludes 0
    worse = a & (rng.random(1000) < 0.8)
    assert bootstrap_difference([a], [worse], [0], resamples=500)["low"] > 0


def test_bootstrap_pairs_the_seeds_and_resamples_folds_apart() -> None:
    rng = np.random.default_rng(1)
    seeds_a = [rng.random(400) < 0.8 for _ in range(3)]
    seeds_b = [x.copy() for x in seeds_a]
    # a mean over replicates: each replicate's difference counts once
    seeds_b[0][:40] = False
    r = bootstrap_difference(seeds_a, seeds_b, [0, 0, 0], resamples=500)
    expected = np.mean([100 * (x.mean() - y.mean()) for x, y in zip(seeds_a, seeds_b)])
    assert r["diff"] == pytest.approx(expected, abs=0.01)
    folds = bootstrap_difference([seeds_a[0], seeds_a[1][:300]], [seeds_b[0], seeds_b[1][:300]], [0, 1],
                                    resamples=300)
    assert folds["low"] <= folds["diff"] <= folds["high"]
    with pytest.raises(ValueError, match="same items"):
        bootstrap_difference([seeds_a[0], seeds_a[1][:300]], [seeds_b[0], seeds_b[1][:300]], [0, 0])
    with pytest.raises(ValueError, match="one group per replicate"):
        bootstrap_difference(seeds_a, seeds_b, [0])
    again = bootstrap_difference(seeds_a, seeds_b, [0, 0, 0], resamples=500)
    assert again == r  # a fixed generator: the same interval every time


def test_the_conditions_section_and_figure_from_the_store() -> None:
    store = json.loads(fusion.STORE.read_text())
    pages = View.load("fusion").pages  # page.md with the study's context, from the last draw's store
    lines = pages["docs/recipes/multimodal.md#conditions"]
    rows = [line for line in lines if line.startswith("| ")]
    assert len(rows) == 1 + len(store["conditions"]) + 1  # the header and one row per condition
    assert rows[-2].startswith("| image missing |") and "| — |" in rows[-2]  # image only has no prediction
    assert rows[-1].startswith("| held-out speaker (exploratory) | **")
    text = "\n".join(lines)
    assert "fusion_conditions.png" in text and "never worse" in text and "`robust_conflict`" in text
    assert list(pages) == ["docs/recipes/multimodal.md#conditions"]
    fig = fusion.figure(store)
    assert len(fig.axes[0].lines) == len(fusion.MODELS)


def test_the_study_runs_nothing_more() -> None:
    study = Study.load("fusion")
    assert sorted(study.resolve("val_jackson").ids["speaker"]) == ["jackson"]
    assert len(study.resolve("test_own").ids["recording"]) == 5 * 10 * 5  # speakers x digits x takes 0-4
    with pytest.raises(ProtocolError, match="FSDD test recording"):
        fusion.run({}, 0, None, {}, {})
