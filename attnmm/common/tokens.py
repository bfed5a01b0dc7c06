r"""What an adapter hands to an encoder: token features and the mask they attend under."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from attnmm.masks import Mask


@dataclass
class Tokens:
    """What an adapter hands to the encoder.

    Attributes:
        x (Tensor): token features, (B, L, D) in the padded layout or (N, D) packed.
        mask (Mask, optional): the allowed set the tokens attend under (``None``: full attention).
        lengths (LongTensor, optional): real tokens per item (B,), padded layout.
        batch (LongTensor, optional): item of each token (N,), packed layout (PyG's ``batch``).
    """

    x: Tensor
    mask: Mask | None = None
    lengths: Tensor | None = None
    batch: Tensor | None = None


__all__ = ["Tokens"]
