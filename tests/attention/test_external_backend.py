"""A backend defined in this file alone, reading nothing of a mask but its structural description
(:class:`~attnmm.masks.Structure`: the kind and the few numbers it needs), registered through the public
API: it runs every built-in mask whose description it claims, equal to the reference in values and
gradients, and refuses, with its reason, the others. Adding it edits nothing in attnmm.masks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import Tensor

from attnmm import attend
from attnmm.attention.backends import Backend, Supports, register_backend, unregister_backend
from attnmm.attention.forms import Forms
from attnmm.attention.problem import Inputs, Problem
from attnmm.masks import (
    Causal,
    Chunk,
    Documents,
    Full,
    Graph,
    Grid,
    Mask,
    Padding,
    SameGraph,
    Segments,
    Structure,
    Window,
)
from attnmm.masks._registry import MASKS


def _allowed(s: Structure, B: int, L: int, S: int) -> Tensor:
    """The allowed set (B or 1, L, S) from the description alone."""
    i, j = torch.arange(L).view(-1, 1), torch.arange(S).view(1, -1)
    if s.kind == "full":
        return torch.ones(1, L, S, dtype=torch.bool)
    if s.kind == "causal":
        return (j <= i).unsqueeze(0)
    if s.interval is not None:  # band, interval: one key range per query
        b = torch.arange(B).view(-1, 1) if s.batched else torch.zeros(1, 1, dtype=torch.long)
        start, end = s.interval(b, i.view(1, -1))  # (B or 1, L)
        return (j.unsqueeze(0) >= start.unsqueeze(-1)) & (j.unsqueeze(0) < end.unsqueeze(-1))
    assert s.grid is not None and s.window is not None  # a convolution's receptive field on the patch grid
    (_, width), (kernel, dilation) = s.grid, s.window
    dr, dc = i // width - j // width, i % width - j % width
    reach = kernel // 2 * dilation
    near = (dr.abs() <= reach) & (dc.abs() <= reach) & (dr % dilation == 0) & (dc % dilation == 0)
    return near.unsqueeze(0)


class DescribedBackend(Backend):
    """Masked softmax over the allowed set read from the mask's description: the full and causal kinds,
    a key range per query (band, interval) and a convolution's window on a patch grid."""

    name = "test_described"
    supports = Supports(
        structures=frozenset({"full", "causal", "band", "interval", "sparse"}), layouts=frozenset({"padded"}),
        bias=False, relu=False, weights=False, dropout=False,
    )

    def check(self, problem: Problem, forms: Forms) -> str | None:
        s = problem.structure
        if s.kind == "sparse" and (s.grid is None or s.window is None):
            return "a sparse mask that is not a convolution's window on a grid"
        return None

    def __init__(self) -> None:
        self.calls = 0

    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        self.calls += 1
        allowed = _allowed(problem.structure, problem.B, problem.L, problem.S).unsqueeze(1)  # (B or 1, 1, L, S)
        scores = inputs.q @ inputs.k.transpose(-1, -2) * problem.scale
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        weights = scores.softmax(-1) * allowed.any(-1, keepdim=True)  # an empty row: output 0
        return weights @ inputs.v, None


@pytest.fixture
def described() -> Iterator[DescribedBackend]:
    backend = DescribedBackend()
    register_backend(backend)
    yield backend
    unregister_backend(backend.name)


L = 12
EDGES = torch.tensor([[0, 1, 2, 3, 5, 7, 11], [1, 2, 0, 4, 5, 11, 3]])
#: Every built-in mask and compositions of them, with whether the description claims it.
CASES: dict[str, tuple[Mask, bool]] = {
    "Full": (Full(), True),
    "Causal": (Causal(), True),
    "Window": (Window(2, 1), True),
    "Chunk": (Chunk(4, 1), True),
    "Padding": (Padding([12, 7]), True),
    "Documents": (Documents([5, 0, 4]), True),
    "Grid": (Grid(3, 4, kernel=3), True),
    "SameGraph": (SameGraph(torch.tensor([0] * 5 + [1] * 7)), True),  # attend reads it as packed documents
    "Graph": (Graph(EDGES, L), False),
    "Segments": (Segments([4, 8], within=[Window(1, 1), None], links=[[True, False], [True, True]]), False),
    "Window & Padding": (Window(3, 0) & Padding([12, 9]), True),
    "Documents & Causal": (Documents([[6, 6], [3, 9]]) & Causal(), True),
    "Chunk.shifted": (Chunk(4, 0).shifted(2, 1), True),
    "Grid dilated": (Grid(4, 3, kernel=3, dilation=2), True),
    "Grid shifted border": (Grid(3, 4, kernel=3, border="shift"), False),
    "Grid | Causal": (Grid(3, 4, kernel=3) | Causal(), False),
    "~Causal": (~Causal(), False),
}


def test_the_cases_cover_every_built_in_mask() -> None:
    names = {type(m).__name__ for m, _ in CASES.values()}
    assert set(MASKS.names()) <= names, "a new built-in mask: add it here"


@pytest.mark.parametrize("name", list(CASES))
def test_a_backend_of_this_file_runs_what_it_claims(described: DescribedBackend, name: str) -> None:
    mask, claimed = CASES[name]
    torch.manual_seed(0)
    packed = mask.layout == "packed"
    shape = (L, 2, 4) if packed else (2, 2, L, 4)
    q, k, v = (torch.randn(*shape, dtype=torch.float64, requires_grad=True) for _ in range(3))
    if not claimed:
        with pytest.raises(ValueError, match=f"backend '{described.name}' cannot compute"):
            attend(q, k, v, mask, backend=described.name)
        return
    ours = attend(q, k, v, mask, backend=described.name)
    assert described.calls > 0
    ref = attend(q, k, v, mask, backend="reference")
    torch.testing.assert_close(ours, ref)
    grad = torch.randn_like(ours)
    got = torch.autograd.grad(ours, (q, k, v), grad)
    want = torch.autograd.grad(ref, (q, k, v), grad)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
