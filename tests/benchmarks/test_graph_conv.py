"""The graph layer cases at small sizes: the same and a new edge_index per call (AttentionConv, GATConv,
GATv2Conv against PyG), and a new batch of graphs per call (GATConv)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from benchmarks import gat_conv, graph_batches, graph_conv
from benchmarks._cases import CASES, get_case

BUILDS: dict[str, Callable[[int, int], Callable[[], dict]]] = {
    "graph_conv": graph_conv.make_build,
    "gat_conv": lambda n, m: gat_conv.make_build("GATConv", n, m),
    "gatv2_conv": lambda n, m: gat_conv.make_build("GATv2Conv", n, m),
}


class _Seen(nn.Module):
    """A layer that records the edge_index objects it is called with."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer, self.seen = layer, []

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        self.seen.append(edge_index)
        return self.layer(x, edge_index)


@pytest.mark.parametrize("key", BUILDS)
def test_new_edge_rows_follow_their_cached_rows(key: str) -> None:
    keys = [c.key for c in CASES]
    assert keys[keys.index(key) + 1] == f"{key}_new"
    cached, new = get_case(key), get_case(f"{key}_new")
    assert new.build is cached.build and new.target == ">= 4x faster, >= 7x less peak memory"
    assert new.title.startswith("same, a new edge_index tensor")
    text, met = new.verdict(4.0, 1.0, 7.0, 1.0)
    assert met and text == "4.0x faster, 7.0x less memory"
    assert not new.verdict(3.9, 1.0, 70.0, 1.0)[1] and not new.verdict(40.0, 1.0, 6.9, 1.0)[1]


@pytest.mark.parametrize("key", BUILDS)
def test_each_side_gets_a_new_edge_index_every_call_and_the_cached_rows_the_same(key: str) -> None:
    inp = BUILDS[key](30, 120)()
    for side in ("ours", "peer"):
        inp[side] = _Seen(inp[side])
    for suffix, new in (("", False), ("_new", True)):
        case = get_case(key + suffix)
        for side, make in (("ours", case.ours), ("peer", case.peer)):
            inp[side].seen.clear()
            run = make(inp)
            run()
            run()
            first, second = inp[side].seen
            assert torch.equal(first, inp["edge_index"]) and torch.equal(second, inp["edge_index"])
            assert (first is not second) == new and (first is not inp["edge_index"]) == new


@pytest.mark.parametrize("key", BUILDS)
def test_checks_pass_on_a_small_copy(key: str) -> None:
    inp = BUILDS[key](40, 300)()
    assert "output and all gradients)" in get_case(key).check(inp)
    assert "new edge_index" in get_case(f"{key}_new").check(inp)


def test_checks_fail_when_the_layers_differ() -> None:
    inp = gat_conv.make_build("GATConv", 20, 60)()
    with torch.no_grad():
        inp["ours"].att_src.mul_(2.0)
    with pytest.raises(AssertionError, match="attnmm GATConv differs from PyG GATConv"):
        gat_conv.check_new(inp)


def test_random_batches_are_disjoint_unions_drawn_anew() -> None:
    g = torch.Generator().manual_seed(0)
    graphs, nodes, edges = 5, 4, 7
    a, b = graph_batches.random_batch(g, graphs, nodes, edges), graph_batches.random_batch(g, graphs, nodes, edges)
    assert a.shape == (2, graphs * edges) and not torch.equal(a, b)
    graph_of = torch.arange(graphs).repeat_interleave(edges)  # the graph of each edge, in order
    for batch in (a, b):
        assert torch.equal(batch[0] // nodes, graph_of) and torch.equal(batch[1] // nodes, graph_of)
    again = torch.Generator().manual_seed(0)
    assert torch.equal(graph_batches.random_batch(again, graphs, nodes, edges), a)  # seeded: both sides alike


def test_batch_case_both_sides_see_the_same_new_batches_and_agree() -> None:
    case = get_case("gat_conv_batches")
    keys = [c.key for c in CASES]
    assert keys.index("gat_conv_batches") == keys.index("gat_conv_new") + 1
    assert case.build is graph_batches.build and "N=32768, M=262144" in case.title
    assert graph_batches.GRAPHS * graph_batches.NODES == 32768 and graph_batches.GRAPHS * graph_batches.EDGES == 262144
    inp = graph_batches.make_build(graphs=6, nodes=5, edges=9)()
    assert inp["x"].shape == (30, graph_conv.IN_CHANNELS)
    for side in ("ours", "peer"):
        inp[side] = _Seen(inp[side])
        run = getattr(graph_batches, side)(inp)
        run()
        run()
    ours, peer = inp["ours"].seen, inp["peer"].seen
    assert all(torch.equal(o, p) for o, p in zip(ours, peer)) and not torch.equal(ours[0], ours[1])
    assert case.check(inp).count("new edge_index") == 2
    assert case.verdict(3.0, 1.0, 5.0, 1.0)[1] and not case.verdict(2.9, 1.0, 5.0, 1.0)[1]
