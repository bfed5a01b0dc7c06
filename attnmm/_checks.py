"""Argument checks shared across the package (masks, adapters, layers, data and tasks)."""

from __future__ import annotations

import numbers


def check_nonneg_int(name: str, value: object, minimum: int = 0) -> int:
    """Return ``value`` as an int, or raise naming the expected and the actual value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


def refuse_encoder_options(encoder: object, state: object = None, return_weights: bool = False) -> None:
    """Refuse, naming the encoder and the fix, the options of the shared encoder call
    ``encoder(x, mask, *, tokens=None, state=None, return_weights=False)`` that it does not honour
    (pass ``state`` or ``return_weights`` only for the options it lacks)."""
    name = type(encoder).__name__
    if state is not None:
        raise ValueError(
            f"{name} cannot read a sequence incrementally (state=): call it without state, e.g. "
            "generate(..., cache=False)"
        )
    if return_weights:
        raise ValueError(
            f"{name} does not return attention weights (return_weights=True): call it without, e.g. "
            "leave out the AttentionMapLogger callback"
        )
