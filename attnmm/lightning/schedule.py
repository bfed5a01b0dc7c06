"""Learning-rate schedule shared by the recipes: linear warm-up, then cosine decay."""

from __future__ import annotations

import math


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """Multiplier of the base learning rate at ``step``.

    Rises linearly from ``1 / warmup_steps`` to 1 over ``warmup_steps``, then follows a half cosine
    down to ``min_ratio`` at ``total_steps``.

    Examples:
        >>> [round(warmup_cosine(s, 2, 10), 3) for s in (0, 1, 2, 6, 10)]
        [0.5, 1.0, 1.0, 0.5, 0.0]
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupCosine:
    """:func:`warmup_cosine` as a ``LambdaLR`` multiplier whose run length is set once it is known.

    ``total_steps`` (and with it the warm-up, ``warmup_fraction`` of it) is given by :meth:`start`,
    called when training starts: the optimiser is configured before a resumed run restores its
    checkpoint, and counting the steps then would set up the training data too early (a loader set
    up before the restore never gets its mid-epoch state back). Until then the multiplier is 1. Its
    attributes are plain values, so they go into the scheduler's state dict.

    Examples:
        >>> schedule = WarmupCosine(warmup_fraction=0.2, min_ratio=0.0)
        >>> schedule(0)
        1.0
        >>> schedule.start(10)
        >>> [round(schedule(s), 3) for s in (0, 1, 2, 6, 10)]
        [0.5, 1.0, 1.0, 0.5, 0.0]
    """

    def __init__(self, warmup_fraction: float, min_ratio: float = 0.0) -> None:
        self.warmup_fraction, self.min_ratio = warmup_fraction, min_ratio
        self.total_steps: int | None = None

    def start(self, total_steps: int) -> None:
        """Set the run's length in optimiser steps."""
        self.total_steps = max(1, int(total_steps))

    def __call__(self, step: int) -> float:
        if self.total_steps is None:
            return 1.0
        warmup = max(1, int(self.warmup_fraction * self.total_steps))
        return warmup_cosine(step, warmup, self.total_steps, self.min_ratio)
