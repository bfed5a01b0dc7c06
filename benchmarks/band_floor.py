"""``python -m benchmarks.band_floor``: how fast the band kernel's training step could be at best here.

One training step of the band kernel (forward + backward) is six batched matrix products over the
blocks of the band layout: the scores, the output, the weights' gradient, the query gradient, and
the key and value gradients (each of those as one product per T-wide slice of the window). This
module times those six products alone, on preallocated buffers of the kernel's own shapes for the
case of ``python -m benchmarks`` (L = 8192, window +-64, H = 4, E = 64, fp32), and sets them beside
the whole attnmm step and local-attention's step, measured in the same process in alternating
order. The products alone are a floor for any kernel that computes the band blockwise with these
blocks: a target time below it cannot be met by tuning the rest (softmax, masking, copies).

A second floor is the minimal work: the same six products over exactly the allowed pairs (129 keys
per query, no block waste), at the best multiply-add rate the products reached.

Usage::

    python -m benchmarks.band_floor [--threads 2] [--rounds 7] [--no-write | --render-only]

local-attention is a benchmark-only peer (``benchmarks/requirements.txt``); without it its row is left
out. Results go to ``benchmarks/results/band_floor.json``; the table in docs/attention.md (between its
``band_floor`` markers) is rendered from them (``--render-only`` renders it again from the store).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnmm import attend
from attnmm.attention.backends._blocks import BandGeometry, choose_block
from attnmm.masks import Window

L, H, E, LEFT = 8192, 4, 64, 64
RESULTS = Path(__file__).with_name("results") / "band_floor.json"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "attention.md"
START, END = "<!-- band_floor:start -->", "<!-- band_floor:end -->"
#: The six products' names, in the order of one step.
PARTS = ("scores q k^T", "output a v", "d_a = d_out v^T", "d_q = d_s k", "d_k += d_s^T q", "d_v += a^T d_out")


def _median(fn: Callable[[], object], rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def products(geo: BandGeometry) -> dict[str, Callable[[], object]]:
    """The six products of one step on buffers of the kernel's shapes (G blocks of T queries, W
    window slots), each over all blocks at once."""
    G, T, W = geo.B * geo.H * geo.nbp, geo.T, geo.W
    g = torch.Generator().manual_seed(0)
    qb, dob = (torch.randn(G, T, E, generator=g) for _ in range(2))
    kwin, vwin = (torch.randn(G, W, E, generator=g) for _ in range(2))
    a = torch.softmax(torch.randn(G, T, W, generator=g), -1)
    s, out, dq = torch.empty(G, T, W), torch.empty(G, T, E), torch.empty(G, T, E)
    dk = geo.new_key_grad(qb, E)

    def keys(x: torch.Tensor, y: torch.Tensor) -> None:  # the kernel's key/value gradient accumulation
        geo.accumulate_keys(dk, 0, x, y)

    return {
        "scores q k^T": lambda: torch.bmm(qb, kwin.transpose(1, 2), out=s),
        "output a v": lambda: torch.bmm(a, vwin, out=out),
        "d_a = d_out v^T": lambda: torch.bmm(dob, vwin.transpose(1, 2), out=s),
        "d_q = d_s k": lambda: torch.bmm(a, kwin, out=dq),
        "d_k += d_s^T q": lambda: keys(a, qb),
        "d_v += a^T d_out": lambda: keys(a, dob),
    }


def measure(threads: int, rounds: int) -> dict[str, Any]:
    """Medians over ``rounds`` alternating rounds of the six products, the attnmm step and (when installed)
    local-attention's step, in seconds, with the shapes they ran at."""
    torch.set_num_threads(threads)
    geo = BandGeometry.build(1, H, L, L, LEFT, LEFT, choose_block(2 * LEFT + 1))
    mask = Window(LEFT, LEFT)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, H, L, E, generator=g, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, H, L, E, generator=g)

    def step(fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            for t in (q, k, v):
                t.grad = None
            fn(q, k, v).backward(grad)

        return run

    sides = {"attnmm step": step(lambda q, k, v: attend(q, k, v, mask))}
    try:
        from local_attention import LocalAttention

        layer = LocalAttention(
            window_size=LEFT, look_backward=1, look_forward=1, exact_windowsize=True, autopad=True,
            use_rotary_pos_emb=False,
        )
        sides["local-attention step"] = step(lambda q, k, v: layer(q, k, v))
    except ImportError:
        print("local-attention is not installed (pip install -r benchmarks/requirements.txt): its row is left out")
    parts = products(geo)
    times: dict[str, list[float]] = {name: [] for name in [*sides, *parts]}
    for _ in range(rounds):  # alternating: every side and product once per round
        for name, fn in [*sides.items(), *parts.items()]:
            times[name].append(_median(fn, 1))
    return {"threads": threads, "rounds": rounds, "T": geo.T, "W": geo.W, "blocks": geo.B * geo.H * geo.nbp,
            "seconds": {name: statistics.median(v) for name, v in times.items()}}


def floors(stored: dict[str, Any]) -> dict[str, float]:
    """The two floors (seconds): the six products as timed, and the minimal work (the six products over
    the allowed pairs only) at the best multiply-add rate the products reached."""
    t = stored["seconds"]
    macs = stored["blocks"] * stored["T"] * stored["W"] * E  # multiply-adds of one product over all blocks
    best_rate = max(macs / t[name] for name in PARTS)
    return {"products": sum(t[name] for name in PARTS), "minimal": 6 * H * L * (2 * LEFT + 1) * E / best_rate}


def markdown(stored: dict[str, Any]) -> str:
    """The stored run as the page's table, with its shapes and, when local-attention ran, the 3x target
    set beside the floors."""
    t, f = stored["seconds"], floors(stored)
    macs = stored["blocks"] * stored["T"] * stored["W"] * E
    lines = ["| part of one training step (forward + backward) | ms | GFLOP/s |", "|---|---:|---:|"]
    lines += [f"| {name} | {t[name] * 1e3:.1f} | {2 * macs / t[name] / 1e9:.0f} |" for name in PARTS]
    lines += [f"| the six products | {f['products'] * 1e3:.1f} | |",
              f"| the six products over the allowed pairs only, at the best rate above | {f['minimal'] * 1e3:.1f} | |"]
    lines += [f"| {name} | {t[name] * 1e3:.1f} | |" for name in ("attnmm step", "local-attention step") if name in t]
    lines += ["", f"L = {L}, window ±{LEFT}, H = {H}, E = {E}, fp32; blocks of T = {stored['T']} queries and "
              f"W = {stored['W']} window slots (W / (2w + 1) = {stored['W'] / (2 * LEFT + 1):.2f}); medians of "
              f"{stored['rounds']} alternating rounds, {stored['threads']} threads, {stored['machine']}, code at "
              f"`{stored['commit']}`."]
    if not stored.get("idle", True):
        lines[-1] += " Other processes kept the CPUs busy during the rounds (no idle moment within 3 minutes)."
    if "local-attention step" in t:
        peer = t["local-attention step"]
        lines[-1] += (f" local-attention / 3 = {peer / 3 * 1e3:.1f} ms (a 3x target) against the products' floor "
                      f"{f['products'] * 1e3:.1f} ms; attnmm {peer / t['attnmm step']:.2f}x faster than "
                      "local-attention.")
    else:
        lines[-1] += " local-attention was not installed for this run: its step is left out."
    return "\n".join(lines)


def render_page(page: str, stored: dict[str, Any]) -> str:
    """``page`` with its section between the markers replaced by the stored run's table."""
    from benchmarks._page import generated

    return generated(page, START, END, "python -m benchmarks.band_floor", RESULTS, [markdown(stored)])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--render-only", action="store_true", help="render the page's table from the store")
    args = parser.parse_args(argv)
    if args.render_only:
        stored = json.loads(RESULTS.read_text())
    else:
        from benchmarks._measure import commit, machine_line, wait_for_idle
        from benchmarks._page import publish

        idle = wait_for_idle()  # as python -m benchmarks does: other processes only ever add time
        stored = {"machine": machine_line(), "commit": commit(), "idle": idle,
                  **measure(args.threads, args.rounds)}
        print(markdown(stored))
        if args.no_write:
            return stored
        publish(stored, RESULTS, PAGE, render_page, indent=2)
        return stored
    PAGE.write_text(render_page(PAGE.read_text(), stored))
    return stored


if __name__ == "__main__":
    main()
