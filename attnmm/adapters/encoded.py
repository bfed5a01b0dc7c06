r"""An adapter with its own encoder: one modality's tower, e.g. a pretrained speech backbone inside a
multimodal model."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor, nn

from attnmm.adapters._registry import register_adapter
from attnmm.adapters.base import Adapter, Tokens
from attnmm.adapters.speech import SpeechAdapter
from attnmm.nn import Encoder


@register_adapter("encoded")
class EncodedAdapter(Adapter):
    r"""An adapter followed by an encoder of its own, as one adapter: the tokens of ``adapter``,
    encoded under their own mask, :math:`(\mathrm{encoder}(\mathbf{X}; A), A)` with
    :math:`(\mathbf{X}, A) = \mathrm{adapter}(\text{batch})`.

    In a :class:`~attnmm.adapters.MultimodalAdapter` this gives a modality a tower of its own before
    the modalities meet (the shared encoder then fuses the towers' outputs). Its parts are named
    ``adapter`` and ``encoder``, as a task's are, so a backbone trained as a single-modality task (a
    checkpoint, a file of :func:`~attnmm.lightning.pretrained.export_backbone`, a shipped name) loads
    into it with :func:`~attnmm.lightning.pretrained.load_backbone`, or at the start of ``fit`` with
    a :class:`~attnmm.lightning.Transfer`'s ``init_from`` and ``init_into`` (the tower's path, e.g.
    ``"adapter.adapters.audio"``).

    Args:
        adapter (Adapter, optional): the modality's adapter. (default: :obj:`None`, a
            :class:`~attnmm.adapters.SpeechAdapter`)
        encoder (nn.Module, optional): ``encoder(x, mask, *, tokens) -> h`` of the adapter's width, e.g.
            :class:`~attnmm.nn.Encoder`. (default: :obj:`None`, a 2-layer
            :class:`~attnmm.nn.Encoder` of the adapter's width)

    Shapes:
        - **input:** the batch ``adapter`` reads
        - **output:** :class:`Tokens` with x (B, L, D) (or packed (N, D)), the adapter's mask, lengths
          and batch vector

    Examples:
        >>> import torch
        >>> from attnmm.adapters import SpeechAdapter
        >>> from attnmm.nn import Encoder
        >>> from attnmm.masks import Window
        >>> tower = EncodedAdapter(SpeechAdapter(d_model=32, mask=Window(8, 2)), Encoder(32, 4, 2, 64))
        >>> tokens = tower(SpeechAdapter.example_batch(2))
        >>> tokens.x.shape[-1], tower.out_dim
        (32, 32)
    """

    def __init__(self, adapter: Adapter | None = None, encoder: nn.Module | None = None) -> None:
        super().__init__()
        if adapter is None:
            adapter = SpeechAdapter()
        if not isinstance(adapter, Adapter):
            raise TypeError(f"adapter must be an Adapter, got {type(adapter).__name__}")
        if encoder is None:
            encoder = Encoder(adapter.out_dim, 4, 2, 2 * adapter.out_dim)
        self.adapter = adapter
        self.encoder = encoder
        self.out_dim = adapter.out_dim

    def forward(self, batch: Any) -> Tokens:
        tokens = self.adapter(batch)
        h = self.encoder(tokens.x, tokens.mask, tokens=tokens)
        if not isinstance(h, Tensor) or h.shape[:-1] != tokens.x.shape[:-1] or h.size(-1) != self.out_dim:
            got = tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__
            raise ValueError(
                f"the encoder gave {got} for tokens {tuple(tokens.x.shape)}; an EncodedAdapter's encoder keeps the "
                f"tokens and their width {self.out_dim} (the adapter's d_model)"
            )
        return dataclasses.replace(tokens, x=h)

    @classmethod
    def example_batch(cls, batch_size: int = 2) -> dict[str, Tensor]:
        return SpeechAdapter.example_batch(batch_size)
