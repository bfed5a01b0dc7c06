"""The AttentionConv benchmark case: attnmm.nn.AttentionConv against PyG's TransformerConv.

N = 100k nodes, M = 1M random edges, 64 input channels, heads = 4, 64 channels per head, forward +
backward (gradients of the input features and of every weight). Both layers hold the same weights.

Two settings: the same edge_index object at every call (a static graph trained full-batch: ``ours``,
``peer``) and a new edge_index tensor of the same edges at every call (``ours_new``, ``peer_new``: as a
loader gives a new tensor per step), made inside the timed call for both sides (PyG keeps nothing
across calls, so the copy costs both the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

Inputs = dict[str, Any]

N_NODES, N_EDGES, IN_CHANNELS, HEADS, OUT_CHANNELS = 100_000, 1_000_000, 64, 4, 64


def make_build(nodes: int = N_NODES, edges: int = N_EDGES) -> Callable[[], Inputs]:
    """``build`` at other sizes (the tests run the case small)."""

    def build() -> Inputs:
        """Inputs of both sides: features, random edges, the two layers with equal weights."""
        import warnings

        from torch_geometric.nn import TransformerConv

        from attnmm.nn import AttentionConv

        g = torch.Generator().manual_seed(11)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(11)
            peer = TransformerConv(IN_CHANNELS, OUT_CHANNELS, heads=HEADS)
        ours = AttentionConv(IN_CHANNELS, OUT_CHANNELS, heads=HEADS)
        ours.load_state_dict(peer.state_dict())
        x = torch.randn(nodes, IN_CHANNELS, generator=g).requires_grad_(True)
        edge_index = torch.randint(0, nodes, (2, edges), generator=g)
        grad = torch.randn(nodes, HEADS * OUT_CHANNELS, generator=g)
        return {"x": x, "edge_index": edge_index, "grad": grad, "ours": ours, "peer": peer}

    return build


build = make_build()


def _train(module_key: str, new_edges: bool = False) -> Callable[[Inputs], Callable[[], None]]:
    def make(inp: Inputs) -> Callable[[], None]:
        module = inp[module_key]

        def run() -> None:
            inp["x"].grad = None
            module.zero_grad(set_to_none=True)
            edge_index = inp["edge_index"].clone() if new_edges else inp["edge_index"]
            module(inp["x"], edge_index).backward(inp["grad"])

        return run

    return make


ours, peer = _train("ours"), _train("peer")
ours_new, peer_new = _train("ours", new_edges=True), _train("peer", new_edges=True)


def _grads(inp: Inputs, key: str, new_edges: bool = False) -> list[Tensor]:
    module = inp[key]
    out = module(inp["x"], inp["edge_index"].clone() if new_edges else inp["edge_index"])
    params = [module.get_parameter(n) for n, _ in inp["peer"].named_parameters()]
    return [out.detach(), *torch.autograd.grad(out, [inp["x"], *params], inp["grad"])]


def relative_error(a: list[Tensor], b: list[Tensor]) -> float:
    """The largest difference of outputs and gradients, relative to the largest value (absolute below 1)."""
    return max(float((x - y).abs().max() / y.abs().max().clamp(min=1.0)) for x, y in zip(a, b))


def agreement(inp: Inputs, ours_name: str, peer_name: str, new_edges: bool = False) -> str:
    """A line on how far apart the outputs and gradients of both layers are (relative to the largest value,
    or absolute below 1); raises above 1e-4. With ``new_edges`` each call gets its own copy of the edges,
    and ours is called twice (its second call must not differ from its first)."""
    first = _grads(inp, "ours", new_edges)
    err = relative_error(first, _grads(inp, "peer", new_edges))
    if new_edges:
        err = max(err, relative_error(_grads(inp, "ours", new_edges), first))
    if not err <= 1e-4:
        raise AssertionError(f"{ours_name} differs from {peer_name}: max relative error {err:.1e} > 1e-4")
    setting = ", new edge_index" if new_edges else ""
    return f"max |{ours_name} - {peer_name}| / max = {err:.1e} (output and all gradients{setting})"


def check(inp: Inputs) -> str:
    """Outputs and gradients of both layers agree (relative to the largest value, or absolute below 1)."""
    return agreement(inp, "AttentionConv", "TransformerConv")


def check_new(inp: Inputs) -> str:
    """As :func:`check`, each call given a new copy of the edges."""
    return agreement(inp, "AttentionConv", "TransformerConv", new_edges=True)


def at_least(speed: float, memory: float) -> Callable[[float, float, float, float], tuple[str, bool]]:
    """The verdict of a row whose target is ``speed`` times faster and ``memory`` times less peak memory."""

    def verdict(tp: float, to: float, mp: float, mo: float) -> tuple[str, bool]:
        return f"{tp / to:.1f}x faster, {mp / mo:.1f}x less memory", tp / to >= speed and mp / mo >= memory

    return verdict


verdict = at_least(4, 8)
