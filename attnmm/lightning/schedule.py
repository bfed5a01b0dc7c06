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
