"""Optimisation shared by the recipes: AdamW with linear warm-up, then cosine decay."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn


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


@dataclass(frozen=True)
class Optimization:
    r"""How a task's parameters are optimised, beside the peak learning rate: AdamW (or Adam with an L2
    penalty), no weight decay on biases and norms, fused where torch has the kernel, with linear warm-up
    and cosine decay over the run (:class:`WarmupCosine`). In YAML a mapping of these fields
    (``optimizer: {weight_decay: 0.05}``).

    Args:
        weight_decay (float, optional): AdamW weight decay, or Adam's L2 penalty. (default: :obj:`0.01`)
        warmup_fraction (float, optional): share of the steps spent warming up. (default: :obj:`0.05`)
        min_lr_ratio (float, optional): final learning rate as a share of the peak. (default: :obj:`0.0`)
        kind (str, optional): ``"adamw"`` (decoupled weight decay) or ``"adam"`` (weight decay as an L2
            penalty in the gradient, as GAT trains on Cora). (default: :obj:`"adamw"`)

    Examples:
        >>> Optimization(weight_decay=0.05)
        Optimization(weight_decay=0.05, warmup_fraction=0.05, min_lr_ratio=0.0, kind='adamw')
    """

    weight_decay: float = 0.01
    warmup_fraction: float = 0.05
    min_lr_ratio: float = 0.0
    kind: Literal["adamw", "adam"] = "adamw"

    def __post_init__(self) -> None:
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")
        if self.kind not in ("adamw", "adam"):
            raise ValueError(f"optimizer kind must be 'adamw' or 'adam', got {self.kind!r}")

    def build(self, module: nn.Module, lr: float, fused_ok: bool = True) -> dict[str, Any]:
        """The optimiser and its per-step schedule over ``module``'s trainable parameters, as
        ``configure_optimizers`` returns them (``fused_ok=False``: never the fused kernels)."""
        decay: list[nn.Parameter] = []
        no_decay: list[nn.Parameter] = []
        for name, p in module.named_parameters():
            if p.requires_grad:
                (no_decay if p.dim() < 2 or "norm" in name else decay).append(p)
        params = decay + no_decay
        # the fused kernels (one pass over all parameters) where torch has them: float on CPU or CUDA
        fused = fused_ok and bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda")
                                                  for p in params)
        optimizer = (torch.optim.AdamW if self.kind == "adamw" else torch.optim.Adam)(
            [{"params": decay, "weight_decay": self.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=lr, fused=fused or None,
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(self.warmup_fraction, self.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
