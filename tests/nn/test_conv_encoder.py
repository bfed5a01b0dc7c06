"""ConvEncoder: a CNN over patch tokens behind the encoder(x, mask) interface."""

from __future__ import annotations

import re

import pytest
import torch

from attnmm.masks import Full, Grid, Mask, Padding, Window
from attnmm.nn.cnn import ConvEncoder


def test_grid_from_mask_or_argument() -> None:
    x = torch.randn(2, 12, 8)
    enc = ConvEncoder(8, 2, dim_feedforward=16).eval()
    out = enc(x, Grid(3, 4, kernel=3))
    assert out.shape == (2, 12, 8)
    explicit = ConvEncoder(8, 2, dim_feedforward=16, grid_size=(3, 4)).eval()
    explicit.load_state_dict(enc.state_dict())
    torch.testing.assert_close(explicit(x), out)
    whole = ConvEncoder(8, 2, dim_feedforward=16).eval()
    whole.load_state_dict(enc.state_dict())
    torch.testing.assert_close(whole(x, Padding([12, 12]) & Grid(3, 4, 3)), out)  # whole images: the same


def test_locality_matches_the_kernel() -> None:
    enc = ConvEncoder(4, 1, kernel=3, dim_feedforward=8, grid_size=(5, 5)).eval()
    x = torch.randn(1, 25, 4, requires_grad=True)
    enc(x)[0, 12, 0].backward()  # the centre patch (2, 2)
    touched = (x.grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist()
    assert touched == [6, 7, 8, 11, 12, 13, 16, 17, 18]


def test_errors() -> None:
    with pytest.raises(ValueError, match="needs the patch grid"):
        ConvEncoder(4, 1)(torch.randn(1, 9, 4), None)
    with pytest.raises(ValueError, match="a 3 x 3 grid has 9 patches, the input has L=10"):
        ConvEncoder(4, 1, grid_size=(3, 3))(torch.randn(1, 10, 4))


@pytest.mark.parametrize(
    "mask",
    [Grid(3, 4, kernel=5), Grid(3, 4, kernel=3, dilation=2), Grid(3, 4, kernel=3, border="shift"),
     Grid(3, 4, kernel=3) & Padding([12, 8]), Grid(3, 4, kernel=3) & Window(1, 1), Window(1, 1), Full()],
    ids=repr,
)
def test_a_mask_the_convolution_does_not_compute_is_refused_by_name(mask: Mask) -> None:
    """A 3 x 3 convolution computes Grid(h, w, kernel=3) and nothing else: any other mask (another
    kernel or dilation, NATTEN's border, padded images, a composition, no grid) is named, not ignored."""
    with pytest.raises(ValueError, match=r"ConvEncoder computes a 3 x 3 convolution.*not " + re.escape(repr(mask))):
        ConvEncoder(8, 1, dim_feedforward=16, grid_size=(3, 4))(torch.randn(2, 12, 8), mask)
