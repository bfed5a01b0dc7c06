import math

import pytest
import torch

from attnmm import LearnedPE, RotaryPE, Sinusoidal2DPE, SinusoidalPE
from attnmm.nn import sinusoid


@pytest.mark.parametrize("d", [6, 7])
def test_sinusoidal_matches_formula(d):
    pe = SinusoidalPE(d)
    out = pe(torch.zeros(1, 5, d))[0]
    for pos in range(5):
        for c in range(d):
            i = c // 2
            angle = pos / 10000 ** (2 * i / d)
            expected = math.sin(angle) if c % 2 == 0 else math.cos(angle)
            assert out[pos, c].item() == pytest.approx(expected, abs=1e-6)


def test_sinusoidal_adds_and_offsets():
    torch.manual_seed(0)
    pe = SinusoidalPE(8)
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(pe(x) - x, pe.encode(torch.arange(6)).expand(2, -1, -1))
    # streaming: the second half encoded with an offset equals the full sequence's second half
    torch.testing.assert_close(pe(x[:, 3:], positions=torch.arange(3, 6)), pe(x)[:, 3:])
    per_item = torch.tensor([[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15]])
    out = pe(x, positions=per_item)
    torch.testing.assert_close(out[1] - x[1], pe.encode(torch.arange(10, 16)))
    assert pe(x.double()).dtype == torch.float64


def test_sinusoid_helper_real_positions():
    assert sinusoid(torch.tensor([0.5]), 2).tolist()[0] == pytest.approx([math.sin(0.5), math.cos(0.5)])


def test_learned_pe():
    torch.manual_seed(1)
    pe = LearnedPE(10, 4)
    x = torch.zeros(2, 3, 4)
    torch.testing.assert_close(pe(x)[0], pe.weight[:3])
    torch.testing.assert_close(pe(x, positions=torch.tensor([7, 8, 9]))[1], pe.weight[7:])
    pe(x).sum().backward()
    assert pe.weight.grad[:3].eq(2).all() and pe.weight.grad[3:].eq(0).all()


def test_sinusoidal_2d_row_column_structure():
    pe = Sinusoidal2DPE(8)
    enc = pe.encode(3, 4)  # (P, D), P = 12
    assert enc.shape == (12, 8)
    grid = enc.view(3, 4, 8)
    # first half depends on the row only, second half on the column only
    assert torch.equal(grid[:, :, :4], grid[:, :1, :4].expand(-1, 4, -1))
    assert torch.equal(grid[:, :, 4:], grid[:1, :, 4:].expand(3, -1, -1))
    torch.testing.assert_close(grid[:, 0, :4], sinusoid(torch.arange(3), 4))
    torch.testing.assert_close(grid[0, :, 4:], sinusoid(torch.arange(4), 4))
    x = torch.randn(2, 12, 8)
    torch.testing.assert_close(pe(x, 3, 4) - x, enc.expand(2, -1, -1))


def test_sinusoidal_2d_normalize():
    enc = Sinusoidal2DPE(4, normalize=True).encode(2, 4).view(2, 4, 4)
    last = 2 * math.pi
    assert enc[1, 0, 0].item() == pytest.approx(math.sin(last), abs=1e-6)  # last row -> 2 pi
    assert enc[0, 3, 2].item() == pytest.approx(math.sin(last), abs=1e-6)  # last column -> 2 pi


def test_rotary_preserves_norm_and_is_relative():
    torch.manual_seed(2)
    rope = RotaryPE(8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(m, n):
        qm = rope(q, positions=torch.tensor([m]))
        kn = rope(k, positions=torch.tensor([n]))
        return (qm * kn).sum().item()

    assert score(3, 7) == pytest.approx(score(10, 14), abs=1e-5)
    assert score(0, 5) == pytest.approx(score(20, 25), abs=1e-5)
    assert score(0, 0) == pytest.approx((q * k).sum().item(), abs=1e-5)
    assert score(3, 7) != pytest.approx(score(3, 8), abs=1e-3)
    x = torch.randn(2, 3, 5, 8)
    torch.testing.assert_close(rope(x).norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rope(x)[:, :, 0], x[:, :, 0])  # position 0 is the identity


def test_rotary_offsets_and_per_item_positions():
    torch.manual_seed(3)
    rope = RotaryPE(4, base=100.0)
    x = torch.randn(2, 2, 6, 4)
    torch.testing.assert_close(rope(x[:, :, 2:], positions=torch.arange(2, 6)), rope(x)[:, :, 2:])
    per_item = torch.stack([torch.arange(6), torch.arange(6) + 4])
    out = rope(x, positions=per_item)
    torch.testing.assert_close(out[0], rope(x[:1])[0])
    torch.testing.assert_close(out[1], rope(x[1:], positions=torch.arange(4, 10))[0])


def test_rotary_matches_complex_rotation():
    torch.manual_seed(4)
    rope = RotaryPE(6)
    x = torch.randn(1, 1, 4, 6)
    z = torch.view_as_complex(x.view(1, 1, 4, 3, 2))
    theta = 10000.0 ** (-torch.arange(3) * 2 / 6)
    angle = torch.arange(4).view(-1, 1) * theta
    expected = torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)).flatten(-2)
    torch.testing.assert_close(rope(x), expected)


def test_errors():
    with pytest.raises(ValueError, match="head_dim must be even, got 5"):
        RotaryPE(5)
    with pytest.raises(ValueError, match="d_model must be even, got 7"):
        Sinusoidal2DPE(7)
    with pytest.raises(ValueError, match="max_len=4 positions but the input has L=5"):
        LearnedPE(4, 2)(torch.zeros(1, 5, 2))
    with pytest.raises(ValueError, match=r"positions must lie in \[0, max_len=4\), got min 2 and max 4"):
        LearnedPE(4, 2)(torch.zeros(1, 3, 2), positions=torch.tensor([2, 3, 4]))
    with pytest.raises(ValueError, match=r"L = height \* width = 2 \* 3 = 6 patches, got L=5"):
        Sinusoidal2DPE(4)(torch.zeros(1, 5, 4), 2, 3)
    with pytest.raises(ValueError, match=r"shape \(B, L, D\) with D=4, got shape \(1, 5, 3\)"):
        SinusoidalPE(4)(torch.zeros(1, 5, 3))
    with pytest.raises(ValueError, match=r"positions must have shape \(L,\) = \(5,\)"):
        SinusoidalPE(4)(torch.zeros(1, 5, 4), positions=torch.arange(4))
    with pytest.raises(ValueError, match=r"E=4, got shape \(1, 5, 4\)"):
        RotaryPE(4)(torch.zeros(1, 5, 4))
    with pytest.raises(ValueError, match="base must be a number > 1"):
        SinusoidalPE(4, base=1.0)
