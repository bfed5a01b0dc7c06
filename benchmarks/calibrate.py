"""``python -m benchmarks.calibrate``: fit the dispatcher's cost model and write its constants.

Every registered backend that describes its work (``cost_terms``) is timed through
:func:`attnmm.attend` (``backend=`` forced) on a fixed set of problems it supports: padded batches
from recipe sizes (B = 32, L = 20 speech clips; 7 x 7 image patches; long sequences) under Full,
Padding, Window, Chunk and sparse compositions, packed causal documents of 128 to 2,048 tokens (long
rows: the sparse kernel's time per pair grows with the keys per query), and packed graphs of many
small graphs, in each mode
of the cost model (training: forward + backward; inference; both with dropout). Each backend's
constants are the non-negative least-squares fit, in relative error, of

    t = c_0 + sum_k c_k x_k

to its measured times (FlexAttention, CPU inference only: each problem timed with its block mask
cached and rebuilt per call, and its compilation timed apart, on fresh compilations), and are
written to ``attnmm/attention/backends/_calibration.py`` (the one place the code reads them) under
the device type. Run it on an otherwise idle machine, with the
thread count training uses (``--threads``, default 1, the recipes' setting), after changing a
backend; it takes a few minutes on CPU.

On a GPU (``--device cuda``) each call is timed between CUDA synchronisations, FlexAttention in
training too (it compiles a backward there), and ``--dtype bf16`` calibrates half precision: its
constants go under the modes ending in ``"+half"``, which dispatch reads for float16 and bfloat16
problems on that device (as under ``bf16-mixed`` autocast). Each run merges what it fitted into the
constants already written, backend by backend as each is fitted (a run stopped midway keeps what it
fitted), so the CPU, the GPU in float32 and in bf16 are calibrated by separate runs.

Usage::

    python -m benchmarks.calibrate                 # CPU, 1 thread, writes the constants
    python -m benchmarks.calibrate --dry-run       # print the fit only
    python -m benchmarks.calibrate --device cuda --budget 0.02 && \
        python -m benchmarks.calibrate --device cuda --dtype bf16 --budget 0.02   # a GPU, both precisions
"""

from __future__ import annotations

import argparse
import pprint
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import nnls

from attnmm import attend
from attnmm.attention.backends import _calibration, _cost, flex, get_backend, list_backends
from attnmm.attention.forms import Forms
from attnmm.attention.planner import forms_of
from attnmm.attention.problem import Problem
from attnmm.masks import Causal, Chunk, Documents, Full, Graph, Grid, Mask, Padding, Window

OUTPUT = Path(_calibration.__file__)

#: Skip a problem when a backend would handle more than this many scores (slow and uninformative).
MAX_SCORES = 1 << 23


def _lengths(b: int, n: int) -> list[int]:
    """``b`` lengths spread from about a third of ``n`` to ``n`` (as in a batch of clips)."""
    return torch.linspace(max(1, n // 3), n, b).long().tolist()


def _blocks(sizes: list[int]) -> Graph:
    """All pairs within each block of ``sizes`` nodes (a batch of small graphs, attention per graph)."""
    edges, start = [], 0
    for n in sizes:
        idx = torch.arange(start, start + n)
        edges.append(torch.cartesian_prod(idx, idx).T)
        start += n
    return Graph(torch.cat(edges, 1), start)


MaskFactory = Callable[[int, int], "Mask | None"]

#: (B, H, L, E) of the padded problems.
SIZES = [(32, 4, 20, 24), (32, 4, 57, 24), (128, 4, 49, 24), (8, 4, 128, 32), (4, 4, 256, 16), (2, 4, 512, 64),
         (1, 4, 2048, 64), (64, 2, 12, 8)]

#: Masks of the padded problems: (batch size, length) -> mask.
MASKS: dict[str, MaskFactory] = {
    "none": lambda b, n: None,
    "causal": lambda b, n: Causal(),
    "padding": lambda b, n: Padding(_lengths(b, n)),
    "window": lambda b, n: Window(16, 4) & Padding(_lengths(b, n)),
    "narrow": lambda b, n: Window(2, 2),
    "wide": lambda b, n: Window(64, 64) & Padding(_lengths(b, n)),
    "chunk": lambda b, n: Chunk(8, 2) & Padding(_lengths(b, n)),
    "causal-padding": lambda b, n: Causal() & Padding(_lengths(b, n)),
    "union": lambda b, n: (Window(1, 1) | Window(n // 2, 0)) & Padding(_lengths(b, n)),
}

#: Packed graph problems: (graph sizes, H, E).
GRAPHS = [([25] * 32, 4, 16), ([800], 4, 16), ([40] * 64, 4, 32), ([200] * 4, 8, 8)]

#: Packed causal documents, ``Documents([n] * (L // n)) & Causal()``: (L, n, H, E); from 128 to 2,048
#: tokens, up to L = 32,768, where the sparse kernel's time per pair grows with the keys per query
#: (at L = 4,096 it hardly does).
DOCUMENTS = [(8192, 128, 2, 64), (8192, 512, 2, 64), (32768, 128, 2, 64), (32768, 512, 2, 64),
             (16384, 1024, 2, 64), (8192, 2048, 2, 64)]


def problems(
    device: str = "cpu", dtype: torch.dtype = torch.float32
) -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, Mask | None]]:
    found = []
    g = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:  # drawn on the CPU (the same numbers on any device), then moved
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    for B, H, L, E in SIZES:
        # laid out as MultiHeadAttention passes them: (B, L, H, E) memory seen as (B, H, L, E)
        q, k, v = (randn(B, L, H, E).transpose(1, 2) for _ in range(3))
        for name, make in MASKS.items():
            found.append((f"{name} B={B} H={H} L={L} E={E}", q, k, v, make(B, L)))
        if L == 49:
            found.append((f"grid B={B} L=49", q, k, v, Grid(7, 7, kernel=3)))
    for sizes, H, E in GRAPHS:
        N = sum(sizes)
        q, k, v = (randn(N, H, E) for _ in range(3))
        found.append((f"graphs {len(sizes)}x{sizes[0]} H={H} E={E}", q, k, v, _blocks(sizes)))
        found.append((f"full packed N={N} H={H} E={E}", q, k, v, Full()))
    for L, n, H, E in DOCUMENTS:
        q, k, v = (randn(1, H, L, E) for _ in range(3))
        found.append((f"documents {L // n}x{n} H={H} E={E}", q, k, v, Documents([n] * (L // n)) & Causal()))
    return found


def _problem(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Mask | None, how: str) -> tuple[Problem, Forms]:
    """The Problem attend builds for these inputs (padded view of packed ones), and its mask's forms."""
    packed = q.dim() == 3
    if packed:
        q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    problem = Problem.of(q, k, v, mask, scale=q.size(-1) ** -0.5, dropout_p=0.1 if "dropout" in how else 0.0,
                         score="softmax", bias=None, return_weights=False, packed=packed)
    return problem, forms_of(problem)


def _synchronised(fn: Callable[[], object], device: str) -> Callable[[], object]:
    """``fn``, returning once the device has finished its work (a GPU's kernels run asynchronously)."""
    if device == "cpu":
        return fn

    def call() -> None:
        fn()
        torch.cuda.synchronize()

    return call


def _time(fn: Callable[[], object], budget: float, device: str = "cpu") -> float:
    """Median seconds of ``fn`` over calls filling about ``budget`` seconds (at least 3)."""
    fn = _synchronised(fn, device)
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    times = []
    for _ in range(max(3, min(25, int(budget / max(once, 1e-6))))):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(
    name: str, how: str, budget: float, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> list[tuple[str, tuple[float, ...], float]]:
    """(label, cost terms, seconds) of backend ``name`` in mode ``how`` on every problem it supports, on
    ``device`` in ``dtype``."""
    backend = get_backend(name)
    rows = []
    for label, q, k, v, mask in problems(device, dtype):
        training = how.startswith("train")
        leaves = [t.detach().requires_grad_(training) for t in (q, k, v)]
        problem, forms = _problem(*leaves, mask, how)
        with torch.set_grad_enabled(training):
            if backend.unsupported(problem, forms) is not None:
                continue
            terms = backend.cost_terms(problem, forms)
        if terms is None:
            continue
        scale = problem.B * problem.H * problem.L * problem.S
        if backend.materialises and scale > MAX_SCORES:
            continue
        if name == "sparse" and terms[1] > 4 * MAX_SCORES:  # its work is the pairs (times H)
            continue
        dropout = problem.dropout_p

        def call(
            leaves: list[torch.Tensor] = leaves, mask: Mask | None = mask, dropout: float = dropout,
            training: bool = training,
        ) -> None:
            with torch.set_grad_enabled(training):
                layout = "packed" if leaves[0].dim() == 3 else None  # (N, H, E) nodes, under Full() too
                out = attend(*leaves, mask, dropout_p=dropout, backend=name, layout=layout)
                if training:
                    out.sum().backward()

        seconds = _time(call, budget, device)
        if name == "flex":  # its terms count what is not cached or compiled yet: after the calls, nothing
            with torch.set_grad_enabled(training):
                terms = backend.cost_terms(problem, forms)
        rows.append((label, terms, seconds))
        if name == "flex" and problem.L * problem.S <= MAX_SCORES:
            # the same call with its block mask rebuilt every time (a new mask per batch)
            flex.block_masks_clear()
            with torch.set_grad_enabled(training):
                rebuilt = backend.cost_terms(problem, forms)

            def fresh(call: Callable[[], None] = call) -> None:
                flex.block_masks_clear()
                call()

            rows.append((f"{label}, block mask rebuilt", rebuilt, _time(fresh, budget, device)))
    return rows


def compile_seconds(
    budget: float, device: str = "cpu", dtype: torch.dtype = torch.float32, training: bool = False
) -> float:
    """Seconds the first FlexAttention call of a process spends beyond a compiled one (its
    compilation), on a small problem; the median of three fresh compilations."""
    q, k, v = (torch.randn(1, 2, 256, 32).to(device=device, dtype=dtype).requires_grad_(training) for _ in range(3))
    mask = Window(16, 16)

    def call() -> None:
        with torch.set_grad_enabled(training):
            out = attend(q, k, v, mask, backend="flex")
            if training:
                out.sum().backward()

    timed = _synchronised(call, device)
    seconds = []
    for _ in range(3):
        flex.reset_compiled()
        start = time.perf_counter()
        timed()
        seconds.append(time.perf_counter() - start)
    return max(0.0, statistics.median(seconds) - _time(call, budget, device))


def fit(rows: list[tuple[str, tuple[float, ...], float]]) -> tuple[tuple[float, ...], float]:
    """Non-negative constants (c_0, c_1, ...) minimising the relative error, and the median relative error."""
    x = np.array([[1.0, *(t * _cost.UNIT for t in terms)] for _, terms, _ in rows])
    t = np.array([s for _, _, s in rows])
    c, _ = nnls(x / t[:, None], np.ones_like(t))
    error = np.abs(x @ c - t) / t
    return tuple(float(f"{ci:.4g}") for ci in c), float(np.median(error))


def written() -> _calibration.Costs:
    """The constants as the file holds them now (another run may have written it since this one began)."""
    namespace: dict[str, object] = {}
    exec(compile(OUTPUT.read_text(), str(OUTPUT), "exec"), namespace)
    return namespace["COSTS"]  # type: ignore[return-value]


def merged(
    costs: _calibration.Costs, device: str, fitted: dict[str, dict[str, tuple[float, ...]]]
) -> _calibration.Costs:
    """``costs`` with the modes ``fitted`` on ``device`` replaced (the other modes, backends and devices kept)."""
    out = {d: {b: dict(modes) for b, modes in backends.items()} for d, backends in costs.items()}
    for name, modes in fitted.items():
        out.setdefault(device, {}).setdefault(name, {}).update(modes)
    return out


def write(costs: dict[str, dict[str, dict[str, tuple[float, ...]]]]) -> None:
    body = pprint.pformat(costs, width=100, sort_dicts=True)  # + the 14 characters before it: within 120
    OUTPUT.write_text(
        '"""Calibrated constants of the cost model (:mod:`attnmm.attention.backends._cost`).\n\n'
        'Generated by ``python -m benchmarks.calibrate``; do not edit by hand.\n"""\n\n'
        "Costs = dict[str, dict[str, dict[str, tuple[float, ...]]]]\n\n"
        "#: device -> backend -> mode -> (c_0 seconds, c_1 ... seconds per million of each cost term)\n"
        f"COSTS: Costs = {body}\n"
    )


def main(argv: list[str] | None = None) -> dict[str, dict[str, tuple[float, ...]]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget", type=float, default=0.05, help="seconds of timed calls per problem")
    parser.add_argument("--backends", nargs="*", default=None)
    parser.add_argument("--modes", nargs="*", default=list(_cost.MODES), choices=list(_cost.MODES))
    parser.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--dtype", choices=["fp32", "bf16"], default="fp32", help='bf16: the half-precision constants ("+half" modes)'
    )
    args = parser.parse_args(argv)
    device, dtype = args.device, {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if device == "cpu" and dtype != torch.float32:
        parser.error("--dtype bf16 is for a GPU: on the CPU the backends compute in float32")
    suffix = _cost.HALF if dtype != torch.float32 else ""
    torch.set_num_threads(args.threads)
    # every problem's mask family compiles a FlexAttention kernel of its own: more than a model makes
    flex.RECOMPILE_LIMIT = max(flex.RECOMPILE_LIMIT, 1024)
    fitted: dict[str, dict[str, tuple[float, ...]]] = {}
    for name in args.backends or list_backends():
        backend = get_backend(name)
        if backend.available() is not None or (backend.supports.devices and device not in backend.supports.devices):
            continue
        for how in args.modes:
            rows = measure(name, how, args.budget, device, dtype)
            if len(rows) < 4:
                continue
            constants, error = fit(rows)
            if name == "flex":  # its last term counts a compilation not yet done: its constant is measured
                compiling = compile_seconds(args.budget, device, dtype, how.startswith("train"))
                constants = (*constants[:-1], float(f"{compiling:.4g}"))
            fitted.setdefault(name, {})[how + suffix] = constants
            print(f"{name:10s} {how + suffix:19s} {len(rows):3d} problems, median error {error:.0%}: {constants}",
                  flush=True)
        if name in fitted and not args.dry_run:  # each backend's constants as soon as they are fitted
            write(merged(written(), device, {name: fitted[name]}))
            print(f"wrote {name}'s constants to {OUTPUT}", flush=True)
    return fitted


if __name__ == "__main__":
    main()
