r"""Refusing, before allocating, an attention that cannot fit in memory.

:func:`~attnmm.attend` asks two questions before it computes anything:

1. Will the mask's sparse form (its allowed pairs, needed to dispatch a sparse mask or to place a
   bias or returned weights) fit? :func:`check_pairs` bounds the pair count with
   :meth:`Mask.nnz_bound <attnmm.masks.Mask.nnz_bound>`, without enumerating the pairs.
2. Will the chosen backend's working memory fit? :func:`check_backend` asks the backend's
   :meth:`~attnmm.attention.backends.Backend.memory_bytes`.

An estimate above the memory available on the inputs' device (free CUDA memory plus PyTorch's
cached blocks; on CPU ``MemAvailable`` and the cgroup limit) raises :class:`AttentionMemoryError`, a
:class:`MemoryError`, with the estimate, what is available and a hint. Problems whose worst case is
below :data:`SMALL_BYTES` skip the question, so ordinary sizes pay a few integer products. The
estimates themselves belong to the backends (their ``memory_bytes``, on the size arithmetic of
:mod:`attnmm.attention.backends._sizes`); this module only compares them with what is available.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from attnmm.attention.backends._sizes import PAIR_BYTES, SMALL_BYTES, max_pairs
from attnmm.attention.backends.base import Backend
from attnmm.attention.forms import Forms
from attnmm.attention.problem import Problem
from attnmm.masks import Mask

__all__ = ["PAIR_BYTES", "SMALL_BYTES", "AttentionMemoryError", "MemoryReader", "available_bytes", "ceiling_bytes",
           "check_backend", "check_mask_pairs", "check_pairs"]


class AttentionMemoryError(MemoryError):
    """An attention whose estimated working memory exceeds the memory available on its device.

    Attributes:
        needed (int): the estimate, in bytes.
        available (int): the memory available when it was raised, in bytes.
    """

    def __init__(self, message: str, needed: int, available: int) -> None:
        super().__init__(message)
        self.needed, self.available = needed, available


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


#: Seconds a reading of the CPU's available memory is reused: every query segment of a split, and every
#: layer, asks; reading ``/proc/meminfo`` and the cgroup files costs about a millisecond each time.
READING_SECONDS = 0.1

class MemoryReader:
    """Reads the CPU's available memory, reusing a reading for :data:`READING_SECONDS` (a plan holds one,
    so the layers and query segments of a forward do not each read the files)."""

    def __init__(self) -> None:
        self.last: tuple[float, int | None] | None = None

    def cpu_available(self) -> int | None:
        now = time.monotonic()
        if self.last is not None and now - self.last[0] < READING_SECONDS:
            return self.last[1]
        found = _read_cpu_available()
        self.last = (now, found)
        return found


def _read_cpu_available() -> int | None:
    candidates = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                candidates.append(int(line.split()[1]) * 1024)  # reported in kB
                break
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),  # v1
    ):
        cap, used = _read_int(limit), _read_int(usage)
        if cap is not None and used is not None and cap < 1 << 60:  # v1 reports "no limit" as ~2**63
            candidates.append(max(cap - used, 0))
    if not candidates:
        try:
            candidates.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError, AttributeError):
            return None
    return min(candidates)


def available_bytes(device: torch.device, reader: MemoryReader | None = None) -> int | None:
    """Memory available for new tensors on ``device``, in bytes (``None`` when unknown).

    On CUDA, the device's free memory plus what PyTorch's caching allocator holds unused; on CPU,
    the kernel's ``MemAvailable`` or the cgroup's remaining limit, whichever is smaller (a reading is
    reused for :data:`READING_SECONDS` by a ``reader``).
    """
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if device.type == "cpu":
        return (reader or MemoryReader()).cpu_available()
    return None


_PAIRS_HINT = (
    "use a sparser mask (fewer allowed pairs per query), a band mask (Window, Chunk) that needs no pair "
    "list, a smaller batch, or attend over fewer queries at a time"
)


def _refuse(
    subject: str, needed: int, purpose: str, device: torch.device, hint: str, reader: MemoryReader | None = None
) -> None:
    """Raise :class:`AttentionMemoryError` when ``needed`` bytes exceed the memory available on ``device``."""
    available = available_bytes(device, reader)
    if available is None or needed <= available:
        return
    raise AttentionMemoryError(
        f"{subject} would need about {_gb(needed)} for {purpose}, more than the {_gb(available)} available "
        f"on {device}; {hint}",
        needed,
        available,
    )


def _problem_refuse(problem: Problem, needed: int, purpose: str, hint: str, reader: MemoryReader | None) -> None:
    sizes = f"B={problem.B}, H={problem.H}, L={problem.L}, S={problem.S}"
    subject = f"attention with mask {problem.effective_mask!r} ({sizes})"
    _refuse(subject, needed, purpose, problem.device, hint, reader)


def check_mask_pairs(
    mask: Mask, num_rows: int, num_cols: int, batch_size: int | None, device: torch.device, per_pair: int = PAIR_BYTES
) -> None:
    """Raise :class:`AttentionMemoryError` when enumerating ``mask.pairs(L, S, B)``, at ``per_pair`` bytes
    per pair, cannot fit on ``device``; for callers that enumerate a mask's pairs themselves (such as
    :class:`~attnmm.nn.RelativePositionBias`). Masks without :meth:`~attnmm.masks.Mask.nnz_bound`
    are not checked."""
    items = (batch_size if mask.batched else None) or 1
    if items * num_rows * num_cols * per_pair < SMALL_BYTES:
        return
    pairs = mask.nnz_bound(num_rows, num_cols, batch_size if mask.batched else None)
    if pairs is None:
        return
    sizes = f"L={num_rows}, S={num_cols}" + (f", B={batch_size}" if mask.batched else "")
    purpose = f"its sparse form (up to {pairs:.3g} allowed pairs)"
    _refuse(f"mask {mask!r} ({sizes})", pairs * per_pair, purpose, device, _PAIRS_HINT)


def check_pairs(problem: Problem, with_bias: bool = False, reader: MemoryReader | None = None) -> None:
    """Raise :class:`AttentionMemoryError` when enumerating the mask's allowed pairs cannot fit.

    Nothing is checked when the pairs will not be enumerated (an interval mask without bias or
    returned weights) or the mask cannot bound its pair count.
    """
    if max(problem.B, 1) * problem.L * problem.S * PAIR_BYTES < SMALL_BYTES:  # B bounds the mask's batch items
        return
    if problem.structure.interval is not None and not with_bias and not problem.return_weights:
        return
    pairs = max_pairs(problem)
    if pairs is None:
        return
    _problem_refuse(problem, pairs * PAIR_BYTES, f"the sparse form of the mask (up to {pairs:.3g} allowed pairs)",
                    _PAIRS_HINT, reader)


def ceiling_bytes(problem: Problem) -> int:
    """A bound on every built-in backend's estimate from the sizes alone: 1 KiB for each of
    B * H * (L + S + 1)^2 scores and 512 bytes for each of B * H * (L + S + 1) rows of width
    max(E, Ev). Below :data:`SMALL_BYTES`, :func:`check_backend` does not ask the backend."""
    n = problem.L + problem.S + 1
    return max(problem.B, 1) * max(problem.H, 1) * n * (1024 * n + 512 * max(problem.E, problem.Ev))


def check_backend(problem: Problem, forms: Forms, backend: Backend, reader: MemoryReader | None = None) -> None:
    """Raise :class:`AttentionMemoryError` when ``backend``'s working memory for ``problem`` cannot fit."""
    if ceiling_bytes(problem) < SMALL_BYTES:
        return
    needed = backend.memory_bytes(problem, forms)
    if needed < SMALL_BYTES:
        return
    _problem_refuse(problem, needed, f"backend {backend.name!r}", backend.memory_hint, reader)
