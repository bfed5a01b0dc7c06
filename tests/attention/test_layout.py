"""The layout of attend's inputs is stated (by ``layout=`` or by a packed-layout mask), never guessed:
every built-in mask kind, plain and composed, in both layouts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from attnmm import attend
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
    get_mask,
    list_masks,
)

N, H, E = 6, 2, 4  # nodes (or positions) of every case, heads, head dim


def _mask(name: str) -> Mask:
    """One mask of each built-in kind over 6 positions (or nodes); the padded ones for a batch of 2."""
    edges = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 2], [1, 2, 3, 4, 5, 0, 0, 5]])
    return {
        "Causal": Causal(),
        "Chunk": Chunk(2, 1),
        "Documents": Documents([2, 4]),
        "Full": Full(),
        "Graph": Graph(edges, num_nodes=N),
        "Grid": Grid(2, 3, kernel=3),
        "Padding": Padding([6, 3]),
        "SameGraph": SameGraph(torch.tensor([0, 0, 0, 1, 1, 1])),
        "Segments": Segments([3, 3], within=[Causal(), Window(1, 1)], links="full"),
        "Window": Window(1, 1),
    }[name]


BUILTIN = [n for n in list_masks() if get_mask(n).__module__.startswith("attnmm.masks.")]

#: a mask alone and in compositions with masks of no layout of their own, which keep its layout
COMPOSE: dict[str, Callable[[Mask], Mask]] = {
    "alone": lambda m: m,
    "and_window": lambda m: m & Window(3, 3),
    "or_causal": lambda m: m | Causal(),
    "not": lambda m: ~m,
}


def _nodes(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(N, H, E, generator=g, dtype=torch.float64) for _ in range(3))  # type: ignore[return-value]


def test_every_builtin_mask_has_a_case() -> None:
    for name in BUILTIN:
        assert isinstance(_mask(name), get_mask(name))


@pytest.mark.parametrize("compose", COMPOSE)
@pytest.mark.parametrize("name", BUILTIN)
def test_three_dims_without_layout(name: str, compose: str) -> None:
    """A 3-D input is packed nodes under a packed-layout mask, and refused under any other."""
    mask = COMPOSE[compose](_mask(name))
    q, k, v = _nodes()
    if mask.layout == "packed":
        torch.testing.assert_close(attend(q, k, v, mask), attend(q, k, v, mask, layout="packed"))
        return
    with pytest.raises(ValueError, match=r"packed graph nodes \(N=6, H=2, E=4\).*\(B=6, L=2, D=4\)") as err:
        attend(q, k, v, mask)
    assert isinstance(err.value, TypeError)  # a layout refusal is both
    assert "(B, H, L, E)" in str(err.value) and "unflatten" in str(err.value)


@pytest.mark.parametrize("compose", COMPOSE)
@pytest.mark.parametrize("name", BUILTIN)
def test_packed_stated(name: str, compose: str) -> None:
    """``layout="packed"`` reads (N, H, E) as nodes under any mask but a padded-layout one, with the
    result of the same problem as one padded item (B = 1, L = N)."""
    mask = COMPOSE[compose](_mask(name))
    q, k, v = _nodes(1)
    if mask.layout == "padded":
        with pytest.raises(TypeError, match=r"padded-layout mask but q is packed \(N, H, E\)"):
            attend(q, k, v, mask, layout="packed")
        return
    out = attend(q, k, v, mask, layout="packed")
    one = [t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)]  # (1, H, N, E)
    expected = attend(*one, mask, backend="reference").squeeze(0).transpose(0, 1)  # (N, H, E)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("compose", COMPOSE)
@pytest.mark.parametrize("name", BUILTIN)
def test_padded(name: str, compose: str) -> None:
    """4-D inputs are the padded layout, stated or not; ``layout="packed"`` refuses them."""
    mask = COMPOSE[compose](_mask(name))
    B = 1 if mask.layout == "packed" else 2  # a packed-layout mask is one item of N nodes
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, H, N, E, generator=g, dtype=torch.float64) for _ in range(3))
    out = attend(q, k, v, mask)
    torch.testing.assert_close(out, attend(q, k, v, mask, layout="padded"))
    torch.testing.assert_close(out, attend(q, k, v, mask, backend="reference"))
    with pytest.raises(ValueError, match=r"layout='packed' takes q of shape \(N, H, E\), got 4-D shape"):
        attend(q, k, v, mask, layout="packed")


def test_no_mask() -> None:
    q, k, v = _nodes(3)
    with pytest.raises(ValueError, match=r"under no mask \(full attention\), which does not state the layout"):
        attend(q, k, v)
    out = attend(q, k, v, layout="packed")
    scores = torch.einsum("nhe,mhe->hnm", q, k) / E**0.5
    torch.testing.assert_close(out, torch.einsum("hnm,mhe->nhe", scores.softmax(-1), v))
    with pytest.raises(ValueError, match=r"layout='padded' takes q of shape \(B, H, L, E\), got 3-D shape \(6, 2, 4\)"):
        attend(q, k, v, layout="padded")
    with pytest.raises(ValueError, match="layout must be 'padded', 'packed' or None, got 'nodes'"):
        attend(q, k, v, layout="nodes")  # type: ignore[call-overload]


def test_batch_first_sequence_is_refused_by_name() -> None:
    """The batch-first input of nn.MultiheadAttention under a sequence mask: refused, not read as nodes."""
    x = torch.randn(2, 10, 16)  # (B, L, D)
    for mask in (Causal(), Window(2, 2), Causal() & Window(3, 0), None):
        with pytest.raises(ValueError) as err:
            attend(x, x, x, mask)
        message = str(err.value)
        assert "packed graph nodes (N=2, H=10, E=16)" in message
        assert "batch-first sequence (B=2, L=10, D=16)" in message
        assert "layout='packed'" in message and "x.unflatten(-1, (H, E)).transpose(1, 2)" in message
    heads = x.unflatten(-1, (4, 4)).transpose(1, 2)  # (B, H, L, E): the fix the message gives
    assert attend(heads, heads, heads, Causal()).shape == (2, 4, 10, 4)
