"""EgoNeighbourEncoder: hop-wise projections spread over a mask, against a dense reference."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnmm.common.feature_knn import feature_knn
from attnmm.masks import Graph, Mask, SameGraph
from attnmm.nn import EgoNeighbourEncoder


def dense_reference(enc: EgoNeighbourEncoder, x: torch.Tensor, mask: Mask) -> torch.Tensor:
    """The same computation (eval mode) with a dense (N, N) weight matrix and a masked softmax."""
    n = x.shape[0]
    allowed = mask.dense(n, n)
    zs = [lin(x) for lin in enc.lins]
    if enc.att_dst is not None and enc.att_src is not None:  # GAT's additive scores on the ego layer, (H, N, N)
        g = zs[0]
        s = F.leaky_relu((enc.att_dst @ g.T)[:, :, None] + (enc.att_src @ g.T)[:, None, :], enc.negative_slope)
    else:
        s = torch.zeros(1, n, n, dtype=x.dtype)
    w = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0).mean(0)  # empty rows: 0
    for t in range(1, enc.hops + 1):
        for _ in range(t):
            zs[t] = w @ zs[t]
    if enc.normalize:
        zs = [F.normalize(z, dim=-1) for z in zs]
    return enc.out(F.relu(torch.cat(zs, -1)))


@pytest.mark.parametrize("scores,heads", [("uniform", 1), ("additive", 1), ("additive", 3)])
@pytest.mark.parametrize("hops", [0, 1, 3])
@pytest.mark.parametrize("n,m", [(1, 0), (7, 0), (9, 20), (30, 90)])
@pytest.mark.parametrize("normalize", [True, False])
def test_matches_dense_reference_values_and_grads(
    scores: str, heads: int, hops: int, n: int, m: int, normalize: bool
) -> None:
    g = torch.Generator().manual_seed(n * 100 + m + hops)
    mask = Graph(torch.randint(0, n, (2, m), generator=g), n)  # directed, duplicates allowed; m=0: no pairs
    enc = EgoNeighbourEncoder(5, 8, 3, hops=hops, scores=scores, heads=heads, normalize=normalize)  # type: ignore[arg-type]
    enc = enc.double().eval()
    x = torch.randn(n, 5, dtype=torch.float64, generator=g, requires_grad=True)
    out = enc(x, mask)
    ref = dense_reference(enc, x, mask)
    torch.testing.assert_close(out, ref)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, [x, *enc.parameters()], grad, allow_unused=True)
    want = torch.autograd.grad(ref, [x, *enc.parameters()], grad, allow_unused=True)
    for a, b in zip(got, want, strict=True):
        if a is None or b is None:  # e.g. the attention vectors' gradient where no pair exists
            assert (a is None or not a.any()) and (b is None or not b.any())
            continue
        torch.testing.assert_close(a, b)


def test_no_hops_is_an_mlp_that_ignores_the_mask() -> None:
    torch.manual_seed(0)
    enc = EgoNeighbourEncoder(6, 4, 2, hops=0, normalize=False).eval()
    x = torch.randn(5, 6)
    ring = Graph(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]]), 5)
    want = enc.out(F.relu(enc.lins[0](x)))
    torch.testing.assert_close(enc(x, ring), want)
    torch.testing.assert_close(enc(x, SameGraph(torch.zeros(5, dtype=torch.long))), want)
    assert enc.att_dst is None and len(enc.lins) == 1


def test_ego_is_kept_apart_from_the_neighbours() -> None:
    """A node without in-neighbours: its neighbour hops are zero, whatever the other nodes hold."""
    torch.manual_seed(1)
    enc = EgoNeighbourEncoder(3, 4, 2, hops=2).eval()
    mask = Graph(torch.tensor([[0, 1], [1, 2]]), 3)  # node 0 has no in-edge
    x = torch.randn(3, 3)
    y = x.clone()
    y[1:] = torch.randn(2, 3)
    torch.testing.assert_close(enc(x, mask)[0], enc(y, mask)[0])


def test_composed_and_global_masks() -> None:
    torch.manual_seed(2)
    x = torch.randn(12, 4)
    edges = Graph(torch.randint(0, 12, (2, 20)), 12)
    union = edges | feature_knn(x, 3)
    for mask in (union, SameGraph(torch.tensor([0] * 5 + [1] * 7))):
        for scores, heads in (("uniform", 1), ("additive", 2)):
            enc = EgoNeighbourEncoder(4, 8, 3, hops=2, scores=scores, heads=heads).double().eval()  # type: ignore[arg-type]
            torch.testing.assert_close(enc(x.double(), mask), dense_reference(enc, x.double(), mask))


def test_training_drops_and_stays_finite() -> None:
    torch.manual_seed(3)
    enc = EgoNeighbourEncoder(4, 8, 3, hops=2, dropout=0.5, pair_dropout=0.5, scores="additive", heads=2)
    mask = Graph(torch.randint(0, 10, (2, 30)), 10)
    out = enc(torch.randn(10, 4), mask)
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in enc.parameters())


def test_errors_say_what_to_change() -> None:
    with pytest.raises(ValueError, match="hops must be"):
        EgoNeighbourEncoder(4, 8, 3, hops=-1)
    with pytest.raises(ValueError, match="dropout must be in"):
        EgoNeighbourEncoder(4, 8, 3, dropout=1.0)
    with pytest.raises(ValueError, match="scores must be"):
        EgoNeighbourEncoder(4, 8, 3, scores="cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs scores='additive'"):
        EgoNeighbourEncoder(4, 8, 3, heads=2)
    enc = EgoNeighbourEncoder(4, 8, 3)
    with pytest.raises(ValueError, match="state="):
        enc(torch.randn(3, 4), Graph(torch.zeros(2, 0, dtype=torch.long), 3), state=object())
