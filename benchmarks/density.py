"""``python -m benchmarks.density``: where the dense fused kernel overtakes the sparse backend.

Random masks of a chosen density (every query keeps ``round(d * S)`` random keys, so no allowed set
is empty) on L = S = 2048, H = 4, E = 64, fp32, forward + backward, 2 threads. For each density the
masked dense SDPA backend (``sdpa_mask``) and the sparse backend run alternately; the crossover is
the dispatcher's :data:`~attnmm.attention.planner.DENSE_THRESHOLD`.
"""

from __future__ import annotations

import itertools

import torch

from attnmm import attend
from attnmm.masks import Graph
from benchmarks._measure import alternate, threads, wait_for_idle

DENSITIES = (0.01, 0.03, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7)


def random_mask(n: int, density: float, seed: int = 0) -> Graph:
    """Each of n queries attends round(density * n) distinct random keys."""
    g = torch.Generator().manual_seed(seed)
    per_row = max(1, round(density * n))
    cols = torch.rand(n, n, generator=g).argsort(-1)[:, :per_row]  # (n, per_row) distinct keys
    rows = torch.arange(n).view(-1, 1).expand_as(cols)
    return Graph(torch.stack([cols.reshape(-1), rows.reshape(-1)]), n)


def sweep(n: int = 2048, rounds: int = 3) -> tuple[list[tuple[float, float, float]], float | None]:
    """Rows (density, t_sparse, t_dense) and the first density at which dense is at least as fast."""
    torch.set_num_threads(threads())  # the run's (--threads, $ATTNMM_BENCH_THREADS, else 2)
    q, k, v = (torch.randn(n, 4, 64, generator=torch.Generator().manual_seed(s)).requires_grad_(True) for s in range(3))
    grad = torch.randn(n, 4, 64)
    rows = []
    for d in DENSITIES:
        mask = random_mask(n, d)

        def call(name: str, mask: Graph = mask) -> None:
            for t in (q, k, v):
                t.grad = None
            attend(q, k, v, mask, backend=name).backward(grad)

        wait_for_idle(max_wait=60)
        t_sparse, t_dense = alternate(lambda: call("sparse"), lambda: call("sdpa_mask"), rounds)
        assert t_sparse is not None
        rows.append((d, t_sparse, t_dense))
        print(f"density {d:5.2f}: sparse {1e3 * t_sparse:8.1f} ms, dense SDPA {1e3 * t_dense:8.1f} ms", flush=True)
    crossover = next((d for d, ts, td in rows if td <= ts), None)
    return rows, crossover


def markdown(rows: list[tuple[float, float, float]], crossover: float | None) -> str:
    lines = [
        "| density | sparse backend (ms) | masked dense SDPA (ms) | faster |",
        "|---:|---:|---:|---|",
    ]
    for d, ts, td in rows:
        lines.append(f"| {d:.2f} | {1e3 * ts:.1f} | {1e3 * td:.1f} | {'sparse' if ts < td else 'dense'} |")
    found = f"{crossover:.2f}" if crossover is not None else "above the largest density tried"
    lines.append("")
    lines.append(f"Dense SDPA first wins at density {found}{_interpolated(rows)}.")
    return "\n".join(lines)


def _interpolated(rows: list[tuple[float, float, float]]) -> str:
    """Where the time difference changes sign, by linear interpolation between sweep points."""
    for (d0, s0, t0), (d1, s1, t1) in itertools.pairwise(rows):
        if s0 < t0 and s1 >= t1:
            x = d0 + (d1 - d0) * (t0 - s0) / ((t0 - s0) - (t1 - s1))
            return f" (crossover about {x:.2f} by linear interpolation)"
    return ""


if __name__ == "__main__":
    print(markdown(*sweep()))
