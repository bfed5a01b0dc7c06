"""Render the figures of the docs with attnmm.viz: every mask picture and the gallery.

Usage::

    .venv/bin/python docs/make_figures.py            # writes docs/figures/*.png
    .venv/bin/python docs/make_figures.py --out DIR  # writes DIR/*.png
    .venv/bin/python docs/make_figures.py grid gallery  # only these two
    .venv/bin/python docs/make_figures.py --missing-only  # only those not written yet (the docs build)
    .venv/bin/python docs/make_figures.py --steps 2 --no-data trained_speech  # a fast smoke run

:data:`FIGURES` are pictures of masks (a second in all). :data:`TRAINED` are attention maps of recipe
models trained for a few deterministic steps (docs/trained_maps.py: on the real data under
``$ATTNMM_DATA`` when present, else on generated data; about a minute in all on one core).

The PNGs the pages link are committed (docs/figures/, small palette PNGs: :func:`save_png`), so the
Markdown reads with its pictures in a clone; run this script after a change to what a figure draws and
commit the result (tests/test_docs_figures.py checks that every image link of docs/ and the README
resolves to a committed file). ``mkdocs build`` renders any that are missing first (docs/hooks.py).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import matplotlib

matplotlib.use("Agg")

import torch
from matplotlib.figure import Figure

from attnmm.masks import Causal, Chunk, Documents, Full, Graph, Grid, Mask, Padding, Segments, Window
from attnmm.viz import plot_grid_neighbourhood, plot_mask, plot_masks

#: Sequence length of the single-mask figures.
L = 16

DOCS = Path(__file__).resolve().parent

#: A directed 8-node graph: a ring 0 -> 1 -> ... -> 7 -> 0 plus two chords into node 4.
RING = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 0, 2], [1, 2, 3, 4, 5, 6, 7, 0, 4, 4]])


#: 3 x 3 image patches, 4 audio frames and 3 text tokens; text attends everything, item 0 lacks audio.
SEGMENTS = Segments(
    [9, 4, 3],
    within=[Grid(3, 3, kernel=3), Window(1, 0), Causal()],
    links=[[True, False, False], [False, True, False], [True, True, True]],
    lengths=[[9, 0, 3]],
)


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


def _tutorial_mask() -> Figure:
    """The BigBird mask of docs/tutorials/custom_mask.md, defined by that page's first code block."""
    page = (DOCS / "tutorials" / "custom_mask.md").read_text()
    first = re.search(r"^```python\n(.*?)^```", page, re.DOTALL | re.MULTILINE)
    assert first is not None, "docs/tutorials/custom_mask.md has no python block"
    namespace: dict[str, object] = {"__name__": "custom_mask"}
    exec(compile(first.group(1), "docs/tutorials/custom_mask.md", "exec"), namespace)
    mask = namespace["BigBird"](num_blocks=16, block=4, window=1, num_global=1, num_random=2)  # type: ignore[operator]
    return plot_mask(mask, 64)


def _docs_module(name: str) -> ModuleType:
    """docs/<name>.py as a module (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _diagram(name: str) -> Callable[[], Figure]:
    """A figure of docs/diagrams.py: the pictures of the pages readers start from."""
    return lambda: _docs_module("diagrams").DIAGRAMS[name]()


def _trained_maps() -> ModuleType:
    """docs/trained_maps.py as a module."""
    return _docs_module("trained_maps")


def _rnn_figure(name: str) -> Callable[[], Figure]:
    """A figure of docs/rnn.md, drawn from the rnn_attention study's store."""

    def draw() -> Figure:
        if str(DOCS.parent) not in sys.path:
            sys.path.insert(0, str(DOCS.parent))  # the studies package of the repository
        from studies._runner import View
        from studies.rnn_attention import measure

        figures = measure.figures(View.load("rnn_attention").detail)
        if name not in figures:
            raise ValueError(f"{name}: no stored results to draw; run python -m studies rnn_attention measure first")
        return figures[name]

    return draw


def _speech_strings_cost() -> Figure:
    """Step time and memory by mask and string length (docs/recipes/speech.md), from the speech_strings
    study's store (``python -m studies speech_strings measure cost``)."""
    if str(DOCS.parent) not in sys.path:
        sys.path.insert(0, str(DOCS.parent))  # the studies package of the repository
    from benchmarks import mask_costs
    from studies._runner import View

    figures = mask_costs.figure(View.load("speech_strings").detail)
    if "speech_strings_cost" not in figures:
        raise ValueError("speech_strings_cost: no stored results; run python -m studies speech_strings measure cost")
    return figures["speech_strings_cost"]


def _sweep_store(task: str) -> dict:
    """The stored runs of the ``graph_masks_<task>`` study, as the sweep's figure reads them."""
    if str(DOCS.parent) not in sys.path:
        sys.path.insert(0, str(DOCS.parent))  # the studies package of the repository
    from studies._graphs import mask_sweep
    from studies._runner import View

    return mask_sweep.as_store(View.load(f"graph_masks_{task}"))


def _mask_sweeps() -> Figure:
    """The graph mask sweeps on Cora and the motif graphs, from their studies' stores."""
    from studies._graphs import mask_sweep

    return mask_sweep.figure([_sweep_store("cora"), _sweep_store("motifs")])


def _task_sweep(task: str) -> Figure:
    """The figure of one real-data graph mask sweep, from its study's store."""
    from studies._graphs import mask_sweep

    return mask_sweep.figure([_sweep_store(task)], anchors=True)


#: The real-data graph mask sweeps docs/graphs.md renders (studies/_graphs/mask_sweep.py's REAL_TASKS); a
#: figure for each one stored (its section links it once rendered from the same store).
_SWEEP_TASKS = ("actor", "proteins", "peptides")
_SWEEPS = {
    f"graph_mask_sweep_{task}": functools.partial(_task_sweep, task)
    for task in _SWEEP_TASKS
    if (DOCS.parent / "studies" / f"graph_masks_{task}" / "store.json").exists()
}


def _kws_confusion(names: tuple[str, ...] = ("transformer", "res8")) -> Callable[[], Figure]:
    """Confusion matrices of the keyword-spotting model and its CNN peer on unseen speakers
    (docs/recipes/speech.md), from the evaluations the kws study stored under ``names``."""

    def draw() -> Figure:
        if str(DOCS.parent) not in sys.path:
            sys.path.insert(0, str(DOCS.parent))  # the studies package of the repository
        from studies.kws import measure

        return measure.figure(measure.load_stores(names))

    return draw


def _fusion_conditions() -> Figure:
    """Accuracy per condition of the fused model and its peers (docs/recipes/multimodal.md), from the fusion
    study's store."""
    import json

    if str(DOCS.parent) not in sys.path:
        sys.path.insert(0, str(DOCS.parent))  # the studies package of the repository
    from studies import fusion

    return fusion.figure(json.loads(fusion.STORE.read_text()))


def _peptides_curves() -> Figure:
    """The Peptides-func study's recipe fits, epoch by epoch (validation AP, training loss), from its store."""
    if str(DOCS.parent) not in sys.path:
        sys.path.insert(0, str(DOCS.parent))  # the studies package of the repository
    from studies import peptides_field
    from studies._runner import View

    return peptides_field.figure(View.load("peptides_field"))


def _peptides_has_curves() -> bool:
    """Whether a selection record of the Peptides-func study holds its fit's epochs (else no figure)."""
    store = DOCS.parent / "studies" / "peptides_field" / "store.json"
    return store.exists() and '"history"' in store.read_text()


#: File stem -> figure factory. Every built-in mask, composed masks and Grid neighbourhoods; the
#: measurements of docs/rnn.md.
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
    "documents": _mask(Documents([5, 0, 3, 6]) & Causal()),
    "segments": _mask(SEGMENTS, b=0),
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
    "tutorial_bigbird": _tutorial_mask,
    "graph_mask_sweep": _mask_sweeps,
    **_SWEEPS,
    "rnn_parallel": _rnn_figure("rnn_parallel"),
    "rnn_longrange": _rnn_figure("rnn_longrange"),
    "rnn_streaming": _rnn_figure("rnn_streaming"),
    "speech_strings_cost": _speech_strings_cost,
    "kws_confusion": _kws_confusion(),
    "kws_confusion_split1": _kws_confusion(("conv_split1", "res8_split1")),  # the second keyword protocol
    "fusion_conditions": _fusion_conditions,
    **({"peptides_field_curves": _peptides_curves} if _peptides_has_curves() else {}),
    **{name: _diagram(name) for name in ("pipeline", "allowed_set", "layouts", "adapters", "graph_batch",
                                         "quickstart_grid_patch", "quickstart_weights")},
}

#: File stem -> name of the docs/trained_maps.py function drawing it, ``fn(steps, use_data) -> Figure``:
#: attention maps of briefly trained recipe models.
TRAINED: dict[str, str] = {"trained_speech": "speech", "trained_image": "image", "trained_text": "text"}


def save_png(fig: Figure, path: Path, dpi: int) -> None:
    """Save ``fig`` as a small PNG: an image of at most 256 colours (exact when it has no more, as a mask
    picture; else the nearest 256, which no reader tells apart in a plot) with a palette, compressed at
    the highest level. The figures are committed with the pages, so their size counts."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format="png")
    Image.open(buffer).convert("RGB").quantize(colors=256).save(path, format="PNG", optimize=True)


def make_figures(
    out_dir: str | Path,
    names: list[str] | None = None,
    dpi: int = 110,
    steps: int | None = None,
    use_data: bool = True,
    missing_only: bool = False,
) -> list[Path]:
    """Render the figures named ``names`` (default: all of :data:`FIGURES` and :data:`TRAINED`).

    Args:
        out_dir (str or Path): output folder, created if missing.
        names (list of str, optional): file stems to render. (default: all)
        dpi (int, optional): resolution of the PNGs. (default: :obj:`110`)
        steps (int, optional): training steps of the :data:`TRAINED` figures. (default: each
            function's own)
        use_data (bool, optional): train on the real data under ``$ATTNMM_DATA`` when present.
            (default: :obj:`True`)
        missing_only (bool, optional): skip figures whose PNG exists. (default: :obj:`False`)

    Returns:
        list of Path: the PNG files written.
    """
    valid = [*FIGURES, *TRAINED]
    names = valid if names is None else names
    unknown = sorted(set(names) - set(valid))
    if unknown:
        raise ValueError(f"unknown figure names {unknown}; valid names: {', '.join(valid)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        path = out / f"{name}.png"
        if missing_only and path.exists():
            continue
        if name in FIGURES:
            fig = FIGURES[name]()
        else:
            draw = getattr(_trained_maps(), TRAINED[name])
            fig = draw(use_data=use_data) if steps is None else draw(steps=steps, use_data=use_data)
        tmp = path.with_suffix(".tmp.png")
        save_png(fig, tmp, dpi)
        tmp.replace(path)  # a build that stops half-way leaves no truncated PNG behind
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "figures", help="output folder"
    )
    parser.add_argument("--dpi", type=int, default=110, help="resolution of the PNGs (default: 110)")
    parser.add_argument("--steps", type=int, default=None, help="training steps of the trained-model figures")
    parser.add_argument("--no-data", action="store_true", help="train on generated data even when $ATTNMM_DATA has it")
    parser.add_argument("--missing-only", action="store_true", help="render only the figures not written yet")
    parser.add_argument(
        "names", nargs="*", help=f"figures to render (default: all of {', '.join([*FIGURES, *TRAINED])})"
    )
    args = parser.parse_args(argv)
    paths = make_figures(args.out, args.names or None, args.dpi, args.steps, not args.no_data, args.missing_only)
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
