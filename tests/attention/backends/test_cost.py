"""The cost model: the backends' terms on given shapes, old calibrations, and the choices on packed
documents of different lengths (estimates only, no timing)."""

from __future__ import annotations

import pytest
import torch
from _oracle import planned

from attnmm import attend
from attnmm.attention import planner as _dispatch
from attnmm.attention.backends import _calibration, _cost, get_backend
from attnmm.attention.forms import Forms
from attnmm.attention.planner import candidates, choose_backend
from attnmm.attention.problem import Problem
from attnmm.masks import Causal, Documents, Grid, Mask, Segments, Window


def _problem(
    mask: Mask, L: int, H: int = 2, E: int = 64, Ev: int | None = None, training: bool = True
) -> tuple[Problem, Forms]:
    q, k = (torch.zeros(1, H, L, E, requires_grad=training) for _ in range(2))
    v = torch.zeros(1, H, L, E if Ev is None else Ev, requires_grad=training)
    return planned(q, k, v, mask, scale=E**-0.5)  # (split as the planner does before asking the backends)


def _documents(count: int, n: int) -> tuple[Problem, Forms]:
    return _problem(Documents([n] * count) & Causal(), count * n)


def test_sparse_terms_grow_with_keys_per_query() -> None:
    # two causal documents of 4: 2 * (1 + 2 + 3 + 4) = 20 pairs per head, 16 query rows over H = 2
    problem = _problem(Documents([4, 4]) & Causal(), 8, H=2, E=3, Ev=5)
    pairs, rows = 20 * 2, 8 * 2
    assert get_backend("sparse").cost_terms(*problem) == (pairs * (3 + 5), pairs, rows, pairs * pairs / rows)
    # the same pairs in longer rows cost more per pair
    short, long = (get_backend("sparse").cost_terms(*_documents(c, n)) for c, n in ((64, 128), (16, 512)))
    assert short[3] / short[1] == pytest.approx(64.5) and long[3] / long[1] == pytest.approx(256.5)


def test_constants_without_the_last_terms_still_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = _documents(4, 64)
    terms = get_backend("sparse").cost_terms(*problem)
    full = (1e-4, 3e-4, 0.03, 0.02, 2e-4)
    for constants, expected in [
        (full, full[0] + sum(c * x * _cost.UNIT for c, x in zip(full[1:], terms))),
        (full[:4], full[0] + sum(c * x * _cost.UNIT for c, x in zip(full[1:4], terms))),  # before the 4th term
        ((*full, 1.0), None),  # more constants than terms: not this backend's model
    ]:
        monkeypatch.setattr(_calibration, "COSTS", {"cpu": {"sparse": {"train": constants}}})
        estimate = get_backend("sparse").cost(*problem)
        assert estimate == (None if expected is None else pytest.approx(expected))


def test_the_stored_calibration_has_the_row_length_term() -> None:
    assert len(_calibration.COSTS["cpu"]["sparse"]["train"]) == 5


def test_long_packed_documents_go_to_segments() -> None:
    # causal documents, one fused SDPA call each, forward + backward (1 thread, H = 2, E = 64, a loaded
    # machine): 64 x 512 segments 0.49 s, band 0.66 s, sparse 1.79 s; 16 x 2048 1.05, 2.57, 10.1 s
    costs = {b.name: b.cost(*_documents(64, 512)) for b in candidates(*_documents(64, 512))}
    assert costs["segments"] < costs["band"] < costs["sparse"]
    assert choose_backend(*_documents(64, 512)).name == "segments"
    assert choose_backend(*_documents(16, 2048)).name == "segments"


def test_short_packed_documents_keep_their_order() -> None:
    # 256 x 128: segments measured 0.17 s, band 0.23 s, sparse 0.33 s, and estimated in that order
    problem = _documents(256, 128)
    costs = {b.name: b.cost(*problem) for b in candidates(*problem)}
    assert costs["segments"] < costs["band"] < costs["sparse"]
    assert choose_backend(*problem).name == "segments"


def test_the_sparse_estimate_grows_faster_than_its_pairs() -> None:
    # doubling the row length at the same L doubles the pairs and more than doubles the estimate
    sparse = get_backend("sparse")
    a, b = sparse.cost(*_documents(64, 512)), sparse.cost(*_documents(32, 1024))
    assert a is not None and b is not None and b > 2 * a


def _mixed_sequence() -> tuple[Problem, Forms]:
    # benchmarks/mixed_sequence.py: audio under Window(32, 32), a 64 x 64 patch grid, causal text and 16
    # bottleneck tokens; each modality attends itself and the bottleneck, the bottleneck everything
    sizes = [4096, 64 * 64, 512, 16]
    links = [[c in (a, 3) for c in range(4)] for a in range(3)] + [[True] * 4]
    mask = Segments(sizes, within=[Window(32, 32), Grid(64, 64, kernel=7), Causal(), None], links=links)
    return _problem(mask, sum(sizes), H=4)


def test_the_mixed_sequence_goes_to_segments() -> None:
    # measured (1 thread, forward + backward, median): segments 0.235 s, sparse 0.28 s; estimated 0.22 / 0.30
    problem = _mixed_sequence()
    costs = {b.name: b.cost(*problem) for b in candidates(*problem)}
    assert choose_backend(*problem).name == "segments"
    assert costs["segments"] < costs["sparse"]


def test_segments_choose_each_segment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    mask = Segments([16, 40, 8], within=[Grid(4, 4, kernel=3), Window(4, 0), Causal()],
                    links=[[True, False, True], [False, True, True], [True, True, True]])
    q, k, v = (torch.randn(2, 2, 64, 8, requires_grad=True) for _ in range(3))
    calls = []
    real = _dispatch._candidates

    def counted(problem: Problem, forms: Forms, reader: object = None) -> tuple:
        if not isinstance(problem.effective_mask, Segments):
            calls.append(problem.L)
        return real(problem, forms, reader)  # type: ignore[arg-type]

    monkeypatch.setattr(_dispatch, "_candidates", counted)
    out = attend(q, k, v, mask)
    # cost, memory and forward share one choice per query segment; the two linked to several apart
    # choose for each of their two forms (keys laid together, keys in place)
    assert sorted(calls) == [8, 16, 16, 40, 40]
    out.sum().backward()
    reference = attend(q, k, v, mask, backend="reference")
    assert torch.allclose(out, reference, atol=1e-5)


def test_half_precision_problems_read_the_half_constants_where_there_are_some(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    q, k, v = (torch.zeros(1, 2, 64, 16, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    half = planned(q, k, v, Window(4, 4), scale=0.25)
    single = planned(*(t.float() for t in (q, k, v)), Window(4, 4), scale=0.25)
    sparse = get_backend("sparse")
    costs = {"cpu": {"sparse": {"train": (1.0,), "train+half": (2.0,)}}}
    monkeypatch.setattr(_calibration, "COSTS", costs)
    assert (sparse.cost(*half), sparse.cost(*single)) == (2.0, 1.0)
    del costs["cpu"]["sparse"]["train+half"]  # none calibrated in half precision: the float32 constants
    assert sparse.cost(*half) == 1.0
    assert _cost.constants("sparse", "cpu", "train", half=True) == (1.0,)


def test_the_docs_say_which_devices_are_calibrated() -> None:
    """docs/attention.md and docs/robustness.md say the GPU's constants are not calibrated yet: true
    while the stored constants have no CUDA entry (whoever commits them updates both pages)."""
    from pathlib import Path

    docs = Path(__file__).resolve().parents[3] / "docs"
    said = ["the GPU's are not calibrated yet" in " ".join((docs / "attention.md").read_text().split()),
            "It has not run on a GPU yet." in " ".join((docs / "robustness.md").read_text().split())]
    assert said == ["cuda" not in _calibration.COSTS] * 2
