"""Measuring time and peak memory honestly on a shared CPU machine.

Time: the peer and attnmm run in alternating order in one process (after warm-up calls), and the
fastest call of each is kept: on a shared machine other processes only ever add time, so the
minimum is the least disturbed measurement, and alternating exposes both sides to the same phases.

Peak memory (:func:`process_peak`): each side runs in a fresh subprocess, which builds the inputs,
frees what it can (``gc.collect``, ``malloc_trim``), resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``), records the resident set size and makes three full-size calls with no
warm-up, then reads the peak (``VmHWM``). The figure is the peak minus that baseline, what a user's
process feels in its first steps: whatever the first call builds and keeps (caches, compiled kernels)
counts; what stays held after the calls is reported beside it. :func:`peak_of` (one call after a
warm-up, the steady state) remains for measurements of a step inside a longer run.
glibc is told to serve every allocation above 128 KiB with ``mmap``
(``MALLOC_MMAP_THRESHOLD_``) so freed buffers go back to the kernel instead of hiding in malloc's
cache.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, in clock ticks, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    return total - fields[3] - fields[4], total


def _own_cpu() -> float:
    """CPU seconds this process (all its threads) has used."""
    t = os.times()
    return t.user + t.system


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall seconds of one call of ``fn``, and the CPUs other processes kept busy meanwhile."""
    busy0, _ = _cpu_jiffies()
    own0 = _own_cpu()
    start = time.perf_counter()
    fn()
    wall = time.perf_counter() - start
    busy1, _ = _cpu_jiffies()
    tick = os.sysconf("SC_CLK_TCK")
    others = max(0.0, (busy1 - busy0) / tick - (_own_cpu() - own0))
    return wall, others / max(wall, 1e-9)


def alternate(
    peer: Callable[[], object] | None, ours: Callable[[], object], rounds: int, **options: Any
) -> tuple[float | None, float]:
    """Fastest seconds of ``peer`` and ``ours`` over the rounds of :func:`alternate_rounds` (same options)."""
    use = alternate_rounds(peer, ours, rounds, **options)
    peers = [t for t, _ in use if t is not None]
    return (min(peers) if peers else None), min(t for _, t in use)


def spread(pairs: list[tuple[float | None, float]]) -> list[float] | None:
    """Min, median and max over the rounds of the peer's time over ours (None without a peer)."""
    ratios = sorted(tp / to for tp, to in pairs if tp is not None)
    if not ratios:
        return None
    return [ratios[0], statistics.median(ratios), ratios[-1]]


def alternate_rounds(
    peer: Callable[[], object] | None,
    ours: Callable[[], object],
    rounds: int,
    warmup: int = 1,
    quiet_below: float = 0.25,
    max_rounds: int | None = None,
) -> list[tuple[float | None, float]]:
    """The (peer, ours) seconds of each counted round, the sides called in alternating order.

    A round (one call of each side) counts only when other processes kept less than
    ``quiet_below`` of a CPU busy during both calls; rounds run until ``rounds`` quiet ones are
    collected or ``max_rounds`` (default ``4 * rounds``) were tried, and then, if too few were
    quiet, every round counts.
    """
    for _ in range(warmup):
        if peer is not None:
            peer()
        ours()
    quiet: list[tuple[float | None, float]] = []
    every: list[tuple[float | None, float]] = []
    for r in range(max_rounds or 4 * rounds):
        order = [("peer", peer), ("ours", ours)] if r % 2 == 0 else [("ours", ours), ("peer", peer)]
        times: dict[str, float] = {}
        disturbed = False
        for who, fn in order:
            if fn is None:
                continue
            times[who], others = timed(fn)
            disturbed |= others >= quiet_below
        pair = (times.get("peer"), times["ours"])
        every.append(pair)
        if not disturbed:
            quiet.append(pair)
        if len(quiet) >= rounds:
            break
    use = quiet if len(quiet) >= rounds else every
    if use is every:
        print(f"   only {len(quiet)} of {len(every)} rounds ran undisturbed; timing all of them", flush=True)
    return use


def _busy_cpus(seconds: float = 1.0) -> float:
    """How many CPUs were busy (all processes) over the next ``seconds``, from /proc/stat."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields), idle

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    cpus = os.cpu_count() or 1
    return cpus * (1 - (idle1 - idle0) / max(total1 - total0, 1))


def wait_for_idle(max_wait: float = 180.0, busy_below: float = 0.3) -> bool:
    """Wait (up to ``max_wait`` seconds) until other processes leave the CPUs idle; True if they did.

    Timing on a shared machine is only meaningful while nothing else runs; both sides of a case are
    measured after the same wait, so it favours neither.
    """
    deadline = time.monotonic() + max_wait
    while time.monotonic() < deadline:
        if _busy_cpus() < busy_below:
            return True
    return False


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _release() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # pragma: no cover - not glibc
        pass


def peak_of(fn: Callable[[], object]) -> int:
    """Extra peak resident bytes of one call of ``fn`` (call it once before to warm up)."""
    _release()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    base = _status("VmRSS")
    result = fn()
    peak = _status("VmHWM")
    del result
    return max(peak - base, 0)


def process_peak(fn: Callable[[], object], calls: int = 3) -> tuple[int, int]:
    """What a user's process feels of ``fn``: the peak resident bytes over its first ``calls`` calls
    (the first included, with whatever it builds and keeps: caches, compiled kernels, allocator
    pools) above the resident size before the first, and the bytes still held after the last
    (gradients included)."""
    _release()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    base = _status("VmRSS")
    for _ in range(calls):
        fn()
    peak = _status("VmHWM")
    _release()
    return max(peak - base, 0), max(_status("VmRSS") - base, 0)


def peak_in_subprocess(case: str, side: str, timeout: float = 900) -> dict[str, int] | str:
    """Run ``python -m benchmarks._worker case side`` in a fresh process and return its
    ``{"peak": bytes, "held": bytes}`` (:func:`process_peak`), or the error text."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", OMP_NUM_THREADS="2")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks._worker", case, side],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"failed: {tail[0][:120]}"
    out = json.loads(lines[-1])
    return {"peak": int(out["peak"]), "held": int(out["held"])}


#: Environment variable holding the torch thread count of a benchmark run and its subprocesses.
THREADS_ENV = "ATTNMM_BENCH_THREADS"


def threads() -> int:
    """Torch threads of a benchmark process: ``$ATTNMM_BENCH_THREADS``, else 2."""
    return int(os.environ.get(THREADS_ENV, "2"))


def train_runner(fn: Callable[[Any, Any, Any], Any], x: dict[str, Any]) -> Callable[[], None]:
    """A call of forward + backward of ``fn`` on ``x``'s ``q``, ``k``, ``v`` with the fixed output
    gradient ``x["grad"]`` (their gradients cleared first)."""

    def run() -> None:
        for t in (x["q"], x["k"], x["v"]):
            t.grad = None
        fn(x["q"], x["k"], x["v"]).backward(x["grad"])

    return run


def machine_line() -> str:
    """The machine and the time of a run, as the stored results record them: processor, cores,
    torch version, UTC time."""
    import torch

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def peer_environment() -> str:
    """The versions the peers ran with, and which optional compiled extensions PyG found."""
    import importlib.metadata as md
    import importlib.util

    def version(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "absent"

    extensions = ["pyg_lib", "torch_scatter", "torch_sparse", "torch_cluster"]
    found = [e for e in extensions if importlib.util.find_spec(e) is not None]
    pyg = f"with {', '.join(found)}" if found else f"without its optional compiled extensions: {', '.join(extensions)}"
    return (
        f"torch {torch_version()}, torch_geometric {version('torch_geometric')} ({pyg}), "
        f"FlexAttention compiled by torch.compile (inductor, CPU), {platform.python_implementation()} "
        f"{platform.python_version()}"
    )


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def commit() -> str:
    """The short hash of the checkout's HEAD, or "unknown" outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
