"""Self-attention contains convolution: the constructed attention layer equals the convolution."""

from __future__ import annotations

import pytest
import torch

from attnmm.attention import attend
from attnmm.masks import Grid
from attnmm.nn.cnn import ConvAsAttention


@pytest.mark.parametrize(
    ("c_in", "c_out", "kernel", "size"), [(3, 4, 3, (6, 5)), (1, 16, 3, (7, 7)), (2, 40, 3, (4, 9)), (2, 3, 5, (6, 6))]
)
def test_attention_reproduces_a_given_convolution(c_in: int, c_out: int, kernel: int, size: tuple[int, int]) -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2).double()
    layer = ConvAsAttention.from_conv(conv)
    assert layer.attn.num_heads == kernel**2
    x = torch.randn(2, c_in, *size, dtype=torch.float64)
    torch.testing.assert_close(layer(x), conv(x), atol=1e-12, rtol=0)  # equal up to float64 rounding
    conv32, layer32 = conv.float(), ConvAsAttention.from_conv(conv.float())
    torch.testing.assert_close(layer32(x.float()), conv32(x.float()), atol=1e-5, rtol=1e-5)


def test_each_head_attends_to_its_offset_only() -> None:
    layer = ConvAsAttention(1, 1)
    mask = Grid(5, 5, kernel=3)
    x = torch.randn(1, 25, layer.embed_dim)
    attn = layer.attn
    q = attn.q_proj(x).unflatten(-1, (9, layer.head_dim)).transpose(1, 2)  # (B, H, L, E)
    bias = attn.position_bias(mask, 25, 25, 1)  # type: ignore[misc]  # (P, H)
    _, weights = attend(q, q, q, mask, bias=bias, return_weights=True)
    pairs = mask.pairs(25, 25)
    centre = 12  # (2, 2): every offset is inside the grid
    rows = pairs.row == centre
    for h in range(9):
        w = weights.values[rows, h]
        target = centre + (h // 3 - 1) * 5 + (h % 3 - 1)
        assert pairs.col[rows][w.argmax()] == target and float(w.max()) == 1.0 and float(w.sum()) == 1.0


def test_from_conv_refuses_other_convolutions() -> None:
    with pytest.raises(ValueError, match="stride=\\(2, 2\\)"):
        ConvAsAttention.from_conv(torch.nn.Conv2d(1, 1, 3, stride=2, padding=1))
    with pytest.raises(ValueError, match="padding=\\(0, 0\\)"):
        ConvAsAttention.from_conv(torch.nn.Conv2d(1, 1, 3))
    with pytest.raises(ValueError, match="weight must have shape \\(C_out, C_in, k, k\\) = \\(2, 1, 3, 3\\)"):
        ConvAsAttention(1, 2).load_conv(torch.zeros(2, 1, 5, 5))
