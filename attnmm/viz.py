r"""Pictures of masks and attention maps (matplotlib).

Every function draws into a new :class:`~matplotlib.figure.Figure` (built without pyplot, so it works
under any backend, including Agg on a headless machine, and leaks no global figure state) or into the
``ax`` you pass, and returns the figure. Save it with ``fig.savefig("mask.png")``; in a notebook the
returned figure displays itself.

- :func:`plot_mask`: the allowed matrix :math:`\mathbb{1}[j \in A(i)]` of a mask (row i = query i).
- :func:`plot_masks`: a gallery of several masks side by side.
- :func:`plot_grid_neighbourhood`: one patch's allowed set drawn on the 2-D patch grid of a
  :class:`~attnmm.masks.Grid` mask.
- :func:`plot_attention`: attention weights :math:`a_{ij}`, dense or as
  :class:`~attnmm.attention.AttentionWeights`.
"""

from __future__ import annotations

import math
import numbers
import textwrap
from collections.abc import Mapping

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from torch import Tensor

from attnmm.attention.weights import AttentionWeights
from attnmm.masks import Mask, grid_size

#: Colours of :func:`plot_grid_neighbourhood`: outside A(i), allowed neighbour, the query patch.
NEIGHBOURHOOD_COLOURS = ("#f2f2f2", "#4c72b0", "#dd8452")

#: Above this many rows or columns, cell borders are not drawn.
_MAX_GRIDLINES = 40


def plot_mask(
    mask: Mask, num_rows: int, num_cols: int | None = None, *, b: int = 0, ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    r"""Plot the allowed matrix :math:`M_{ij} = \mathbb{1}[j \in A_b(i)]` of a mask.

    Row i is query i, column j is key j; black (1) means *may attend*. The image is
    ``mask.dense(num_rows, num_cols)`` (item ``b`` of a batched mask), so it costs O(L * S).

    Args:
        mask (Mask): the mask to draw.
        num_rows (int): number of queries L.
        num_cols (int, optional): number of keys S. (default: :obj:`num_rows`)
        b (int, optional): batch item to draw, for a batched mask such as
            :class:`~attnmm.masks.Padding`. (default: :obj:`0`)
        ax (matplotlib.axes.Axes, optional): axes to draw into. (default: :obj:`None`, a new figure)
        title (str, optional): axes title. (default: the mask's ``repr``)

    Examples:
        >>> from attnmm.masks import Window
        >>> from attnmm.viz import plot_mask
        >>> fig = plot_mask(Window(1, 0), 4)
        >>> fig.axes[0].images[0].get_array().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
        >>> fig.axes[0].get_xlabel(), fig.axes[0].get_ylabel()
        ('key j', 'query i')
    """
    _check_mask(mask, "plot_mask")
    allowed = mask.dense(num_rows, num_cols)
    if allowed.dim() == 3:  # a batched mask: its item b
        allowed = allowed[_check_index("b", b, allowed.size(0), f"batch items in {mask!r}")]
    else:
        _check_index("b", b, 1, f"batch item: {mask!r} is not batched")
    _check_not_empty(tuple(allowed.shape), "plot_mask", "num_rows and num_cols")
    fig, ax = _figure_and_axes(ax, allowed.shape)
    image = allowed.to(torch.uint8).numpy()
    ax.imshow(image, cmap="Greys", vmin=0, vmax=1, interpolation="nearest", aspect="equal")
    _matrix_axes(ax, image.shape)
    ax.set_title(_wrap(repr(mask)) if title is None else title, fontsize="medium")
    return fig


def plot_masks(
    masks: Mapping[str, Mask], num_rows: int, num_cols: int | None = None, *, columns: int = 4, panel_size: float = 2.6
) -> Figure:
    """Plot several masks side by side, one panel per mask titled with its name.

    Args:
        masks (dict[str, Mask]): the masks, by panel title (drawn in insertion order).
        num_rows (int): number of queries L of every panel.
        num_cols (int, optional): number of keys S. (default: :obj:`num_rows`)
        columns (int, optional): panels per row. (default: :obj:`4`)
        panel_size (float, optional): width and height of one panel in inches. (default: :obj:`2.6`)

    Examples:
        >>> from attnmm.masks import Causal, Full, Window
        >>> from attnmm.viz import plot_masks
        >>> fig = plot_masks({"full": Full(), "causal": Causal(), "window": Window(2, 0)}, 8)
        >>> [ax.get_title() for ax in fig.axes if ax.get_visible()]
        ['full', 'causal', 'window']
    """
    if not isinstance(masks, Mapping) or not masks:
        raise ValueError(f"plot_masks needs a non-empty dict of name -> Mask, got {masks!r:.80}")
    for name, mask in masks.items():
        _check_mask(mask, f"plot_masks (entry {name!r})")
    if isinstance(columns, bool) or not isinstance(columns, numbers.Integral) or columns < 1:
        raise ValueError(f"columns must be an int >= 1, got {columns!r}")
    ncols = min(int(columns), len(masks))
    nrows = math.ceil(len(masks) / ncols)
    fig = Figure(figsize=(panel_size * ncols, panel_size * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (name, mask) in zip(axes, masks.items(), strict=False):
        plot_mask(mask, num_rows, num_cols, ax=ax, title=name)
    for ax in axes[len(masks) :]:
        ax.set_visible(False)
    return fig


def plot_grid_neighbourhood(
    mask: Mask, patch: int | tuple[int, int], *, ax: Axes | None = None, title: str | None = None
) -> Figure:
    r"""Draw one patch's allowed set :math:`A(i)` on the ``height`` x ``width`` patch grid.

    Cells hold 0 (not in :math:`A(i)`), 1 (an allowed neighbour) or 2 (the query patch i itself,
    which a :class:`~attnmm.masks.Grid` mask always allows). Patches are numbered row-major,
    :math:`i = r \cdot \mathrm{width} + c`. Any mask over a patch grid works (its
    :func:`~attnmm.masks.grid_size`: a ``Grid``, its compositions, a mask of one's own).

    Args:
        mask (Mask): a mask over a patch grid (one item of a batched mask: the first).
        patch (int or (int, int)): the query patch, as a flat index i or as (row, column).
        ax (matplotlib.axes.Axes, optional): axes to draw into. (default: :obj:`None`, a new figure)
        title (str, optional): axes title. (default: the mask, the patch and :math:`|A(i)|`)

    Examples:
        >>> from attnmm.masks import Grid
        >>> from attnmm.viz import plot_grid_neighbourhood
        >>> fig = plot_grid_neighbourhood(Grid(4, 4, kernel=3), (0, 1))
        >>> fig.axes[0].images[0].get_array().tolist()
        [[1, 2, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    """
    grid = grid_size(mask) if isinstance(mask, Mask) else None
    if grid is None:
        raise TypeError(
            f"plot_grid_neighbourhood needs a mask over a patch grid (e.g. attnmm.masks.Grid), got "
            f"{type(mask).__name__} {mask!r:.80}; use plot_mask for other masks"
        )
    height, width = grid
    index = _patch_index(mask, grid, patch)
    zero = torch.zeros((), dtype=torch.long)
    keys = torch.arange(height * width)
    allowed = mask.mask_mod(zero, zero, torch.tensor(index), keys)  # row i of the mask, O(P)
    allowed = allowed.expand(height * width).reshape(height, width)  # (height, width)
    cells = allowed.to(torch.uint8).numpy().copy()
    cells[index // width, index % width] = 2
    fig, ax = _figure_and_axes(ax, cells.shape)
    colours = ListedColormap(NEIGHBOURHOOD_COLOURS)
    ax.imshow(cells, cmap=colours, vmin=-0.5, vmax=2.5, interpolation="nearest", aspect="equal")
    _matrix_axes(ax, cells.shape, always_lines=True)
    ax.set_xlabel("patch column")
    ax.set_ylabel("patch row")
    if title is None:
        row, col = divmod(index, width)
        title = f"{_wrap(repr(mask))}\npatch {index} = ({row}, {col}), |A(i)| = {int(allowed.sum())}"
    ax.set_title(title, fontsize="medium")
    return fig


def plot_attention(
    weights: Tensor | AttentionWeights, *, ax: Axes | None = None, head: int = 0, b: int = 0,
    num_rows: int | None = None, num_cols: int | None = None, title: str | None = None,
) -> Figure:
    r"""Plot attention weights :math:`a_{ij}` of one head (and batch item) as a heat map.

    Args:
        weights (Tensor or AttentionWeights): dense weights (L, S), (H, L, S) or (B, H, L, S), or the
            sparse weights returned by ``attend(..., return_weights=True)``.
        ax (matplotlib.axes.Axes, optional): axes to draw into. (default: :obj:`None`, a new figure)
        head (int, optional): head to draw. (default: :obj:`0`)
        b (int, optional): batch item to draw. (default: :obj:`0`)
        num_rows (int, optional): number of queries L of sparse weights. (default: one past the
            largest query index; pass it when the last queries may have no allowed keys)
        num_cols (int, optional): number of keys S of sparse weights. (default: one past the largest
            key index)
        title (str, optional): axes title. (default: the head and batch item)

    Shapes:
        - **weights:** (L, S), (H, L, S), (B, H, L, S), or :class:`AttentionWeights` with values (P, H)
        - **image:** (L, S)

    Examples:
        >>> import torch
        >>> from attnmm import attend
        >>> from attnmm.masks import Causal
        >>> from attnmm.viz import plot_attention
        >>> q = k = v = torch.randn(1, 2, 5, 4)  # (B, H, L, E)
        >>> _, w = attend(q, k, v, Causal(), return_weights=True)
        >>> fig = plot_attention(w, head=1, num_rows=5, num_cols=5)
        >>> image = fig.axes[0].images[0].get_array()
        >>> image.shape, bool(abs(image.sum(1) - 1).max() < 1e-5)
        ((5, 5), True)
    """
    matrix = _weights_matrix(weights, head=head, b=b, num_rows=num_rows, num_cols=num_cols)
    _check_not_empty(matrix.shape, "plot_attention", "weights with at least one query and one key")
    fig, ax = _figure_and_axes(ax, matrix.shape, colorbar=True)
    vmin = min(0.0, float(matrix.min()))  # weights are >= 0; show anything else honestly
    image = ax.imshow(matrix, cmap="viridis", vmin=vmin, interpolation="nearest", aspect="equal")
    _matrix_axes(ax, matrix.shape)
    fig.colorbar(image, ax=ax, label="weight $a_{ij}$")
    ax.set_title(f"head {head}, batch item {b}" if title is None else title, fontsize="medium")
    return fig


# -------------------------------------------------------------------------------- helpers


def _wrap(text: str, width: int = 40) -> str:
    """Break a long default title at spaces so it fits above a small image."""
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


def _check_mask(mask: object, where: str) -> None:
    if not isinstance(mask, Mask):
        raise TypeError(
            f"{where} needs an attnmm.masks.Mask, got {type(mask).__name__}; wrap a boolean pattern "
            "in a Mask (e.g. Graph for index pairs) or use plot_attention for a weight tensor"
        )


def _check_not_empty(shape: tuple[int, ...], where: str, fix: str) -> None:
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"{where} has nothing to draw: the matrix is L x S = {shape[0]} x {shape[1]}; pass {fix}")


def _check_index(name: str, value: object, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    index = int(value)
    if not 0 <= index < size:
        raise ValueError(f"{name} must be in [0, {size}) ({size} {what}), got {index}")
    return index


def _patch_index(mask: Mask, grid: tuple[int, int], patch: object) -> int:
    """Flat row-major index of ``patch`` (an int or a (row, column) pair) on the ``grid``, range-checked."""
    height, width = grid
    if isinstance(patch, tuple):
        if len(patch) != 2:
            raise ValueError(f"patch must be an int or a (row, column) pair, got {patch!r}")
        row = _check_index("patch row", patch[0], height, f"rows in {mask!r}")
        col = _check_index("patch column", patch[1], width, f"columns in {mask!r}")
        return row * width + col
    return _check_index("patch", patch, height * width, f"patches in {mask!r}")


def _weights_matrix(
    weights: Tensor | AttentionWeights, *, head: int, b: int, num_rows: int | None, num_cols: int | None
) -> np.ndarray:
    """One head's (L, S) weights as a float array."""
    if isinstance(weights, AttentionWeights):
        if num_rows is None:
            num_rows = int(weights.row.max()) + 1 if weights.row.numel() else 0
        if num_cols is None:
            num_cols = int(weights.col.max()) + 1 if weights.col.numel() else 0
        dense = weights.to_dense(num_rows, num_cols)  # (H, L, S) or (B, H, L, S)
    elif isinstance(weights, Tensor):
        dense = weights
        if dense.dim() not in (2, 3, 4):
            raise ValueError(
                "weights must be a tensor (L, S), (H, L, S) or (B, H, L, S), got rank "
                f"{dense.dim()} with shape {tuple(dense.shape)}"
            )
        sizes = (("num_rows", num_rows, dense.size(-2)), ("num_cols", num_cols, dense.size(-1)))
        for name, given, actual in sizes:
            if given is not None and given != actual:
                raise ValueError(
                    f"{name}={given} does not match the weights of shape {tuple(dense.shape)} "
                    f"(which have {actual}); leave it unset for dense weights"
                )
    else:
        raise TypeError(
            "weights must be a Tensor (L, S), (H, L, S), (B, H, L, S) or AttentionWeights, got "
            f"{type(weights).__name__}"
        )
    for name, value, rank, item, dim in (("b", b, 4, "batch item", "batch"), ("head", head, 3, "head", "head")):
        if dense.dim() == rank:  # (B, H, L, S), then (H, L, S)
            dense = dense[_check_index(name, value, dense.size(0), f"{item}s in the weights")]
        elif value != 0:
            _check_index(name, value, 1, f"{item}: weights of shape {tuple(dense.shape)} have no {dim} dim")
    return dense.detach().to("cpu", torch.float32).numpy()


def _figure_and_axes(ax: Axes | None, shape: tuple[int, ...], colorbar: bool = False) -> tuple[Figure, Axes]:
    """``ax`` and its root figure, or a new figure sized for an image of ``shape``."""
    if ax is not None:
        if not isinstance(ax, Axes):
            raise TypeError(f"ax must be a matplotlib Axes or None, got {type(ax).__name__}")
        fig = ax.figure
        while not isinstance(fig, Figure):  # a SubFigure's parent chain ends at the root Figure
            fig = fig.figure
        return fig, ax
    rows, cols = max(shape[0], 1), max(shape[1], 1)
    side = 4.0
    width, height = (side, side * rows / cols) if cols >= rows else (side * cols / rows, side)
    width, height = max(width, 2.5) + (1.0 if colorbar else 0.0), max(height, 2.0) + 0.4
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _matrix_axes(ax: Axes, shape: tuple[int, ...], always_lines: bool = False) -> None:
    """Label a matrix image ("key j" across, "query i" down), integer ticks, cell borders if small."""
    rows, cols = shape[0], shape[1]
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.xaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(nbins="auto", integer=True))
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    if always_lines or max(rows, cols) <= _MAX_GRIDLINES:
        ax.set_xticks(np.arange(-0.5, cols, 1.0), minor=True)
        ax.set_yticks(np.arange(-0.5, rows, 1.0), minor=True)
        ax.grid(which="minor", color="#bbbbbb", linewidth=0.5)
        ax.tick_params(which="minor", length=0)


__all__ = ["plot_attention", "plot_grid_neighbourhood", "plot_mask", "plot_masks"]
