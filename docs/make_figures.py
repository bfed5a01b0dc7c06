"""Render the mask figures of docs/masks.md with attnmm.viz.

Usage::

    .venv/bin/python docs/make_figures.py            # writes docs/figures/*.png
    .venv/bin/python docs/make_figures.py --out DIR  # writes DIR/*.png
    .venv/bin/python docs/make_figures.py grid gallery  # only these two

The PNGs are build outputs (docs/figures/ is git-ignored); the text pictures in docs/masks.md carry
the same information without them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import torch
from matplotlib.figure import Figure

from attnmm.masks import Causal, Chunk, Full, Graph, Grid, Mask, Padding, Window
from attnmm.viz import plot_grid_neighbourhood, plot_mask, plot_masks

#: Sequence length of the single-mask figures.
L = 16

#: A directed 8-node graph: a ring 0 -> 1 -> ... -> 7 -> 0 plus two chords into node 4.
RING = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 0, 2], [1, 2, 3, 4, 5, 6, 7, 0, 4, 4]])


def _mask(mask: Mask, num_rows: int = L, b: int = 0) -> Callable[[], Figure]:
    return lambda: plot_mask(mask, num_rows, b=b)


def _neighbourhoods(border: str, dilation: int = 1) -> Figure:
    """Corner, edge and interior patches of a 7 x 7 grid with a 3 x 3 kernel, side by side."""
    mask = Grid(7, 7, kernel=3, dilation=dilation, border=border)  # type: ignore[arg-type]
    fig = Figure(figsize=(10.5, 3.9), layout="constrained")
    for ax, patch in zip(fig.subplots(1, 3), [(0, 0), (0, 3), (3, 3)], strict=True):
        plot_grid_neighbourhood(mask, patch, ax=ax, title=f"patch {patch}")
    fig.suptitle(repr(mask))
    return fig


#: File stem -> figure factory. Every built-in mask, composed masks and Grid neighbourhoods.
FIGURES: dict[str, Callable[[], Figure]] = {
    "full": _mask(Full()),
    "causal": _mask(Causal()),
    "window": _mask(Window(3, 1)),
    "chunk": _mask(Chunk(4, 1)),
    "graph": _mask(Graph(RING, num_nodes=8), num_rows=8),
    "grid": _mask(Grid(4, 4, kernel=3)),
    "grid_shift": _mask(Grid(4, 4, kernel=3, border="shift")),
    "padding": _mask(Padding([10, 16]), b=0),
    "window_and_padding": _mask(Window(3, 1) & Padding([10, 16]), b=0),
    "window_or_chunk": _mask(Window(2, 0) | Chunk(4, 0)),
    "not_window": _mask(~Window(3, 1)),
    "grid_neighbourhood_truncate": lambda: _neighbourhoods("truncate"),
    "grid_neighbourhood_shift": lambda: _neighbourhoods("shift"),
    "grid_neighbourhood_dilation": lambda: _neighbourhoods("truncate", dilation=2),
    "gallery": lambda: plot_masks(
        {
            "Full()": Full(),
            "Causal()": Causal(),
            "Window(3, 1)": Window(3, 1),
            "Chunk(4, 1)": Chunk(4, 1),
            "Grid(4, 4, kernel=3)": Grid(4, 4, kernel=3),
            "Padding([10, 16]), b=0": Padding([10, 16]),
            "Window(3, 1) & Padding": Window(3, 1) & Padding([10, 16]),
            "~Window(3, 1)": ~Window(3, 1),
        },
        L,
    ),
}


def make_figures(out_dir: str | Path, names: list[str] | None = None, dpi: int = 110) -> list[Path]:
    """Render the figures named ``names`` (default: all of :data:`FIGURES`) into ``out_dir``.

    Args:
        out_dir (str or Path): output folder, created if missing.
        names (list of str, optional): file stems to render. (default: all)
        dpi (int, optional): resolution of the PNGs. (default: :obj:`110`)

    Returns:
        list of Path: the PNG files written.
    """
    names = list(FIGURES) if names is None else names
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        raise ValueError(f"unknown figure names {unknown}; valid names: {', '.join(FIGURES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        path = out / f"{name}.png"
        FIGURES[name]().savefig(path, dpi=dpi)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "figures", help="output folder"
    )
    parser.add_argument("--dpi", type=int, default=110, help="resolution of the PNGs (default: 110)")
    parser.add_argument("names", nargs="*", help=f"figures to render (default: all of {', '.join(FIGURES)})")
    args = parser.parse_args(argv)
    for path in make_figures(args.out, args.names or None, args.dpi):
        print(path)


if __name__ == "__main__":
    main()
