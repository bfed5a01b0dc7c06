"""Tests of attnmm.viz: the images equal the masks and weights they draw."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnmm import attend
from attnmm.attention import AttentionWeights
from attnmm.masks import Causal, Chunk, Full, Graph, Grid, Padding, Window
from attnmm.viz import plot_attention, plot_grid_neighbourhood, plot_mask, plot_masks


def _image(fig: Figure, axes: int = 0) -> np.ndarray:
    return np.asarray(fig.axes[axes].images[0].get_array())


MASKS = {
    "Full": (Full(), 5, 7),
    "Causal": (Causal(), 6, 6),
    "Window": (Window(2, 1), 9, 9),
    "Chunk": (Chunk(3, 1), 10, 10),
    "Graph": (Graph(torch.tensor([[0, 1, 2, 3, 3], [1, 2, 0, 0, 4]]), 5), 5, 5),
    "Grid": (Grid(3, 4, kernel=3, dilation=1), 12, 12),
    "Window & Padding": (Window(1, 1) & Padding([4, 6]), 6, 6),
    "~Causal | Window": (~Causal() | Window(1, 0), 6, 8),
}


@pytest.mark.parametrize("name", list(MASKS))
def test_plot_mask_image_is_the_dense_mask(name: str) -> None:
    mask, L, S = MASKS[name]
    fig = plot_mask(mask, L, S)
    assert isinstance(fig, Figure)
    dense = mask.dense(L, S)
    expected = dense[0] if dense.dim() == 3 else dense
    np.testing.assert_array_equal(_image(fig), expected.numpy().astype(np.uint8))
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("key j", "query i")
    assert ax.get_title().replace("\n", " ") == repr(mask)  # long titles are wrapped
    fig.savefig(io.BytesIO(), format="png")  # renders under Agg


def test_plot_mask_batch_item_and_title() -> None:
    mask = Padding([2, 5, 3])
    fig = plot_mask(mask, 4, 6, b=1, title="item 1")
    np.testing.assert_array_equal(_image(fig), mask.dense(4, 6)[1].numpy().astype(np.uint8))
    assert fig.axes[0].get_title() == "item 1"


def test_plot_mask_into_given_axes() -> None:
    fig = Figure()
    left, right = fig.subplots(1, 2)
    assert plot_mask(Causal(), 3, ax=right) is fig
    assert not left.images and len(right.images) == 1
    sub = Figure().subfigures(1, 2)[1]
    ax = sub.add_subplot()
    assert plot_mask(Causal(), 3, ax=ax) is sub.figure


def test_plot_mask_errors() -> None:
    with pytest.raises(TypeError, match=r"needs an attnmm\.masks\.Mask, got Tensor"):
        plot_mask(torch.ones(3, 3, dtype=torch.bool), 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"b must be in \[0, 2\).*got 2"):
        plot_mask(Padding([1, 2]), 2, b=2)
    with pytest.raises(ValueError, match=r"b must be in \[0, 1\).*not batched"):
        plot_mask(Causal(), 2, b=1)
    with pytest.raises(ValueError, match="needs L = S = height \\* width = 4"):
        plot_mask(Grid(2, 2, kernel=1), 5)
    with pytest.raises(ValueError, match="nothing to draw: the matrix is L x S = 3 x 0"):
        plot_mask(Causal(), 3, 0)
    with pytest.raises(TypeError, match="ax must be a matplotlib Axes"):
        plot_mask(Causal(), 2, ax="left")  # type: ignore[arg-type]


def test_plot_masks_gallery() -> None:
    masks = {"causal": Causal(), "window": Window(1, 0), "chunk": Chunk(2, 0)}
    fig = plot_masks(masks, 4, columns=2)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == list(masks)
    assert len(fig.axes) == 4 and not fig.axes[3].get_visible()
    for ax, mask in zip(visible, masks.values(), strict=True):
        np.testing.assert_array_equal(ax.images[0].get_array(), mask.dense(4).numpy().astype(np.uint8))
    with pytest.raises(ValueError, match="non-empty dict"):
        plot_masks({}, 4)
    with pytest.raises(TypeError, match="entry 'x'"):
        plot_masks({"x": "causal"}, 4)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="columns must be an int >= 1, got 0"):
        plot_masks(masks, 4, columns=0)


@pytest.mark.parametrize("border", ["truncate", "shift"])
@pytest.mark.parametrize("patch", [0, 5, 13, 23])
def test_grid_neighbourhood_marks_exactly_the_allowed_patches(border: str, patch: int) -> None:
    mask = Grid(4, 6, kernel=3, dilation=1, border=border)  # type: ignore[arg-type]
    fig = plot_grid_neighbourhood(mask, patch)
    cells = _image(fig)
    assert cells.shape == (4, 6)
    allowed = mask.dense(24)[patch].view(4, 6).numpy()
    np.testing.assert_array_equal(cells > 0, allowed)
    assert list(zip(*np.nonzero(cells == 2), strict=True)) == [divmod(patch, 6)]
    assert f"|A(i)| = {int(allowed.sum())}" in fig.axes[0].get_title()


def test_grid_neighbourhood_shift_keeps_kernel_squared_keys_at_the_corner() -> None:
    truncate = _image(plot_grid_neighbourhood(Grid(5, 5, kernel=3), (0, 0)))
    shift = _image(plot_grid_neighbourhood(Grid(5, 5, kernel=3, border="shift"), (0, 0)))
    assert (truncate > 0).sum() == 4 and (shift > 0).sum() == 9


def test_grid_neighbourhood_dilation_and_row_col_patch() -> None:
    mask = Grid(5, 5, kernel=3, dilation=2)
    cells = _image(plot_grid_neighbourhood(mask, (2, 2)))
    np.testing.assert_array_equal(cells > 0, mask.dense(25)[12].view(5, 5).numpy())
    assert (cells > 0).sum() == 9 and cells[2, 2] == 2 and cells[0, 0] == 1 and cells[1, 1] == 0


def test_grid_neighbourhood_of_a_composed_mask() -> None:
    """Any mask over a patch grid draws: the plot asks the mask for its grid, not for its class."""
    mask = Grid(4, 4, kernel=3) & Window(5, 0)  # a 3 x 3 neighbourhood, and no later patch
    cells = _image(plot_grid_neighbourhood(mask, 5))
    np.testing.assert_array_equal(cells > 0, mask.dense(16)[5].view(4, 4).numpy())


def test_grid_neighbourhood_errors() -> None:
    with pytest.raises(TypeError, match=r"needs a mask over a patch grid.*got Window"):
        plot_grid_neighbourhood(Window(1, 1), 0)
    grid = Grid(3, 4, kernel=3)
    with pytest.raises(ValueError, match=r"patch must be in \[0, 12\).*got 12"):
        plot_grid_neighbourhood(grid, 12)
    with pytest.raises(ValueError, match=r"patch row must be in \[0, 3\).*got 3"):
        plot_grid_neighbourhood(grid, (3, 0))
    with pytest.raises(ValueError, match=r"patch column must be in \[0, 4\).*got -1"):
        plot_grid_neighbourhood(grid, (0, -1))
    with pytest.raises(ValueError, match=r"\(row, column\) pair, got \(1, 2, 3\)"):
        plot_grid_neighbourhood(grid, (1, 2, 3))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="patch must be an int, got float"):
        plot_grid_neighbourhood(grid, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(5, 7), (3, 5, 7), (2, 3, 5, 7)])
def test_plot_attention_dense_ranks(shape: tuple[int, ...]) -> None:
    weights = torch.rand(shape)
    head = 2 if len(shape) >= 3 else 0
    b = 1 if len(shape) == 4 else 0
    fig = plot_attention(weights, head=head, b=b)
    expected = weights[(b, head) if len(shape) == 4 else (head,) if len(shape) == 3 else ()]
    np.testing.assert_allclose(_image(fig), expected.numpy())
    assert len(fig.axes) == 2  # the heat map and its colour bar
    assert fig.axes[0].get_title() == f"head {head}, batch item {b}"


def test_plot_attention_sparse_equals_dense() -> None:
    torch.manual_seed(0)
    q = k = v = torch.randn(2, 3, 6, 4, requires_grad=True)  # (B, H, L, E)
    mask = Window(1, 1) & Padding([6, 4])
    _, w = attend(q, k, v, mask, return_weights=True)
    dense = w.to_dense(6, 6, 2)  # (B, H, L, S)
    fig = plot_attention(w, head=2, b=1, num_rows=6, num_cols=6)
    np.testing.assert_allclose(_image(fig), dense[1, 2].detach().numpy())
    np.testing.assert_allclose(_image(plot_attention(dense, head=2, b=1)), _image(fig))


def test_plot_attention_packed_weights_infer_sizes() -> None:
    graph = Graph(torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]]), 3)
    x = torch.randn(3, 2, 4)  # (N, H, E)
    _, w = attend(x, x, x, graph, return_weights=True)
    image = _image(plot_attention(w, head=1))
    np.testing.assert_allclose(image, w.to_dense(3, 3)[1].numpy())
    assert image.shape == (3, 3)
    np.testing.assert_array_equal(image > 0, graph.dense(3).numpy())


def test_plot_attention_errors() -> None:
    with pytest.raises(ValueError, match=r"rank 1 with shape \(4,\)"):
        plot_attention(torch.rand(4))
    with pytest.raises(ValueError, match=r"rank 5"):
        plot_attention(torch.rand(1, 1, 1, 2, 2))
    with pytest.raises(ValueError, match=r"head must be in \[0, 3\).*got 3"):
        plot_attention(torch.rand(3, 4, 4), head=3)
    with pytest.raises(ValueError, match=r"b must be in \[0, 2\).*got 5"):
        plot_attention(torch.rand(2, 3, 4, 4), b=5)
    with pytest.raises(ValueError, match="have no head dim"):
        plot_attention(torch.rand(4, 4), head=1)
    with pytest.raises(ValueError, match="num_rows=5 does not match"):
        plot_attention(torch.rand(4, 4), num_rows=5)
    with pytest.raises(TypeError, match="got ndarray"):
        plot_attention(np.ones((2, 2)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nothing to draw: the matrix is L x S = 0 x 3"):
        plot_attention(torch.zeros(0, 3))
    w = AttentionWeights(None, torch.tensor([0, 1]), torch.tensor([0, 0]), torch.rand(2, 1))
    with pytest.raises(ValueError, match=r"head must be in \[0, 1\)"):
        plot_attention(w, head=1)
