"""``python -m benchmarks.recipe_steps``: one training step of each recipe's model, Full vs its default mask.

The models are the recipes' (adapter + encoder + head, at the sizes of their configs) on generated
inputs of the real shapes; a step is forward, cross-entropy loss and backward, on one thread, in
training mode (dropout on). For each row the Full model and the restricted one (same weights where
they share them) step alternately; the table gives the median step time of each and the ratio
restricted / Full (below 1: the restricted mask is faster). Absolute times on a shared machine are
noise; ratios of alternated medians are what to read.

Rows:

- speech (recipes/configs/speech_truncated.yaml): SpeechAdapter(96, 40 mels) + Encoder(96, 4 heads,
  4 layers, ffn 192) + PoolingClassifier, batch 32 of clips padded to L frames; Full is
  ``Padding(lengths)`` alone, the restricted masks ``Padding & Window(16, 4)`` (the recipe's) and
  ``Padding & Chunk(8, 2)``. ``L=57`` has clip lengths drawn from 18 to 56 frames (the issue's
  measurement), ``L=20`` from 5 to 20 (a typical FSDD batch, whose clips are mostly under a second).
- image (recipes/configs/image_patches.yaml vs studies/recipe_runs/configs/image_patches_full.yaml):
  ImageAdapter (7 x 7 patches of 4 x 4) + Encoder(96, 4 heads, 4 layers, ffn 192) with a relative position
  bias + classifier, batch 128; ``Grid(7, 7, kernel=3)`` with offsets up to 1 vs Full with offsets up to 6.
- graph (recipes/configs/graph_graph.yaml): GraphAdapter (random-walk encodings, ``scope="graph"``)
  + GPSEncoder(64, 2 layers, 4 heads, GIN, shortest-path bias) + classifier, 32 motif graphs of
  ~25 nodes; the attention within each graph (``SameGraph(batch)``, the recipe's) vs one graph of
  all nodes (Full).

Speech and graph rows cycle through a few batches, so masks differ from step to step as in training.

Each row is measured twice in the same process: "before", with dispatch by the backends' declared
preference alone (the calibrated constants removed: what attnmm did before dispatch by cost, and
what an uncalibrated device still does: a band mask always goes to the band kernel), and "after",
with the calibrated cost model. ``python -m benchmarks`` runs this sweep and shows it in
docs/benchmarks.md (:func:`sweep`, :func:`markdown`).

Usage::

    python -m benchmarks.recipe_steps              # every row, 7 alternated samples of 3 steps
    python -m benchmarks.recipe_steps --rows speech --samples 11
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnmm.masks import Chunk, Grid, Mask, SameGraph, Window

Step = Callable[[], None]

#: Batches a row cycles through: as in training, masks built from a batch's lengths or graphs differ
#: from step to step (the image grid does not).
BATCHES = 4


def _speech(mask: Mask | None, max_samples: int, min_samples: int, seed: int = 0) -> Step:
    from attnmm.adapters import SpeechAdapter
    from attnmm.nn import Encoder, PoolingClassifier

    torch.manual_seed(seed)
    adapter = SpeechAdapter(d_model=96, sample_rate=8000, n_mels=40, channels=32, mask=mask, dropout=0.1)
    encoder = Encoder(d_model=96, num_heads=4, num_layers=4, dim_feedforward=192, dropout=0.1)
    head = PoolingClassifier(d_model=96, num_classes=10, dropout=0.1)
    g = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(BATCHES):  # batches of different clip lengths (the longest fixed: same L)
        lengths = torch.randint(min_samples, max_samples + 1, (32,), generator=g)
        lengths[0] = max_samples
        batches.append({"waveform": torch.randn(32, max_samples, generator=g) * 0.1, "lengths": lengths,
                        "label": torch.randint(0, 10, (32,), generator=g)})
    turn = iter(range(1 << 62))

    def step() -> None:
        batch = batches[next(turn) % BATCHES]
        tokens = adapter(batch)
        logits = head(encoder(tokens.x, tokens.mask), tokens)
        F.cross_entropy(logits, batch["label"]).backward()

    return _trained(step, adapter, encoder, head)


def _image(full: bool, seed: int = 0) -> Step:
    from attnmm.adapters import ImageAdapter
    from attnmm.nn import Encoder, PoolingClassifier, RelativePositionBias

    torch.manual_seed(seed)
    mask = None if full else Grid(7, 7, kernel=3)
    adapter = ImageAdapter(in_channels=1, patch_size=4, d_model=96, positional="sinusoidal", mask=mask,
                           normalize=(0.1307, 0.3081), dropout=0.0)
    bias = (RelativePositionBias(num_heads=4, max_offset=(6, 6), grid_size=(7, 7)) if full
            else RelativePositionBias(num_heads=4, max_offset=(1, 1)))
    encoder = Encoder(d_model=96, num_heads=4, num_layers=4, dim_feedforward=192, dropout=0.1, position_bias=bias)
    head = PoolingClassifier(d_model=96, num_classes=10, dropout=0.1)
    g = torch.Generator().manual_seed(1)
    batch = {"image": torch.rand(128, 1, 28, 28, generator=g), "label": torch.randint(0, 10, (128,), generator=g)}

    def step() -> None:
        tokens = adapter(batch)
        logits = head(encoder(tokens.x, tokens.mask), tokens)
        F.cross_entropy(logits, batch["label"]).backward()

    return _trained(step, adapter, encoder, head)


def _graph(full: bool, seed: int = 0) -> Step:
    from torch_geometric.data import Batch

    from attnmm.adapters import GraphAdapter
    from attnmm.data.graphs import motif_graphs
    from attnmm.nn import GPSEncoder, PoolingClassifier

    torch.manual_seed(seed)
    adapter = GraphAdapter(in_channels=1, d_model=64, pe="random_walk", pe_dim=8, scope="graph")
    encoder = GPSEncoder(d_model=64, num_layers=2, heads=4, local="gin", dropout=0.1, max_distance=4)
    head = PoolingClassifier(d_model=64, num_classes=2)
    batches = [Batch.from_data_list(motif_graphs(32, num_nodes=20, seed=1 + i)) for i in range(BATCHES)]
    turn = iter(range(1 << 62))

    def step() -> None:
        batch = batches[next(turn) % BATCHES]
        tokens = adapter(batch)
        mask = tokens.mask
        if full:  # every node attends every node: one graph of all nodes
            mask = SameGraph(torch.zeros_like(tokens.batch))
        logits = head(encoder(tokens.x, mask, tokens=tokens), tokens)
        F.cross_entropy(logits, batch.y).backward()

    return _trained(step, adapter, encoder, head)


def _trained(step: Step, *modules: nn.Module) -> Step:
    for m in modules:
        m.train()

    def run() -> None:
        for m in modules:
            m.zero_grad(set_to_none=True)
        step()

    return run


def _speech_rows(frames: int) -> list[tuple[str, Callable[[], Step], Callable[[], Step]]]:
    spans = {57: (6000, 18262), 20: (2000, 6800)}  # samples of the shortest and longest clip
    lo, hi = spans[frames]
    full = (lambda: _speech(None, hi, lo))  # noqa: E731
    return [
        (f"speech L={frames}", full, lambda: _speech(Window(16, 4), hi, lo)),
        (f"speech L={frames} chunk", full, lambda: _speech(Chunk(8, 2), hi, lo)),
    ]


ROWS: dict[str, Callable[[], list[tuple[str, Callable[[], Step], Callable[[], Step]]]]] = {
    "speech": lambda: _speech_rows(57) + _speech_rows(20),
    "image": lambda: [("image Grid(7, 7, 3)", lambda: _image(True), lambda: _image(False))],
    "graph": lambda: [("graph SameGraph", lambda: _graph(True), lambda: _graph(False))],
}


def measure(full: Step, restricted: Step, samples: int, steps: int) -> tuple[float, float, float]:
    """Median seconds per step of ``full`` and ``restricted`` (alternated, ``steps`` steps a sample)
    and the median of the per-sample ratios restricted / full."""
    for fn in (full, restricted, full, restricted):  # warm up caches and allocators
        fn()
    times: dict[str, list[float]] = {"full": [], "restricted": []}
    for s in range(samples):
        order = [("full", full), ("restricted", restricted)]
        for name, fn in order if s % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            for _ in range(steps):
                fn()
            times[name].append((time.perf_counter() - start) / steps)
    ratios = [r / f for f, r in zip(times["full"], times["restricted"])]
    return statistics.median(times["full"]), statistics.median(times["restricted"]), statistics.median(ratios)


#: Target of issue "fast in the real recipes": a restricted mask costs at most 5% more than Full.
SLOWER_AT_MOST = 1.05


@contextlib.contextmanager
def uncalibrated() -> Iterator[None]:
    """Dispatch without the calibrated constants (by declared preference), inside the block."""
    from attnmm.attention.backends import _calibration

    saved = _calibration.COSTS
    _calibration.COSTS = {}
    try:
        yield
    finally:
        _calibration.COSTS = saved


def sweep(rows: list[str] | None = None, samples: int = 7, steps: int = 3) -> list[dict[str, Any]]:
    """Every row before (:func:`uncalibrated`) and after (cost model), in one process, at the
    current torch threads; one dict per row with the medians in seconds and the ratios."""
    results = []
    for group in rows or list(ROWS):
        for label, make_full, make_restricted in ROWS[group]():
            row: dict[str, Any] = {"row": label}
            for when in ("before", "after"):
                with uncalibrated() if when == "before" else contextlib.nullcontext():
                    full, restricted, ratio = measure(make_full(), make_restricted(), samples, steps)
                row[when] = {"full_s": full, "restricted_s": restricted, "ratio": ratio}
            print(f"   {label}: before {row['before']['ratio']:.2f}, after {row['after']['ratio']:.2f}", flush=True)
            results.append(row)
    return results


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table of :func:`sweep`'s rows: step times and ratios before and after, and the verdict."""
    lines = [
        "| recipe model, mask | before: Full | before: mask | before: mask / Full | after: Full | after: mask "
        "| after: mask / Full | target: mask / Full <= 1.05 |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        b, a = r["before"], r["after"]
        met = "**yes**" if a["ratio"] <= SLOWER_AT_MOST else "no"
        lines.append(
            f"| {r['row']} | {b['full_s'] * 1e3:.1f} ms | {b['restricted_s'] * 1e3:.1f} ms | {b['ratio']:.2f} "
            f"| {a['full_s'] * 1e3:.1f} ms | {a['restricted_s'] * 1e3:.1f} ms | {a['ratio']:.2f} | {met} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = []
    print("| row | Full ms/step | restricted ms/step | restricted / Full |")
    print("|---|---:|---:|---:|")
    for group in args.rows:
        for label, make_full, make_restricted in ROWS[group]():
            full, restricted, ratio = measure(make_full(), make_restricted(), args.samples, args.steps)
            print(f"| {label} | {full * 1e3:.1f} | {restricted * 1e3:.1f} | {ratio:.2f} |", flush=True)
            results.append({"row": label, "full_s": full, "restricted_s": restricted, "ratio": ratio})
    return results


if __name__ == "__main__":
    main()
