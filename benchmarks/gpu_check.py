"""``python -m benchmarks.gpu_check``: every backend on CUDA against the reference, then the table.

Meant to run unattended in a few minutes on one GPU: each step is wrapped so a failure is printed
with its traceback and the script goes on; the exit code is 1 if any check failed. Part 1 compares
every registered backend that accepts the problem with the reference (fp32 and bf16; values and
gradients). Part 2 times the benchmark cases on the GPU (forward + backward unless noted) against
dense masked SDPA, FlexAttention and the TransformerConv formulation, with CUDA events and
``torch.cuda.max_memory_allocated`` for peak memory.

A run's logs are its store: ``bash benchmarks/gpu_recipes_check.sh`` writes them (``cuda_tests.log``,
``gpu_check_part1_*.log``, ``gpu_check_part2.log``) and they are committed as they are, in a folder of
``benchmarks/results/``; ``python -m benchmarks.gpu_check --render FOLDER`` writes the table of
docs/robustness.md from such a folder alone.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from attnmm import attend
from attnmm.attention.backends import list_backends
from attnmm.masks import Causal, Chunk, Documents, Full, Graph, Grid, Mask, Padding, Segments, Window

FAILURES: list[str] = []


def step(name: str, fn: Callable[[], object]) -> object:
    print(f"-- {name}", flush=True)
    try:
        return fn()
    except Exception as err:
        traceback.print_exc()
        FAILURES.append(f"{name}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        return None


# ------------------------------------------------------------------ part 1: oracle checks

TOL = {torch.float32: dict(atol=2e-3, rtol=2e-3), torch.bfloat16: dict(atol=5e-2, rtol=5e-2)}


def check_backends(mask: Mask | None, batch: int, n_q: int, n_k: int, dtype: torch.dtype, packed: bool = False) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    shape_q, shape_k = ((n_q, 2, 32), (n_k, 2, 32)) if packed else ((batch, 2, n_q, 32), (batch, 2, n_k, 32))
    q = torch.randn(shape_q, device="cuda", generator=g).to(dtype).requires_grad_(True)
    k, v = (torch.randn(shape_k, device="cuda", generator=g).to(dtype).requires_grad_(True) for _ in range(2))
    ref = attend(q, k, v, mask, backend="reference")
    go = torch.randn(ref.shape, device="cuda", generator=g).to(dtype)
    ref_grads = torch.autograd.grad(ref, (q, k, v), go)
    for name in list_backends():
        if name == "reference":
            continue
        try:
            out = attend(q, k, v, mask, backend=name)
        except ValueError as err:
            if "cannot compute this attention" in str(err):
                continue
            raise
        torch.testing.assert_close(out, ref, **TOL[dtype], msg=lambda m, n=name: f"{n} output: {m}")
        for a, b, which in zip(torch.autograd.grad(out, (q, k, v), go), ref_grads, "qkv"):
            torch.testing.assert_close(a, b, **TOL[dtype], msg=lambda m, n=name, w=which: f"{n} grad {w}: {m}")
        auto = attend(q, k, v, mask)
        torch.testing.assert_close(auto, ref, **TOL[dtype])
        print(f"   {name:10s} ok ({mask!r}, {dtype})", flush=True)


def part1(dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16), shard: tuple[int, int] = (0, 1)) -> None:
    print("== part 1: backends against the reference on CUDA", flush=True)
    edge_index = torch.randint(0, 300, (2, 3000), device="cuda")
    cases: list[tuple[Mask | None, int, int, int, bool]] = [
        (None, 2, 300, 300, False),
        (Causal(), 2, 300, 300, False),
        (Window(16, 16), 2, 300, 300, False),
        (Window(32, 0) & Padding(torch.tensor([300, 0])), 2, 300, 300, False),
        (Chunk(32, 1), 2, 300, 200, False),
        (Causal() & Padding(torch.tensor([300, 77])), 2, 300, 300, False),
        (Full() & Padding(torch.tensor([300, 0])), 2, 300, 300, False),
        (Grid(16, 16, 5, dilation=2), 2, 256, 256, False),
        (Grid(16, 16, 3, border="shift") & Padding(torch.tensor([256, 100])), 2, 256, 256, False),
        (Graph(edge_index, 300), 1, 300, 300, True),
        # segmented sequences and packed documents (the segments backend, and flex on CUDA)
        (Segments([100, 120, 16], within=[Window(8, 8), Causal(), None], links="full",
                  lengths=[[100, 120, 16], [60, 0, 16]]), 2, 236, 236, False),
        (Segments([64, 100, 4], within=[Grid(8, 8, 3), Chunk(10, 1), None],
                  links=[[True, False, True], [False, True, True], [True, True, True]]), 2, 168, 168, False),
        (Documents([100, 0, 150, 50]) & Causal(), 2, 300, 300, False),
        (Documents([120, 180]) & Window(16, 0), 2, 300, 300, False),
    ]
    index, count = shard
    for dtype in dtypes:
        for mask, *sizes, packed in cases[index::count]:
            step(f"{mask!r} {dtype}", lambda m=mask, s=sizes, d=dtype, p=packed: check_backends(m, *s, d, p))


# ------------------------------------------------------------------ part 2: the table on the GPU


def gpu_time(fn: Callable[[], object], rounds: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def gpu_peak(fn: Callable[[], object]) -> int:
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def qkv(*shape: int, dtype: torch.dtype = torch.float32) -> tuple[Tensor, ...]:
    return tuple(torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))


def train(fn: Callable[[Tensor, Tensor, Tensor], Tensor], q: Tensor, k: Tensor, v: Tensor) -> Callable[[], None]:
    def run() -> None:
        for t in (q, k, v):
            t.grad = None
        fn(q, k, v).sum().backward()

    return run


def compare(title: str, contenders: dict[str, Callable[[], object]]) -> None:
    print(f"   {title}", flush=True)
    for name, fn in contenders.items():
        res = step(f"{title}: {name}", lambda fn=fn: (gpu_time(fn), gpu_peak(fn)))
        if res is not None:
            t, m = res  # type: ignore[misc]
            print(f"   | {title} | {name} | {1e3 * t:.2f} ms | {m / 2**20:.0f} MB |", flush=True)


def sequence_table(
    dtype: torch.dtype,
    flex: Callable[..., Tensor],
    create_block_mask: Callable[..., object],
    as_mask_mod: Callable[..., object],
) -> None:
    """Window, Grid and Full rows of the table in one dtype."""
    L = 8192
    q, k, v = qkv(1, 4, L, 64, dtype=dtype)
    window = Window(64, 64)
    dense = window.dense(L, L, device="cuda")
    bm = create_block_mask(as_mask_mod(window), None, None, L, L, device="cuda")
    compare(
        f"Window ±64, L=8192, fwd+bwd, {dtype}",
        {
            "SDPA dense mask": train(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=dense), q, k, v),
            "FlexAttention": train(lambda q, k, v: flex(q, k, v, block_mask=bm), q, k, v),
            "attnmm auto": train(lambda q, k, v: attend(q, k, v, window), q, k, v),
            "attnmm band": train(lambda q, k, v: attend(q, k, v, window, backend="band"), q, k, v),
        },
    )
    q, k, v = qkv(1, 4, 65536, 64, dtype=dtype)
    compare(
        f"Window ±64, L=65536, fwd+bwd, {dtype}",
        {"attnmm auto": train(lambda q, k, v: attend(q, k, v, window), q, k, v)},
    )
    grid = Grid(64, 64, 7)
    q, k, v = qkv(1, 4, 4096, 32, dtype=dtype)
    gdense = grid.dense(4096, 4096, device="cuda")
    compare(
        f"Grid 64x64 k7, fwd+bwd, {dtype}",
        {
            "SDPA dense mask": train(
                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=gdense), q, k, v
            ),
            "attnmm auto": train(lambda q, k, v: attend(q, k, v, grid), q, k, v),
            "attnmm sparse": train(lambda q, k, v: attend(q, k, v, grid, backend="sparse"), q, k, v),
        },
    )
    q, k, v = qkv(1, 4, 1024, 64, dtype=dtype)
    compare(
        f"Full L=1024, fwd+bwd, {dtype}",
        {
            "raw SDPA": train(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v),
            "attnmm auto": train(lambda q, k, v: attend(q, k, v), q, k, v),
        },
    )


def part2(dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16)) -> None:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from attnmm.attention.backends.flex import as_mask_mod

    print("== part 2: the benchmark table on the GPU (median of 10, peak above inputs)", flush=True)
    flex = torch.compile(flex_attention)
    for dtype in dtypes:
        sequence_table(dtype, flex, create_block_mask, as_mask_mod)
    from torch_geometric.utils import scatter, softmax

    N, M = 100_000, 1_000_000
    edge_index = torch.randint(0, N, (2, M), device="cuda")
    graph = Graph(edge_index, N)
    pairs = graph.pairs(N, device="cuda")
    src, dst = pairs.col, pairs.row

    def conv(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        alpha = softmax((q[dst] * k[src]).sum(-1) / math.sqrt(q.size(-1)), dst, num_nodes=N)
        return scatter(v[src] * alpha.unsqueeze(-1), dst, dim=0, dim_size=N, reduce="sum")

    q, k, v = qkv(N, 4, 64)
    step(
        "graph agreement",
        lambda: torch.testing.assert_close(attend(q, k, v, graph), conv(q, k, v), atol=1e-4, rtol=1e-4),
    )
    compare(
        "Graph N=100k M=1M, fwd+bwd, fp32",
        {
            "TransformerConv formulation": train(conv, q, k, v),
            "attnmm auto": train(lambda q, k, v: attend(q, k, v, graph), q, k, v),
        },
    )


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}

PAGE = Path(__file__).resolve().parents[1] / "docs" / "robustness.md"
START, END = "<!-- gpu_check:start -->", "<!-- gpu_check:end -->"


def _logs(folder: Path, *patterns: str) -> list[Path]:
    return sorted(p for pattern in patterns for p in folder.glob(pattern))


def markdown(folder: Path) -> list[str]:
    """The table of a run's timings and the count of its checks, from its logs in ``folder`` alone."""
    part1 = "\n".join(p.read_text() for p in _logs(folder, "p1_*.log", "gpu_check_part1_*.log"))
    part2 = "\n".join(p.read_text() for p in _logs(folder, "p2.log", "gpu_check_part2.log"))
    tests = "\n".join(p.read_text() for p in _logs(folder, "cuda_tests.log"))
    device = next((line.split(":", 1)[1].strip() for line in (part1 + part2).splitlines()
                   if line.startswith("device:")), "unknown device")
    checks, failed = part1.count(" ok ("), part1.count("   FAILED ")
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in part2.splitlines() if line.startswith("   | ")]
    progress = "".join(line.split("[")[0] for line in tests.splitlines() if line.rstrip().endswith("%]"))
    passed, broken = progress.count("."), progress.count("F") + progress.count("E")
    lines = [f"CUDA tests: {passed} passed, {broken} failed. Part 1: {checks} checks of a backend against the "
             f"reference (values and gradients), {failed} failed.", "",
             "| case | contender | time | peak above the inputs | time / `attnmm auto`'s |", "|---|---|---:|---:|---:|"]
    auto = {case: float(t.split()[0]) for case, name, t, _ in rows if name == "attnmm auto"}
    for case, name, t, mem in rows:
        ratio = f"{float(t.split()[0]) / auto[case]:.2f}" if case in auto else ""
        lines.append(f"| {case} | {name} | {t} | {mem} | {ratio} |")
    lines += ["", f"Median of 10 calls, forward and backward; {device}; logs in `{folder.as_posix()}/`."]
    return lines


def render(folder: Path) -> None:
    from benchmarks._page import ROOT, generated

    where = folder.resolve().relative_to(ROOT)
    command = f"python -m benchmarks.gpu_check --render {where.as_posix()}"
    text = generated(PAGE.read_text(), START, END, command, ROOT / where, markdown(where))
    PAGE.write_text(text)
    print(f"wrote {PAGE}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_check",
        description="Every backend against the reference on CUDA (part 1), then the timings (part 2).",
    )
    parser.add_argument("--part", choices=["1", "2"], action="append", help="run only this part (repeatable)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), action="append", help="only this dtype (repeatable)")
    parser.add_argument(
        "--shard", default="0/1", help="i/n: part 1 checks every n-th case from the i-th (to split it over processes)"
    )
    parser.add_argument("--render", type=Path, metavar="FOLDER",
                        help="write docs/robustness.md's table from a run's logs in FOLDER, run nothing")
    args = parser.parse_args(argv)
    try:
        index, count = (int(x) for x in args.shard.split("/"))
        if not 0 <= index < count:
            raise ValueError
    except ValueError:
        parser.error(f"--shard takes i/n with 0 <= i < n, got {args.shard!r}")
    args.shard = (index, count)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        render(args.render)
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    dtypes = tuple(DTYPES[d] for d in args.dtype) if args.dtype else tuple(DTYPES.values())
    parts = args.part or ["1", "2"]
    started = time.perf_counter()
    if "1" in parts:
        step("part 1", lambda: part1(dtypes, args.shard))
    if "2" in parts:
        step("part 2", lambda: part2(dtypes))
    print(f"== done in {time.perf_counter() - started:.0f} s; {len(FAILURES)} failure(s)")
    for f in FAILURES:
        print(f"   FAILED {f}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
