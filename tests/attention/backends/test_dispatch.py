"""attend() picks its backend from the mask's structure; backend= overrides it."""

from __future__ import annotations

import pytest
import torch
from _compare import randn

from attnmm import attend
from attnmm.attention._dispatch import AUTO_ORDER, DENSE_THRESHOLD, candidates, choose_backend
from attnmm.attention._problem import Problem
from attnmm.attention.backends import list_backends
from attnmm.masks import Causal, Chunk, Full, Graph, Grid, Mask, Padding, Window


def problem(mask: Mask | None, L: int = 16, B: int = 2, **kwargs: object) -> Problem:
    q = torch.zeros(B, 2, L, 4)
    options = dict(scale=0.5, dropout_p=0.0, score="softmax", bias=None, return_weights=False, packed=False)
    options.update(kwargs)
    return Problem(q, q, q, mask, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "mask, expected",
    [
        (None, "sdpa"),
        (Full(), "sdpa"),
        (Causal(), "sdpa"),
        (Window(3, 3), "band"),
        (Window(4, 0) & Causal(), "band"),
        (Chunk(4, 1) & Padding([16, 5]), "band"),
        (Causal() & Padding([16, 9]), "sdpa_mask"),  # interval, dense, no empty row
        (Full() & Padding([16, 0]), "sparse"),  # an empty row: not the fused kernel
        (Grid(4, 4, 5), "sdpa_mask"),  # density 0.56
        (Grid(8, 8, 3, dilation=2) & Padding([64, 30]), "sparse"),  # density ~0.1
        (Window(1, 1) | Window(5, 5), "sdpa_mask"),  # a union is sparse, but dense here
        (~Window(1, 1), "sdpa_mask"),
    ],
    ids=repr,
)
def test_padded_masks(mask: Mask | None, expected: str) -> None:
    L = 64 if isinstance(mask, Mask) and "dilation" in repr(mask) else 16
    assert choose_backend(problem(mask, L=L)).name == expected


def test_graph_masks_always_go_sparse() -> None:
    dense_graph = Graph(torch.cartesian_prod(torch.arange(5), torch.arange(5)).T, 5)
    assert choose_backend(problem(dense_graph, L=5, B=1, packed=True)).name == "sparse"


def test_features_the_fused_kernels_lack_fall_back() -> None:
    assert choose_backend(problem(None, score="relu")).name == "reference"
    assert choose_backend(problem(Causal() & Padding([16, 9]), return_weights=True)).name == "sparse"
    assert choose_backend(problem(Grid(4, 4, 5), return_weights=True)).name == "reference"
    assert choose_backend(problem(Window(2, 2), return_weights=True, score="relu")).name == "band"


def test_density_threshold_is_a_fraction() -> None:
    assert 0.0 < DENSE_THRESHOLD < 1.0


def test_auto_order_names_registered_backends() -> None:
    assert set(AUTO_ORDER) <= set(list_backends())
    for mask in (None, Window(2, 2), Grid(4, 4, 3), Causal() & Padding([3, 16])):
        assert set(candidates(problem(mask))) <= set(AUTO_ORDER)


def test_override_and_its_errors() -> None:
    q, k, v = (randn(1, 2, 8, 4, dtype=torch.float32, seed=s) for s in range(3))
    torch.testing.assert_close(attend(q, k, v, Window(1, 1), backend="sparse"), attend(q, k, v, Window(1, 1)))
    with pytest.raises(ValueError, match="backend 'band' cannot compute this attention: the mask is sparse"):
        attend(q, k, v, Grid(2, 4, 3), backend="band")
    with pytest.raises(ValueError, match="unknown backend 'nope'; valid names: 'auto', 'reference'"):
        attend(q, k, v, backend="nope")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_flex_refuses_cpu_with_a_reason() -> None:
    q, k, v = (randn(1, 2, 8, 16, dtype=torch.float32, seed=s) for s in range(3))
    with pytest.raises(ValueError, match="backend 'flex' cannot compute this attention: CUDA is not available"):
        attend(q, k, v, Window(1, 1), backend="flex")
