"""The cost model: the backends' terms on given shapes, old calibrations, and the choices on packed
documents of different lengths (estimates only, no timing)."""

from __future__ import annotations

import pytest
import torch

from attnmm.attention._dispatch import candidates, choose_backend
from attnmm.attention._problem import Problem
from attnmm.attention.backends import _calibration, _cost, get_backend
from attnmm.masks import Causal, Documents, Mask


def _problem(mask: Mask, L: int, H: int = 2, E: int = 64, Ev: int | None = None, training: bool = True) -> Problem:
    q, k = (torch.zeros(1, H, L, E, requires_grad=training) for _ in range(2))
    v = torch.zeros(1, H, L, E if Ev is None else Ev, requires_grad=training)
    return Problem(q, k, v, mask, scale=E**-0.5, dropout_p=0.0, score="softmax", bias=None, return_weights=False,
                   packed=False)


def _documents(count: int, n: int) -> Problem:
    return _problem(Documents([n] * count) & Causal(), count * n)


def test_sparse_terms_grow_with_keys_per_query() -> None:
    # two causal documents of 4: 2 * (1 + 2 + 3 + 4) = 20 pairs per head, 16 query rows over H = 2
    problem = _problem(Documents([4, 4]) & Causal(), 8, H=2, E=3, Ev=5)
    pairs, rows = 20 * 2, 8 * 2
    assert get_backend("sparse").cost_terms(problem) == (pairs * (3 + 5), pairs, rows, pairs * pairs / rows)
    # the same pairs in longer rows cost more per pair
    short, long = (get_backend("sparse").cost_terms(_documents(c, n)) for c, n in ((64, 128), (16, 512)))
    assert short[3] / short[1] == pytest.approx(64.5) and long[3] / long[1] == pytest.approx(256.5)


def test_constants_without_the_last_terms_still_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _documents(4, 64)
    terms = get_backend("sparse").cost_terms(problem)
    full = (1e-4, 3e-4, 0.03, 0.02, 2e-4)
    for constants, expected in [
        (full, full[0] + sum(c * x * _cost.UNIT for c, x in zip(full[1:], terms))),
        (full[:4], full[0] + sum(c * x * _cost.UNIT for c, x in zip(full[1:4], terms))),  # before the 4th term
        ((*full, 1.0), None),  # more constants than terms: not this backend's model
    ]:
        monkeypatch.setattr(_calibration, "COSTS", {"cpu": {"sparse": {"train": constants}}})
        estimate = get_backend("sparse").cost(problem)
        assert estimate == (None if expected is None else pytest.approx(expected))


def test_the_stored_calibration_has_the_row_length_term() -> None:
    assert len(_calibration.COSTS["cpu"]["sparse"]["train"]) == 5


def test_long_packed_documents_go_to_band() -> None:
    # 64 x 512 causal documents, L = 32,768: measured band 0.94 s, sparse 3.5 s (1 thread, H = 2)
    problem = _documents(64, 512)
    assert choose_backend(problem).name == "band"
    assert choose_backend(_documents(16, 2048)).name == "band"


def test_short_packed_documents_keep_their_order() -> None:
    # 256 x 128: sparse estimated (and measured, 0.38 s) below band, as before the row-length term
    problem = _documents(256, 128)
    costs = {b.name: b.cost(problem) for b in candidates(problem)}
    assert costs["sparse"] < costs["band"]


def test_the_sparse_estimate_grows_faster_than_its_pairs() -> None:
    # doubling the row length at the same L doubles the pairs and more than doubles the estimate
    sparse = get_backend("sparse")
    a, b = sparse.cost(_documents(64, 512)), sparse.cost(_documents(32, 1024))
    assert a is not None and b is not None and b > 2 * a
