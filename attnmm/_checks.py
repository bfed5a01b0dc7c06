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
