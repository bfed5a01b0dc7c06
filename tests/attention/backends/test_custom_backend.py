"""A backend defined here alone, reading only the problem (its structure, sizes and the mask's pairs), runs
every built-in mask it claims: adding a backend edits nothing in attnmm.masks."""

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
    Window,
)
from attnmm.masks._registry import MASKS


class PairLoopBackend(Backend):
    """Softmax over each query's allowed keys, from the mask's pairs, in plain tensor operations."""

    name = "test_pair_loop"
    supports = Supports(bias=False, relu=False, weights=False, dropout=False)

    def forward(self, problem: Problem, forms: Forms, inputs: Inputs) -> tuple[Tensor, Tensor | None]:
        q, k, v = inputs.q, inputs.k, inputs.v  # (B, H, L, E), (B, H, S, E), (B, H, S, Ev)
        B, H, L = problem.B, problem.H, problem.L
        pairs = forms.pairs()  # sorted by query, (batch item only for a batched mask)
        b = pairs.batch if pairs.batch is not None else None
        out = []
        for item in range(B):
            keep = slice(None) if b is None else b == item
            row, col = pairs.row[keep], pairs.col[keep]
            s = (q[item][:, row] * k[item][:, col]).sum(-1) * problem.scale  # (H, P)
            top = torch.full((H, L), -torch.inf, dtype=s.dtype).scatter_reduce(1, row.expand(H, -1), s, "amax")
            e = (s - top[:, row]).exp()
            total = torch.zeros(H, L, dtype=s.dtype).index_add(1, row, e)
            w = e / total[:, row]
            o = torch.zeros(H, L, v.size(-1), dtype=v.dtype).index_add(1, row, w.unsqueeze(-1) * v[item][:, col])
            out.append(o)
        return torch.stack(out), None


@pytest.fixture
def loop() -> Iterator[str]:
    backend = PairLoopBackend()
    register_backend(backend)
    yield backend.name
    unregister_backend(backend.name)


def _built_in(L: int) -> list[Mask]:
    """One mask of every registered built-in kind over L = 12 positions, and compositions of them."""
    edges = torch.tensor([[0, 1, 2, 3, 5, 7, 11], [1, 2, 0, 4, 5, 11, 3]])
    masks: dict[str, Mask] = {
        "Full": Full(), "Causal": Causal(), "Window": Window(2, 1), "Chunk": Chunk(4, 1),
        "Padding": Padding([12, 7]), "Grid": Grid(3, 4, kernel=3), "Documents": Documents([5, 4, 3]),
        "Segments": Segments([4, 8], within=[Window(1, 1), Grid(2, 4, kernel=3)], links=[[True, False], [True, True]]),
        "Graph": Graph(edges, L), "SameGraph": SameGraph(torch.tensor([0] * 5 + [1] * 7)),
    }
    assert set(masks) == set(MASKS.names()), "a new built-in mask: add it here"
    return [*masks.values(), Window(3, 0) & Padding([12, 9]), Documents([6, 6]) & Causal(), Grid(3, 4, 3) | Causal(),
            ~Causal()]


@pytest.mark.parametrize("index", range(14))
def test_a_backend_of_this_file_runs_every_built_in_mask(loop: str, index: int) -> None:
    L = 12
    mask = _built_in(L)[index]
    packed = mask.layout == "packed"
    shape = (L, 2, 4) if packed else (2, 2, L, 4)
    q, k, v = (torch.randn(*shape, dtype=torch.float64, requires_grad=True) for _ in range(3))
    ours = attend(q, k, v, mask, backend=loop)
    ref = attend(q, k, v, mask, backend="reference")
    torch.testing.assert_close(ours, ref)
    for a, b in zip(torch.autograd.grad(ours.sum(), (q, k, v)), torch.autograd.grad(ref.sum(), (q, k, v))):
        torch.testing.assert_close(a, b)
