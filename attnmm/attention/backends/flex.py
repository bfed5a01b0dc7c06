r"""FlexAttention: a fused block-sparse kernel built from the mask's ``mask_mod`` (CUDA, and CPU for
inference)."""

from __future__ import annotations

import functools
import importlib.util
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attnmm.attention._problem import Problem
from attnmm.attention.backends._sizes import dense_bytes
from attnmm.attention.backends.base import Backend, Supports
from attnmm.masks import Mask
from attnmm.masks._key import content_key

#: Block size of the block masks (FlexAttention's default).
BLOCK_SIZE = 128

_compiled: Callable[..., Tensor] | None = None
#: How many block masks to keep (least recently used first out).
CACHE_SIZE = 32

# (content key of the mask, B, L, S, device) -> (mask, block mask); holding the mask keeps the ids of
# any objects its key names by identity from being reused
_block_masks: OrderedDict[tuple[Any, ...], tuple[Mask, Any]] = OrderedDict()


@functools.cache
def flex_available(device_type: str = "cuda") -> str | None:
    """``None`` when FlexAttention can run on ``device_type`` here (``"cuda"`` or ``"cpu"``), else the
    reason it cannot."""
    if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:  # pragma: no cover
        return "this torch build has no torch.nn.attention.flex_attention"
    if device_type == "cuda":
        if not torch.cuda.is_available():
            return "CUDA is not available"
        if importlib.util.find_spec("triton") is None:
            return "triton is not installed (torch.compile has no GPU code generator)"
    return None


class FlexBackend(Backend):
    r"""``torch.nn.attention.flex_attention`` under ``torch.compile`` with the block mask of the mask's
    :meth:`~attnmm.masks.Mask.mask_mod`: on CUDA, and on CPU for inference (torch compiles no
    FlexAttention backward for the CPU).

    The block mask marks which (128 x 128) tiles of the score matrix hold an allowed pair; the fused
    kernel skips the others and applies ``mask_mod`` inside partial tiles, so the cost follows the
    mask's tiles. Block masks are cached per mask content (equal masks rebuilt per batch share one) and
    shape (B, L, S, device), the
    :data:`CACHE_SIZE` most recent ones. The kernel is compiled once with dynamic shapes, so batches
    of new lengths reuse it (a second compilation comes for sequences shorter than one block).
    Softmax scores only, without bias, returned weights or dropout; queries with an empty allowed set
    get zero. On the CPU it runs in float32 without gradients and with masks shared by the batch (the
    CPU kernel of a per-item mask fails to compile); dispatch has no calibrated cost for it there, so it
    runs where asked for (``backend="flex"``).
    """

    name = "flex"
    supports = Supports(
        structures=frozenset({"band", "interval", "segments", "sparse"}),
        layouts=frozenset({"padded"}),
        bias=False,
        relu=False,
        weights=False,
        dropout=False,
        empty=False,
        devices=frozenset({"cuda", "cpu"}),
        dtypes=frozenset({torch.float16, torch.bfloat16, torch.float32}),
    )
    preference = 0
    memory_hint = (
        "building the block mask evaluates mask_mod on every (L, S) position; use a smaller batch or "
        "shorter sequences, or backend='sparse'"
    )

    def memory_bytes(self, problem: Problem) -> int:
        # create_block_mask materialises the boolean (B, L, S) mask and an int64 index grid
        return dense_bytes(problem, 0, 9)

    def available(self) -> str | None:
        return flex_available("cpu")

    def check(self, problem: Problem) -> str | None:
        device = problem.q.device.type
        reason = flex_available(device)
        if reason is not None:
            return reason
        if device == "cpu" and problem.training:
            return "torch compiles no FlexAttention backward for the CPU (inference only there)"
        if device == "cpu" and problem.q.dtype != torch.float32:
            return f"{problem.q.dtype} on the CPU (float32 only there)"
        if device == "cpu" and problem.effective_mask.batched:
            return "a per-item mask (e.g. a batch's Padding) on the CPU, where its kernel does not compile"
        if problem.q.size(-1) < 16 or problem.v.size(-1) < 16:
            return "head dims below 16"
        return None

    def forward(self, problem: Problem) -> tuple[Tensor, Tensor | None]:
        global _compiled
        from torch.nn.attention.flex_attention import flex_attention

        if _compiled is None:
            _compiled = torch.compile(flex_attention, dynamic=True)  # new lengths reuse the kernel
        block_mask = block_mask_for(problem.effective_mask, problem.batch_size, problem.L, problem.S, problem.q.device)
        out = _compiled(problem.q, problem.k, problem.v, block_mask=block_mask, scale=problem.scale)
        nonempty = (problem.row_counts > 0).to(out.device).view(-1, 1, problem.L, 1)  # (B or 1, 1, L, 1)
        return torch.where(nonempty, out, torch.zeros_like(out)), None


def block_mask_for(mask: Mask, batch_size: int | None, num_rows: int, num_cols: int, device: torch.device) -> Any:
    """The FlexAttention ``BlockMask`` of ``mask`` for one shape, built once and cached."""
    from torch.nn.attention.flex_attention import create_block_mask

    key = (content_key(mask), batch_size, num_rows, num_cols, str(device))
    if key in _block_masks:
        _block_masks.move_to_end(key)
        return _block_masks[key][1]
    block_mask = create_block_mask(
        as_mask_mod(mask), batch_size, None, num_rows, num_cols, device=device, BLOCK_SIZE=BLOCK_SIZE
    )
    _block_masks[key] = (mask, block_mask)
    while len(_block_masks) > CACHE_SIZE:
        _block_masks.popitem(last=False)
    return block_mask


def as_mask_mod(mask: Mask) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
    """``mask.mask_mod`` as a plain 4-argument function: FlexAttention tells mask_mods from
    score_mods by counting positional parameters, and a bound method counts ``self``."""

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return mask.mask_mod(b, h, q_idx, kv_idx)

    return mask_mod
