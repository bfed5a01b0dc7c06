"""Checks of the node features a graph layer's forward receives, before any projection meets them."""

from __future__ import annotations

from torch import Tensor

from attnmm._checks import check_features

#: What a graph layer says to a batch of sequences or another rank than (N, F).
PACKED_HINT = (
    "graph layers take PyG's packed layout, the nodes of every graph of a batch in one (N, F) tensor (as "
    "torch_geometric.data.Batch holds them); a padded batch of sequences (B, L, F) goes to an Encoder"
)


def check_dropout(dropout: float, name: str = "dropout") -> float:
    """``dropout`` as a float in [0, 1), or raise naming it."""
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {dropout}")
    return float(dropout)


def check_node_features(
    layer: str, x_src: object, x_dst: object, in_channels: int | tuple[int, int], widths: tuple[int, int]
) -> None:
    """Refuse node features that are not (N, F) with the widths ``in_channels`` declares: ``x`` for an
    int ``in_channels``, ``x[0]`` and ``x[1]`` (sources and targets, the latter may be ``None``) for a
    pair. The message names ``in_channels`` and the expected and the actual shape."""
    pair = not isinstance(in_channels, int)
    for i, t in enumerate((x_src, x_dst)):
        if t is None or (i == 1 and not pair and t is x_src):
            continue
        name, param = (f"x[{i}]", f"in_channels[{i}]") if pair else ("x", "in_channels")
        check_features(layer, name, t, widths[i], param, {2: f"(N, {widths[i]})"}, hint=PACKED_HINT)
    if pair and isinstance(x_src, Tensor) and isinstance(x_dst, Tensor) and x_src.device != x_dst.device:
        raise ValueError(f"{layer}: x[0] and x[1] must be on one device, got {x_src.device} and {x_dst.device}")
