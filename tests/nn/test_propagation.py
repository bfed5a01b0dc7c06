"""PropagationEncoder: predict-then-propagate against a dense reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnmm.masks import Causal, Graph, Mask, Padding
from attnmm.masks.graph_helpers import k_hop, self_loops
from attnmm.nn import PropagationEncoder


def dense_reference(enc: PropagationEncoder, x: torch.Tensor, mask: Mask) -> torch.Tensor:
    """The same computation with a dense (N, N) score matrix and a masked softmax."""
    n = x.shape[0]
    allowed = mask.dense(n, n)
    g = F.relu(enc.lin1(x))
    h = enc.lin2(g)
    z = h
    for _ in range(enc.steps):
        if enc.att_dst is not None and enc.att_src is not None:  # GAT's additive scores, (H, N, N)
            s = F.leaky_relu((enc.att_dst @ g.T)[:, :, None] + (enc.att_src @ g.T)[:, None, :], enc.negative_slope)
        elif enc.beta is None:
            s = torch.zeros(n, n, dtype=x.dtype)
        else:
            u = F.normalize(z, dim=-1)
            s = enc.beta * u @ u.T
        w = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)  # empty rows: 0
        if w.dim() == 3:  # the heads' weights are averaged
            w = w.mean(0)
        z = (1 - enc.alpha) * w @ z + enc.alpha * h
    return z


def random_graph(n: int, m: int, generator: torch.Generator) -> Graph:
    edge_index = torch.randint(0, n, (2, m), generator=generator)  # directed, duplicates allowed
    return Graph(edge_index, n)


@pytest.mark.parametrize("scores,heads", [("uniform", 1), ("cosine", 1), ("additive", 1), ("additive", 3)])
@pytest.mark.parametrize("n,m", [(1, 0), (1, 1), (7, 0), (9, 20), (30, 90)])
def test_matches_dense_reference_values_and_grads(scores: str, heads: int, n: int, m: int) -> None:
    g = torch.Generator().manual_seed(n * 100 + m)
    mask = random_graph(n, m, g) if m else Graph(torch.zeros(2, 0, dtype=torch.long), n)
    enc = PropagationEncoder(5, 8, 3, steps=4, alpha=0.2, scores=scores, heads=heads).double().eval()  # type: ignore[arg-type]
    if enc.beta is not None:
        with torch.no_grad():
            enc.beta.fill_(1.7)
    x = torch.randn(n, 5, dtype=torch.float64, generator=g, requires_grad=True)
    out = enc(x, mask)
    ref = dense_reference(enc, x, mask)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, [x, *enc.parameters()], grad)
    want = torch.autograd.grad(ref, [x, *enc.parameters()], grad)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_rows_with_empty_allowed_sets_keep_alpha_times_prediction() -> None:
    enc = PropagationEncoder(4, 6, 2, steps=3, alpha=0.25).eval()
    x = torch.randn(3, 4)
    out = enc(x, Graph(torch.zeros(2, 0, dtype=torch.long), 3))  # nobody attends anywhere
    torch.testing.assert_close(out, 0.25 * enc.lin2(F.relu(enc.lin1(x))))


def test_zero_steps_is_the_mlp_and_composed_masks_work() -> None:
    enc = PropagationEncoder(4, 6, 2, steps=0).eval()
    x = torch.randn(5, 4)
    ring = Graph(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]]), 5)
    torch.testing.assert_close(enc(x, ring), enc.lin2(F.relu(enc.lin1(x))))
    mask = k_hop(ring.edge_index, 5, 2) | self_loops(5)
    for scores, heads in (("cosine", 1), ("additive", 1), ("additive", 4)):
        enc = PropagationEncoder(4, 6, 2, steps=2, scores=scores, heads=heads).eval()  # type: ignore[arg-type]
        torch.testing.assert_close(enc(x, mask), dense_reference(enc, x, mask))
        torch.testing.assert_close(enc(x, mask & ~self_loops(5)), dense_reference(enc, x, mask & ~self_loops(5)))


def test_additive_scores_are_learned_and_refuse_a_batched_mask() -> None:
    enc = PropagationEncoder(4, 6, 2, steps=2, scores="additive")
    assert {"att_dst", "att_src"} <= set(enc.state_dict())
    assert "att_dst" not in PropagationEncoder(4, 6, 2).state_dict()
    ring = Graph(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]]), 5) | self_loops(5)
    enc(torch.randn(5, 4), ring).sum().backward()
    assert enc.att_dst.grad is not None and enc.att_dst.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="additive"):
        enc(torch.randn(5, 4), Causal() & Padding(torch.tensor([5])))


def test_pair_dropout_only_in_training() -> None:
    enc = PropagationEncoder(4, 6, 2, steps=2, dropout=0.0, pair_dropout=0.5)
    ring = Graph(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]]), 5) | self_loops(5)
    x = torch.randn(5, 4)
    torch.manual_seed(0)
    a = enc(x, ring)
    torch.manual_seed(1)
    b = enc(x, ring)
    assert not torch.allclose(a, b)
    enc.eval()
    torch.testing.assert_close(enc(x, ring), dense_reference(enc, x, ring))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="steps"):
        PropagationEncoder(4, 6, 2, steps=-1)
    with pytest.raises(ValueError, match="alpha"):
        PropagationEncoder(4, 6, 2, alpha=1.5)
    with pytest.raises(ValueError, match="pair_dropout"):
        PropagationEncoder(4, 6, 2, pair_dropout=1.0)
    with pytest.raises(ValueError, match="scores"):
        PropagationEncoder(4, 6, 2, scores="dot")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="heads"):
        PropagationEncoder(4, 6, 2, heads=0, scores="additive")
    with pytest.raises(ValueError, match="heads=2 needs scores='additive'"):
        PropagationEncoder(4, 6, 2, heads=2)
    assert "beta" not in PropagationEncoder(4, 6, 2).state_dict()
