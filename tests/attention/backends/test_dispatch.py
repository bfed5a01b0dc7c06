"""attend() picks the cheapest backend that declares support for the problem; backend= overrides it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _compare import randn
from _oracle import planned

from attnmm import attend
from attnmm.attention.backends import Backend, Supports, _calibration, get_backend, list_backends
from attnmm.attention.forms import Forms
from attnmm.attention.planner import TIE, candidates, choose_backend
from attnmm.attention.problem import Inputs, Problem
from attnmm.masks import Causal, Chunk, Full, Graph, Grid, Mask, Padding, SameGraph, Window


def problem(mask: Mask | None, L: int = 16, B: int = 2, **kwargs: object) -> tuple[Problem, Forms]:
    q = torch.zeros(B, 2, L, 4)
    options = dict(scale=0.5, dropout_p=0.0, score="softmax", bias=None, return_weights=False, packed=False)
    options.update(kwargs)
    return planned(q, q, q, mask, **options)


@pytest.fixture
def uncalibrated(monkeypatch: pytest.MonkeyPatch) -> None:
    """No calibrated costs: dispatch falls back to the declared preference and the density rule."""
    monkeypatch.setattr(_calibration, "COSTS", {})


@pytest.mark.parametrize(
    "mask, expected",
    [
        (None, "sdpa"),
        (Full(), "sdpa"),
        (Causal(), "sdpa"),
        (Window(3, 3), "band"),
        (Window(4, 0) & Causal(), "band"),
        (Chunk(4, 1) & Padding([16, 5]), "band"),
        (Causal() & Padding([16, 9]), "sdpa_mask"),  # interval, dense
        (Grid(4, 4, 5), "sdpa_mask"),  # density 0.56
        (Grid(8, 8, 3, dilation=2) & Padding([64, 30]), "sparse"),  # density ~0.1
        (Window(1, 1) | Window(5, 5), "sdpa_mask"),  # a union is sparse, but dense here
        (~Window(1, 1), "sdpa_mask"),
    ],
    ids=repr,
)
def test_uncalibrated_devices_go_by_preference(uncalibrated: None, mask: Mask | None, expected: str) -> None:
    L = 64 if isinstance(mask, Mask) and "dilation" in repr(mask) else 16
    assert choose_backend(*problem(mask, L=L)).name == expected


def test_uncalibrated_fallbacks(uncalibrated: None) -> None:
    path = Graph(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]), 5)
    assert choose_backend(*problem(path, L=5, B=1, packed=True)).name == "sparse"
    assert choose_backend(*problem(None, score="relu")).name == "reference"
    assert choose_backend(*problem(Grid(4, 4, 5), return_weights=True)).name == "reference"
    assert choose_backend(*problem(Window(2, 2), return_weights=True, score="relu")).name == "band"
    sparse = Grid(8, 8, 3, dilation=2) & Padding([64, 30])
    assert choose_backend(*problem(sparse, L=64, return_weights=True)).name == "sparse"


def _grad_problem(
    mask: Mask | None, B: int, L: int, H: int = 4, E: int = 32, **kwargs: object
) -> tuple[Problem, Forms]:
    q = torch.zeros(B, H, L, E, requires_grad=True)
    options = dict(scale=0.5, dropout_p=0.0, score="softmax", bias=None, return_weights=False, packed=False)
    options.update(kwargs)
    return planned(q, q, q, mask, **options)


@pytest.mark.parametrize(
    "make, B, L, expected",
    [
        (lambda L: None, 4, 256, "sdpa"),  # the fused kernel: no mask to build, no pairs
        (lambda L: Window(8, 8), 1, 8192, "band"),  # 17 keys of 8192: the band kernel
        (lambda L: Window(8, 8) & Padding([L]), 1, 8192, "band"),
        (lambda L: Grid(64, 64, 3), 1, 4096, "sparse"),  # 9 keys of 4096, no band
    ],
    ids=["full", "window", "window-padding", "grid"],
)
def test_calibrated_costs_follow_orders_of_magnitude(make, B: int, L: int, expected: str) -> None:
    # choices that any sane calibration makes: orders of magnitude apart in work, not near a crossover
    assert choose_backend(*_grad_problem(make(L), B, L)).name == expected


def test_dense_packed_graphs_go_to_a_dense_kernel() -> None:
    # attention within each graph of a packed batch: dense for one big graph, sparse for many small ones
    for sizes, dense in (([400], True), ([25] * 32, False)):
        batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        N = len(batch)
        q = torch.zeros(1, 4, N, 16, requires_grad=True)
        p = planned(q, q, q, SameGraph(batch), scale=0.25, dropout_p=0.0, score="softmax", bias=None,
                    return_weights=False, packed=True)
        assert (choose_backend(*p).name != "sparse") == dense, sizes


def test_the_choice_is_the_cheapest_supported_estimate() -> None:
    for mask in (None, Window(2, 2), Window(16, 4) & Padding([20, 7]), Grid(4, 4, 3), Causal() & Padding([3, 16])):
        for options in ({}, {"score": "relu"}, {"return_weights": True}, {"dropout_p": 0.1}):
            p = _grad_problem(mask, 2, 16, **options)
            found = candidates(*p)
            costs = [b.cost(*p) for b in found]
            assert all(c is not None for c in costs), [b.name for b in found]
            assert choose_backend(*p) is found[0] and costs[0] <= min(costs) * (1 + TIE)
            tied = [b for b, c in zip(found, costs) if c <= min(costs) * (1 + TIE)]
            assert found[0].preference == min(b.preference for b in tied)


def test_dispatch_reads_the_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _grad_problem(Window(16, 4) & Padding([20, 7]), 2, 20)
    costs = {name: dict(modes) for name, modes in _calibration.COSTS["cpu"].items()}
    slow = tuple(1.0 for _ in costs["band"]["train"])
    for winner in ("band", "sdpa_mask", "sparse"):
        table = {name: {**modes, "train": slow if name != winner else modes["train"]} for name, modes in costs.items()}
        monkeypatch.setattr(_calibration, "COSTS", {"cpu": table})
        assert choose_backend(*p).name == winner


def test_training_and_dropout_select_the_mode() -> None:
    from attnmm.attention.backends._cost import mode

    assert mode(_grad_problem(None, 1, 4)[0]) == "train"
    assert mode(_grad_problem(None, 1, 4, dropout_p=0.1)[0]) == "train+dropout"
    assert mode(problem(None)[0]) == "infer"
    with torch.no_grad():
        assert mode(_grad_problem(None, 1, 4)[0]) == "infer"


def test_every_supporting_backend_is_a_candidate() -> None:
    for mask in (None, Window(2, 2), Grid(4, 4, 3), Causal() & Padding([3, 16]), Full() & Padding([16, 0])):
        for options in ({}, {"score": "relu"}, {"return_weights": True}):
            p = problem(mask, **options)
            found = candidates(*p)
            assert found and all(b.unsupported(*p) is None for b in found)
            assert choose_backend(*p) is found[0]
            refused = [get_backend(n) for n in list_backends() if get_backend(n) not in found]
            assert all(b.unsupported(*p) is not None for b in refused)


class _Toy(Backend):
    """A backend declaring little, to test the reasons derived from declarations."""

    name = "toy"
    supports = Supports(
        structures=frozenset({"full"}), layouts=frozenset({"padded"}), bias=False, relu=False, weights=False,
        dropout=False, empty=False, empty_rows=False, devices=frozenset({"meta"}), dtypes=frozenset({torch.float16}),
    )

    def forward(
        self, problem: Problem, forms: Forms, inputs: Inputs
    ) -> tuple[torch.Tensor, torch.Tensor | None]:  # pragma: no cover
        raise NotImplementedError


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"mask": Window(1, 1)}, "the mask is band, not full"),
        ({"packed": True}, "the packed layout"),
        ({}, "the inputs are on cpu, not meta"),
    ],
)
def test_reasons_come_from_the_declarations(change: dict, reason: str) -> None:
    p = problem(change.pop("mask", None), **change)
    assert _Toy().unsupported(*p).startswith(reason)


@pytest.mark.parametrize(
    "field, options, reason",
    [
        ("dtypes", {}, "dtype torch.float32 (it takes float16)"),
        ("bias", {"bias": torch.zeros(1, 2)}, "a bias is given"),
        ("relu", {"score": "relu"}, "score='relu'"),
        ("weights", {"return_weights": True}, "return_weights=True"),
        ("dropout", {"dropout_p": 0.1}, "dropout_p > 0"),
    ],
)
def test_each_option_is_refused_only_where_undeclared(field: str, options: dict, reason: str) -> None:
    everything = dataclasses.replace(_Toy.supports, devices=None, dtypes=None, bias=True, relu=True, weights=True,
                                     dropout=True)
    toy = _Toy()
    toy.supports = everything
    p = problem(None, **options)
    assert toy.unsupported(*p) is None
    toy.supports = dataclasses.replace(everything, **{field: _Toy.supports.__getattribute__(field)})
    assert toy.unsupported(*p) == reason


def test_empty_sizes_and_rows() -> None:
    toy = _Toy()
    toy.supports = dataclasses.replace(_Toy.supports, devices=None, dtypes=None, structures=frozenset({"interval"}))
    assert toy.unsupported(*problem(Full() & Padding([16, 0]))) == "some query has an empty allowed set"
    assert toy.unsupported(*problem(Full() & Padding([16, 3]))) is None
    assert toy.unsupported(*problem(Full() & Padding([0, 0]), L=0)).startswith("there are no queries or keys")


def test_declarations_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown structures \\['banded'\\]"):
        Supports(structures=frozenset({"banded"}))


def test_override_and_its_errors() -> None:
    q, k, v = (randn(1, 2, 8, 4, dtype=torch.float32, seed=s) for s in range(3))
    torch.testing.assert_close(attend(q, k, v, Window(1, 1), backend="sparse"), attend(q, k, v, Window(1, 1)))
    with pytest.raises(ValueError, match="backend 'band' cannot compute this attention: the mask is sparse"):
        attend(q, k, v, Grid(2, 4, 3), backend="band")
    with pytest.raises(ValueError, match="unknown backend 'nope'; registered: 'auto', 'band'"):
        attend(q, k, v, backend="nope")


def test_flex_refuses_cpu_training_with_a_reason() -> None:
    q, k, v = (randn(1, 2, 8, 16, dtype=torch.float32, seed=s).requires_grad_(True) for s in range(3))
    with pytest.raises(ValueError, match="backend 'flex' cannot compute this attention: torch compiles no Flex"):
        attend(q, k, v, Window(1, 1), backend="flex")
