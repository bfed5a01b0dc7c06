"""Which layout a call of :func:`~attnmm.attend` uses: stated by the caller or by the mask, never guessed.

A 4-D q is the padded layout (B, H, L, E). A 3-D q has two readings: packed graph nodes (N, H, E), or a
batch-first sequence (B, L, D) as ``nn.MultiheadAttention`` takes it, still without its heads. It is
read as packed only when the caller says so (``layout="packed"``) or the mask is a packed-layout mask
(``mask.layout == "packed"``: :class:`~attnmm.masks.Graph`, :class:`~attnmm.masks.SameGraph` and their
compositions); anything else is refused with both readings and the fix.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from attnmm.masks import Mask

Layout = Literal["padded", "packed"]


class LayoutError(ValueError, TypeError):
    """The inputs' layout is not the one stated (by ``layout=`` or by the mask), or not stated at all.

    A :class:`ValueError` (a wrong shape), and a :class:`TypeError` as the refusal of a padded-layout
    mask on packed inputs always was.
    """


def _shape(t: Tensor) -> str:
    return str(tuple(t.shape))


def resolve_layout(q: Tensor, mask: Mask | None, layout: Layout | None) -> bool:
    """Whether ``q`` (already checked to be 3-D or 4-D) is read as packed nodes; raise
    :class:`LayoutError` when the layout is not stated or contradicts the inputs or the mask."""
    if layout not in (None, "padded", "packed"):
        raise ValueError(f"layout must be 'padded', 'packed' or None, got {layout!r}")
    own = None if mask is None else mask.layout
    N, H, E = q.shape[0], q.shape[1], q.shape[-1]
    if q.dim() == 4:
        if layout == "packed":
            raise LayoutError(
                f"layout='packed' takes q of shape (N, H, E), got 4-D shape {_shape(q)}; padded inputs "
                "(B, H, L, E) need layout='padded' or no layout"
            )
        return False
    if layout == "packed":
        if own == "padded":
            raise LayoutError(
                f"{mask!r} is a padded-layout mask but q is packed (N, H, E) as layout='packed' says, shape "
                f"{_shape(q)}; give q, k, v as (B, H, L, E), or use a mask of the packed node layout "
                "(Graph, SameGraph, ...)"
            )
        return True
    if own == "packed" and layout is None:
        return True  # a graph-family mask states the packed node layout
    under = "no mask (full attention)" if mask is None else repr(mask)
    readings = (
        f"as packed graph nodes (N={N}, H={H}, E={E}), or as a batch-first sequence (B={N}, L={H}, D={E}) "
        "as nn.MultiheadAttention takes it"
    )
    fix = (
        "for a sequence, split the heads and give q, k, v as (B, H, L, E), e.g. "
        "x.unflatten(-1, (H, E)).transpose(1, 2), or x.unsqueeze(1) for one head"
    )
    if layout == "padded":
        raise LayoutError(f"layout='padded' takes q of shape (B, H, L, E), got 3-D shape {_shape(q)}; {fix}")
    if own == "padded":
        raise LayoutError(
            f"{mask!r} is a padded-layout mask but q is packed (N, H, E) or a (B, L, D) sequence: 3-D shape "
            f"{_shape(q)} reads {readings}; {fix}"
        )
    raise LayoutError(
        f"attend got 3-D q of shape {_shape(q)} under {under}, which does not state the layout: it reads "
        f"{readings}. For graph nodes pass layout='packed' (or a packed-layout mask such as Graph); {fix}"
    )


__all__ = ["Layout", "LayoutError", "resolve_layout"]
