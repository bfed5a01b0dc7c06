r"""Incremental decoding state: the key/value caches of attention layers and the hidden states of
recurrent layers, carried from one call of a causal model to the next."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.masks import Mask


class IncrementalState:
    r"""What a causal model keeps between calls when it reads a sequence a few tokens at a time.

    A causal model's output at position :math:`t` depends only on tokens :math:`\le t`, so
    generating one more token needs only that token's path through the network, given what each
    layer kept of the past:

    - an attention layer keeps its keys and values (a *key/value cache*); a query at position
      :math:`t` attends the cached keys :math:`j \in A(t)`. Under ``Causal()`` the cache grows with
      :math:`t`; under ``Window(left, 0)`` only the last ``left`` keys are kept, so it stays bounded;
    - a recurrent layer keeps its hidden (and cell) state, of constant size.

    Each layer stores its entry under itself (:meth:`get`, :meth:`set`), so one state serves a
    whole model, or an ensemble of models fed the same tokens. :attr:`offset` counts the tokens
    already read: the position of the next one (rotary and absolute positional encodings read it).
    The caller advances it after each call (:meth:`advance`).

    With ``max_keys``, attention layers keep at most that many keys, the current token's included:
    the model then computes its own mask intersected with ``Window(max_keys - 1, 0)``, the usual
    bounded context of generation.

    Args:
        max_keys (int, optional): most keys an attention layer attends per query. (default:
            :obj:`None`, the mask alone decides)

    Examples:
        >>> import torch
        >>> from attnmm.nn import MultiHeadAttention
        >>> from attnmm.masks import Causal
        >>> mha = MultiHeadAttention(16, num_heads=2).eval()
        >>> x = torch.randn(1, 5, 16)  # (B, L, D)
        >>> state = IncrementalState()
        >>> steps = []
        >>> for t in range(5):  # one token at a time, each attending the cached keys
        ...     steps.append(mha(x[:, t : t + 1], mask=Causal(), state=state))
        ...     state.advance(1)
        >>> torch.allclose(torch.cat(steps, 1), mha(x, mask=Causal()), atol=1e-6)
        True
        >>> state.num_bytes()  # keys and values of 5 tokens, 16 floats each
        640
    """

    def __init__(self, max_keys: int | None = None) -> None:
        self.max_keys = None if max_keys is None else check_nonneg_int("max_keys", max_keys, minimum=1)
        self.offset = 0
        self._entries: dict[nn.Module, Any] = {}

    def get(self, layer: nn.Module) -> Any:
        """The entry ``layer`` stored, or :obj:`None` before its first call."""
        return self._entries.get(layer)

    def set(self, layer: nn.Module, entry: Any) -> None:
        """Store ``layer``'s entry (a tensor or a tuple of tensors)."""
        self._entries[layer] = entry

    def advance(self, num_tokens: int) -> None:
        """Count ``num_tokens`` more tokens read."""
        self.offset += check_nonneg_int("num_tokens", num_tokens)

    def num_bytes(self) -> int:
        """Memory held by the state: every cached tensor's bytes."""
        tensors = (t for e in self._entries.values() for t in (e if isinstance(e, tuple) else (e,)))
        return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, Tensor))

    def __repr__(self) -> str:
        limit = "" if self.max_keys is None else f", max_keys={self.max_keys}"
        return f"IncrementalState(offset={self.offset}, layers={len(self._entries)}{limit})"


def causal_reach(mask: Mask | None, what: str) -> int | None:
    """How many keys before the query ``mask`` lets it attend, for a mask that is causal (no key
    after the query) and the same for every batch item; ``None`` for unbounded (``Causal()``).
    Anything else cannot be read incrementally: raise, naming the mask."""
    structure = mask.structure if mask is not None else None
    if structure is not None and not structure.batched:
        if structure.kind == "causal":
            return None
        if structure.kind == "band" and structure.right == 0:
            return structure.left
    raise ValueError(
        f"{what} reads a sequence incrementally, which needs a causal mask shared by the batch "
        f"(Causal(), Window(left, 0) or their intersection), got {mask!r}: a query must not see "
        "later keys, and padded items are not supported (feed the batch without lengths)"
    )


__all__ = ["IncrementalState"]
