"""The AttentionConv benchmark case: attnmm.nn.AttentionConv against PyG's TransformerConv.

N = 100k nodes, M = 1M random edges, 64 input channels, heads = 4, 64 channels per head, forward +
backward (gradients of the input features and of every weight). Both layers hold the same weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

Inputs = dict[str, Any]

N_NODES, N_EDGES, IN_CHANNELS, HEADS, OUT_CHANNELS = 100_000, 1_000_000, 64, 4, 64


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
    x = torch.randn(N_NODES, IN_CHANNELS, generator=g).requires_grad_(True)
    edge_index = torch.randint(0, N_NODES, (2, N_EDGES), generator=g)
    grad = torch.randn(N_NODES, HEADS * OUT_CHANNELS, generator=g)
    return {"x": x, "edge_index": edge_index, "grad": grad, "ours": ours, "peer": peer}


def _train(module_key: str) -> Callable[[Inputs], Callable[[], None]]:
    def make(inp: Inputs) -> Callable[[], None]:
        module = inp[module_key]

        def run() -> None:
            inp["x"].grad = None
            module.zero_grad(set_to_none=True)
            module(inp["x"], inp["edge_index"]).backward(inp["grad"])

        return run

    return make


ours, peer = _train("ours"), _train("peer")


def _grads(inp: Inputs, key: str) -> list[Tensor]:
    module = inp[key]
    out = module(inp["x"], inp["edge_index"])
    params = [module.get_parameter(n) for n, _ in inp["peer"].named_parameters()]
    return [out.detach(), *torch.autograd.grad(out, [inp["x"], *params], inp["grad"])]


def check(inp: Inputs) -> str:
    """Outputs and gradients of both layers agree (relative to the largest value, or absolute below 1)."""
    a, b = _grads(inp, "ours"), _grads(inp, "peer")
    err = max(float((x - y).abs().max() / y.abs().max().clamp(min=1.0)) for x, y in zip(a, b))
    if not err <= 1e-4:
        raise AssertionError(f"AttentionConv differs from TransformerConv: max relative error {err:.1e} > 1e-4")
    return f"max |AttentionConv - TransformerConv| / max = {err:.1e} (output and all gradients)"


def verdict(tp: float, to: float, mp: float, mo: float) -> tuple[str, bool]:
    return f"{tp / to:.1f}x faster, {mp / mo:.1f}x less memory", tp / to >= 4 and mp / mo >= 8
