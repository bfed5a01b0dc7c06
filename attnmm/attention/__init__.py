"""The attention core: :func:`attend`, the planner and its :class:`Plan`, the backends.

The layers built on it (``MultiHeadAttention``, ``Encoder``, positional encodings, ``IncrementalState``)
live in :mod:`attnmm.nn`; their names here still work and warn.
"""

import warnings
from typing import Any

from attnmm.attention._layout import LayoutError
from attnmm.attention.backends._memory import AttentionMemoryError
from attnmm.attention.core import attend
from attnmm.attention.planner import AttentionPlan, Plan
from attnmm.attention.problem import Inputs, Problem
from attnmm.attention.weights import AttentionWeights

#: Names that moved to :mod:`attnmm.nn`, and the module of each.
_MOVED = {
    "Encoder": "encoder",
    "EncoderLayer": "encoder",
    "IncrementalState": "state",
    "LearnedPE": "positional",
    "MultiHeadAttention": "multihead",
    "RelativePositionBias": "relative",
    "RotaryPE": "positional",
    "Sinusoidal2DPE": "positional",
    "SinusoidalPE": "positional",
    "sinusoid": "positional",
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    warnings.warn(f"attnmm.attention.{name} is deprecated; use attnmm.nn.{name}", FutureWarning, stacklevel=2)
    return getattr(importlib.import_module(f"attnmm.nn.{_MOVED[name]}"), name)


#: Shown under the public path in tracebacks, where users catch it from.
LayoutError.__module__ = __name__

__all__ = ["AttentionMemoryError", "AttentionPlan", "AttentionWeights", "Inputs", "LayoutError", "Plan", "Problem",
           "attend"]
