r"""The image adapter: image -> patch embedding -> 2-D positions, under a Grid or full mask."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters._registry import register_adapter
from attnmm.adapters.base import Adapter, Tokens
from attnmm.masks import Mask
from attnmm.nn.positional import LearnedPE, Sinusoidal2DPE


@register_adapter("image")
class ImageAdapter(Adapter):
    r"""Image front end of a vision transformer ("An Image is Worth 16x16 Words", Dosovitskiy et
    al., 2021): non-overlapping patches, each embedded linearly, plus a 2-D positional encoding.

    .. math::
        \mathbf{X} = \mathrm{Conv2d}_{p \times p,\ \mathrm{stride}\ p}(\mathbf{I})
        \text{ flattened row-major} + \mathrm{PE}_{2D}, \qquad A = A_{\text{mask}}

    An image of ``height`` x ``width`` pixels gives a grid of ``height // p`` x ``width // p``
    patches (P of them, row-major: patch :math:`(r, c)` is token :math:`r \cdot W_p + c`), so a
    :class:`~attnmm.masks.Grid` mask built on that grid (``Grid(H_p, W_p, kernel=3)``) lets each
    patch attend to its 3 x 3 neighbourhood, a convolution's receptive field; ``None`` is full
    attention among all patches, as in ViT.

    Args:
        in_channels (int, optional): image channels. (default: :obj:`1`)
        patch_size (int, optional): patch side p in pixels. (default: :obj:`4`)
        d_model (int, optional): token width D. (default: :obj:`64`)
        positional (str, optional): ``"sinusoidal"`` (:class:`~attnmm.nn.Sinusoidal2DPE`),
            ``"learned"`` (one vector per patch, :class:`~attnmm.nn.LearnedPE` with
            ``max_patches`` positions) or ``"none"`` (e.g. with a relative position bias in the
            encoder). (default: :obj:`"sinusoidal"`)
        max_patches (int, optional): patches of the learned encoding. (default: :obj:`256`)
        mask (Mask, optional): the patches' attention pattern, e.g. ``Grid(7, 7, kernel=3)``
            for 28 x 28 images and ``patch_size=4``; checked against the patch grid.
            (default: :obj:`None`, full attention)
        normalize (tuple[float, float], optional): ``(mean, std)`` the pixels are standardised
            with. (default: :obj:`(0.0, 1.0)`)
        dropout (float, optional): dropout on the tokens. (default: :obj:`0.0`)

    Shapes:
        - **input:** a batch with ``image`` (B, C, height, width) (float, or uint8 scaled to [0, 1])
        - **output:** :class:`Tokens` with x (B, P, D) and the mask

    Examples:
        >>> import torch
        >>> from attnmm.masks import Grid
        >>> adapter = ImageAdapter(patch_size=4, d_model=32, mask=Grid(7, 7, kernel=3))
        >>> tokens = adapter({"image": torch.rand(2, 1, 28, 28)})
        >>> tokens.x.shape  # (B, P, D): a 7 x 7 grid of patches
        torch.Size([2, 49, 32])
        >>> tokens.mask
        Grid(height=7, width=7, kernel=3)
    """

    def __init__(
        self, in_channels: int = 1, patch_size: int = 4, d_model: int = 64,
        positional: Literal["sinusoidal", "learned", "none"] = "sinusoidal", max_patches: int = 256,
        mask: Mask | None = None, normalize: tuple[float, float] = (0.0, 1.0), dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.in_channels = check_nonneg_int("in_channels", in_channels, minimum=1)
        self.patch_size = check_nonneg_int("patch_size", patch_size, minimum=1)
        self.out_dim = check_nonneg_int("d_model", d_model, minimum=1)
        if positional not in ("sinusoidal", "learned", "none"):
            raise ValueError(f"positional must be 'sinusoidal', 'learned' or 'none', got {positional!r}")
        self.positional = positional
        if mask is not None and not isinstance(mask, Mask):
            raise TypeError(f"mask must be an attnmm Mask or None, got {type(mask).__name__}")
        self.mask = mask
        mean, std = normalize
        if not std > 0:
            raise ValueError(f"normalize = (mean, std) needs std > 0, got {normalize!r}")
        self.mean, self.std = float(mean), float(std)
        self.patch = nn.Conv2d(self.in_channels, self.out_dim, self.patch_size, stride=self.patch_size)
        self.pos: nn.Module | None = None
        if positional == "sinusoidal":
            self.pos = Sinusoidal2DPE(self.out_dim)
        elif positional == "learned":
            self.pos = LearnedPE(max_patches, self.out_dim)
        self.drop = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.patch.reset_parameters()
        if isinstance(self.pos, LearnedPE):
            self.pos.reset_parameters()

    def grid_size(self, height: int, width: int) -> tuple[int, int]:
        """Patch rows and columns of a ``height`` x ``width`` image."""
        return height // self.patch_size, width // self.patch_size

    def forward(self, batch: dict[str, Any]) -> Tokens:
        if "image" not in batch:
            raise KeyError(
                f"ImageAdapter needs a batch with 'image' (B, C, height, width), got keys {sorted(batch)}: "
                "the image DataModules' batches have it"
            )
        image = batch["image"]
        if image.dim() != 4 or image.size(1) != self.in_channels:
            raise ValueError(
                f"image must be (B, C, height, width) with C = in_channels = {self.in_channels}, "
                f"got shape {tuple(image.shape)}"
            )
        rows, cols = self.grid_size(image.size(2), image.size(3))
        if rows < 1 or cols < 1:
            raise ValueError(
                f"a {image.size(2)} x {image.size(3)} image is smaller than one {self.patch_size} x "
                f"{self.patch_size} patch; use a smaller patch_size"
            )
        pixels = image.float() / 255.0 if image.dtype == torch.uint8 else image
        pixels = (pixels - self.mean) / self.std
        x = self.patch(pixels).flatten(2).transpose(1, 2)  # (B, P, D), patches row-major
        if isinstance(self.pos, Sinusoidal2DPE):
            x = self.pos(x, rows, cols)
        elif self.pos is not None:
            x = self.pos(x)
        if self.mask is not None:
            self.mask.check(rows * cols, rows * cols, image.size(0))
        return Tokens(self.drop(x), self.mask)

    @classmethod
    def example_batch(cls, batch_size: int = 2) -> dict[str, Tensor]:
        generator = torch.Generator().manual_seed(0)
        return {
            "image": torch.rand(batch_size, 1, 28, 28, generator=generator),
            "label": torch.randint(0, 10, (batch_size,), generator=generator),
        }
