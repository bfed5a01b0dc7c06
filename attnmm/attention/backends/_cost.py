r"""The cost model of dispatch: each backend's estimated seconds for a problem, from calibrated constants.

A backend describes its work on a problem as a few terms :math:`x_1, \dots, x_n` (its
:meth:`~attnmm.attention.backends.Backend.cost_terms`: multiply-adds, score slots, index entries,
kernel launches); its estimated time is

.. math::
    t = c_0 + \sum_k c_k x_k

with one set of non-negative constants :math:`c` per backend, device type and mode (``"train"``:
forward and backward; ``"infer"``: forward only; either with ``"+dropout"``, which sends the fused
CPU kernels down PyTorch's unfused path), fitted to measured times by
``python -m benchmarks.calibrate``, which writes them into
:mod:`attnmm.attention.backends._calibration`. A half-precision problem (float16 or bfloat16) uses the
constants calibrated in half precision on its device where there are some (the modes ending in
``"+half"``, from ``python -m benchmarks.calibrate --dtype bf16``: on a GPU, half-precision kernels run
at other speeds than float32 ones), else the float32 constants (on the CPU the backends compute in
float32). A backend or device without constants has no estimate; dispatch then falls back to the
backends' declared preference.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnmm.attention.backends import _calibration
from attnmm.attention.problem import Problem

#: Terms are counted in millions, so that the constants read as seconds per million.
UNIT = 1e-6


#: The modes a backend is calibrated in.
MODES = ("train", "infer", "train+dropout", "infer+dropout")

#: The suffix of a mode's constants calibrated in half precision.
HALF = "+half"


def mode(problem: Problem) -> str:
    """``"train"`` when a gradient will flow back through the attention, else ``"infer"``; with
    ``"+dropout"`` when ``dropout_p > 0``."""
    return ("train" if problem.training else "infer") + ("+dropout" if problem.dropout_p > 0 else "")


def constants(name: str, device: str, how: str, half: bool = False) -> Sequence[float] | None:
    """The calibrated constants (c_0, c_1, ...) of backend ``name`` on ``device`` in mode ``how``; with
    ``half``, those calibrated in half precision where there are some."""
    table = _calibration.COSTS.get(device, {}).get(name, {})
    found = table.get(how + HALF) if half else None
    return table.get(how) if found is None else found


def estimate(name: str, problem: Problem, terms: Sequence[float]) -> float | None:
    """Seconds estimated for backend ``name`` with work ``terms`` on ``problem``; ``None`` without
    constants for its device and mode (or with more constants than terms).

    A backend adds new terms at the end of its :meth:`~attnmm.attention.backends.Backend.cost_terms`,
    so constants calibrated before a term existed still apply: the terms they lack count with
    constant 0 until ``python -m benchmarks.calibrate`` fits them."""
    c = constants(name, problem.device.type, mode(problem), problem.dtype in (torch.float16, torch.bfloat16))
    if c is None or not 1 <= len(c) <= len(terms) + 1:
        return None
    return c[0] + sum(ck * xk * UNIT for ck, xk in zip(c[1:], terms))
