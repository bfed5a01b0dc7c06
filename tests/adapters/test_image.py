"""ImageAdapter: patch embedding, 2-D positions, Grid and full masks."""

from __future__ import annotations

import pytest
import torch

from attnmm.adapters import ImageAdapter
from attnmm.masks import Grid


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "none"])
def test_patch_grid(positional: str) -> None:
    adapter = ImageAdapter(in_channels=3, patch_size=4, d_model=16, positional=positional, mask=Grid(4, 8, 3))
    tokens = adapter({"image": torch.rand(2, 3, 16, 32)})
    assert tokens.x.shape == (2, 32, 16)  # a 4 x 8 grid of patches
    assert repr(tokens.mask) == "Grid(height=4, width=8, kernel=3)"
    assert ImageAdapter(d_model=16)({"image": torch.rand(1, 1, 28, 28)}).mask is None  # full attention


def test_patches_are_row_major_and_local() -> None:
    adapter = ImageAdapter(patch_size=4, d_model=8, positional="none")
    image = torch.zeros(1, 1, 8, 12)
    image[0, 0, 4:8, 8:12] = 1.0  # patch (row 1, col 2) -> token 1 * 3 + 2 = 5
    x = adapter({"image": image}).x[0]
    changed = (x - x[0]).abs().sum(-1) > 1e-6
    assert changed.nonzero().flatten().tolist() == [5]


def test_uint8_images_are_scaled() -> None:
    adapter = ImageAdapter(d_model=8)
    image = torch.randint(0, 256, (1, 1, 28, 28), dtype=torch.uint8)
    assert torch.allclose(adapter({"image": image}).x, adapter({"image": image.float() / 255}).x)


def test_errors() -> None:
    with pytest.raises(ValueError, match="needs L = S = height \\* width = 16 patches, got L=49"):
        ImageAdapter(mask=Grid(4, 4, 3))({"image": torch.rand(1, 1, 28, 28)})
    with pytest.raises(ValueError, match="C = in_channels = 3, got shape \\(1, 1, 28, 28\\)"):
        ImageAdapter(in_channels=3)({"image": torch.rand(1, 1, 28, 28)})
    with pytest.raises(ValueError, match="smaller than one 8 x 8 patch"):
        ImageAdapter(patch_size=8)({"image": torch.rand(1, 1, 4, 4)})
    with pytest.raises(KeyError, match=r"needs a batch with 'image' \(B, C, height, width\), got keys \['images'\]"):
        ImageAdapter()({"images": torch.rand(1, 1, 28, 28)})
