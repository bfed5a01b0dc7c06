"""The explanatory figures of the pages readers start from (docs/make_figures.py renders them).

Each function returns a matplotlib Figure drawn from the library itself where it shows a mask or
weights (``attnmm.viz``), so a picture cannot drift from what the code does: the home page's pipeline
(:func:`pipeline`), the allowed set and its softmax (:func:`allowed_set`, concepts), the two layouts
(:func:`layouts`, the attention core), the adapters' tokens and masks (:func:`adapters`), a PyG batch
as masks (:func:`graph_batch`, the graph tutorial) and the two pictures of quickstart's "Draw a mask"
that are not mask pictures of their own (:func:`quickstart_grid_patch`, :func:`quickstart_weights`).
"""

from __future__ import annotations

import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from attnmm import attend
from attnmm.masks import Causal, Graph, Grid, Padding, SameGraph, Window
from attnmm.masks.graph_helpers import virtual_nodes
from attnmm.viz import plot_attention, plot_grid_neighbourhood, plot_mask

#: Colours of the diagrams: one per role, used on every page.
INPUT, ADAPTER, TOKENS, CORE, HEAD = "#e8eef7", "#cfe0f3", "#fdf1d6", "#f8d9cf", "#dcefd9"

#: Two graphs of a PyG batch: a triangle (nodes 0-2) and a directed 4-cycle with a chord (nodes 3-6).
BATCH_EDGES = torch.tensor([[0, 1, 2, 1, 3, 4, 5, 6, 3], [1, 2, 0, 0, 4, 5, 6, 3, 5]])
BATCH = torch.tensor([0, 0, 0, 1, 1, 1, 1])


def _box(ax: Axes, x: float, y: float, w: float, h: float, colour: str, title: str, body: str = "") -> None:
    """A rounded box at (x, y) (lower left) with a bold title and a smaller body under it."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.06", fc=colour, ec="#555555"))
    ax.text(x + w / 2, y + h - 0.12, title, ha="center", va="top", fontsize=10.5, fontweight="bold")
    if body:
        ax.text(x + w / 2, y + h - 0.42, body, ha="center", va="top", fontsize=8.5, linespacing=1.35)


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], label: str = "") -> None:
    ax.annotate("", end, start, arrowprops={"arrowstyle": "-|>", "lw": 1.4, "color": "#333333"})
    if label:
        ax.text((start[0] + end[0]) / 2, start[1] + 0.08, label, ha="center", va="bottom", fontsize=8, style="italic")


def _inset(ax: Axes, caption: str) -> None:
    """A picture inside a box: no ticks or labels of its own, a caption under it."""
    ax.set_xlabel(caption, fontsize=8, labelpad=3)
    ax.xaxis.set_label_position("bottom")
    ax.set_ylabel("")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title("")


def pipeline() -> Figure:
    """adapter -> tokens + mask -> attend (inside the encoder) -> head: one model of attnmm."""
    fig = Figure(figsize=(11.0, 3.7))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 11)
    ax.set_ylim(0, 3.7)
    ax.axis("off")
    top, h = 0.5, 3.0
    raw = "text ids (B, L)\nwaveform (B, T)\nimage (B, C, H, W)\nPyG Batch of graphs"
    _box(ax, 0.15, top, 1.75, h, INPUT, "raw batch", raw)
    adapter = "one per modality\n(attnmm.adapters),\npicked in YAML\nby class_path"
    _box(ax, 2.35, top, 1.6, h, ADAPTER, "Adapter", adapter)
    _box(ax, 4.4, top, 2.05, h, TOKENS, "Tokens", "x (B, L, D) or (N, D)\n+ the mask: A(i)")
    _box(ax, 6.9, top, 2.1, h, CORE, "Encoder", "layers of attend():\nsoftmax over A(i)")
    _box(ax, 9.45, top, 1.4, h, HEAD, "Head", "pooled or\nper token\n-> logits")
    for a, b in [(1.9, 2.35), (3.95, 4.4), (6.45, 6.9), (9.0, 9.45)]:
        _arrow(ax, (a, 2.0), (b, 2.0))
    ax.text(5.5, 0.18, "a recipe (recipes/*.py + YAML) puts adapter, encoder and head together with a dataset "
            "and trains them with Lightning", ha="center", fontsize=8.5, color="#444444")  # fmt: skip
    mask = Window(2, 1) & Padding([8])
    left = fig.add_axes((0.447, 0.25, 0.1, 0.4))
    plot_mask(mask, 10, ax=left)
    _inset(left, "Window(2, 1) & Padding([8])")
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 1, 10, 4)  # (B, H, L, E)
    _, w = attend(q, k, v, mask, return_weights=True)
    right = fig.add_axes((0.675, 0.25, 0.1, 0.4))
    right.imshow(w.to_dense(10, 10, 1)[0, 0].numpy(), cmap="viridis", interpolation="nearest")  # (L, S)
    _inset(right, "weights: 0 outside A(i)")
    return fig


def allowed_set() -> Figure:
    """Query i's allowed set A(i) in the mask, and its weights: a softmax over A(i), zero elsewhere."""
    torch.manual_seed(0)
    L, i = 12, 6
    mask = Window(3, 1)
    q = k = v = torch.randn(1, 1, L, 8)  # (B, H, L, E)
    _, w = attend(q, k, v, mask, return_weights=True)
    row = w.to_dense(L, L, 1)[0, 0, i]  # (S,)
    fig = Figure(figsize=(9.0, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.5])
    plot_mask(mask, L, ax=left, title=f"{mask!r}: row i = {i} is A({i})")
    left.axhspan(i - 0.5, i + 0.5, color="#d62728", alpha=0.35, lw=0)
    colours = ["#d62728" if bool(a) else "#bbbbbb" for a in mask.dense(L, L)[i]]
    right.bar(range(L), row.tolist(), color=colours)
    right.set_xlabel("key j")
    right.set_ylabel(f"weight $a_{{{i}j}}$")
    right.set_title(f"softmax over A({i}): the weights sum to {float(row.sum()):.0f}, and are 0 outside A({i})",
                    fontsize="medium")  # fmt: skip
    right.set_xticks(range(L))
    return fig


def layouts() -> Figure:
    """The padded layout (a batch of sequences, each item its own row of the mask) and the packed one (the
    nodes of all graphs in one index, a batch of graphs one block-diagonal mask)."""
    fig = Figure(figsize=(11.0, 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    mask = Causal() & Padding([8, 5])
    plot_mask(mask, 8, b=0, ax=axes[0], title="padded (B, H, L, E): item 0,\n8 real tokens, Causal() & Padding")
    plot_mask(mask, 8, b=1, ax=axes[1], title="item 1 of the same batch: 5 real tokens,\n3 padded keys never attended")
    graph = Graph(BATCH_EDGES, num_nodes=7)
    plot_mask(graph, 7, ax=axes[2], title="packed (N, H, E): 2 graphs, N = 3 + 4 nodes,\none block-diagonal Graph mask")
    for n in (2.5,):
        axes[2].axhline(n, color="#d62728", lw=1)
        axes[2].axvline(n, color="#d62728", lw=1)
    return fig


def adapters() -> Figure:
    """What each adapter makes of its batch: the tokens' shape and the mask they attend under."""
    fig = Figure(figsize=(11.0, 3.5), layout="constrained")
    axes = fig.subplots(1, 4)
    panels = [
        ("SpeechAdapter\nwaveform -> frames (B, L, D)", Window(3, 1) & Padding([12, 9]), 12, 1),
        ("ImageAdapter\nimage -> patches (B, P, D)", Grid(3, 4, kernel=3), 12, 0),
        ("TextAdapter\nids -> tokens (B, L, D)", Causal() & Padding([12, 9]), 12, 1),
        ("GraphAdapter\nPyG Batch -> nodes (N, D)", Graph(BATCH_EDGES, num_nodes=7), 7, 0),
    ]
    masks = [
        "Window(3, 1) & Padding, item 1", "Grid(3, 4, kernel=3)", "Causal() & Padding, item 1", "the batch's Graph"
    ]
    for ax, (title, mask, n, b), name in zip(axes, panels, masks, strict=True):
        plot_mask(mask, n, b=b, ax=ax, title=f"{title}\n{name}")
        ax.title.set_fontsize(9)
    return fig


def graph_batch() -> Figure:
    """A PyG batch of two graphs as masks: its edges, united with a virtual node per graph, and full
    attention inside each graph (GPS's global attention)."""
    fig = Figure(figsize=(11.0, 3.7), layout="constrained")
    axes = fig.subplots(1, 3)
    edges = Graph(BATCH_EDGES, num_nodes=7)
    plot_mask(edges, 7, ax=axes[0], title="AttentionConv: the edges,\nGraph(edge_index, 7)")
    virtual = Graph(BATCH_EDGES, num_nodes=9) | virtual_nodes(7, BATCH)
    plot_mask(virtual, 9, ax=axes[1], title="+ a virtual node per graph (7, 8):\nedges | virtual_nodes(7, batch)")
    plot_mask(SameGraph(BATCH), 7, ax=axes[2], title="GPS's global attention:\nSameGraph(batch)")
    for ax in axes:
        ax.title.set_fontsize(9.5)
    return fig


def quickstart_grid_patch() -> Figure:
    """Quickstart's ``plot_grid_neighbourhood(Grid(7, 7, kernel=3), (0, 3))``."""
    return plot_grid_neighbourhood(Grid(7, 7, kernel=3), (0, 3))


def quickstart_weights() -> Figure:
    """Quickstart's weights of head 1 under ``Window(3, 1)`` (random q, k, v; seed 0)."""
    torch.manual_seed(0)
    q = k = v = torch.randn(1, 2, 16, 8)  # (B, H, L, E)
    _, w = attend(q, k, v, Window(3, 1), return_weights=True)
    return plot_attention(w, head=1, num_rows=16, num_cols=16)


DIAGRAMS = {
    "pipeline": pipeline,
    "allowed_set": allowed_set,
    "layouts": layouts,
    "adapters": adapters,
    "graph_batch": graph_batch,
    "quickstart_grid_patch": quickstart_grid_patch,
    "quickstart_weights": quickstart_weights,
}
