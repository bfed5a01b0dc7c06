import math

import pytest
import torch
from torch import nn

from attnmm import MultiHeadAttention, RelativePositionBias, RotaryPE, attend
from attnmm.masks import Causal, Full, Graph, Padding, Window


def copy_into_torch(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """A torch.nn.MultiheadAttention with mha's weights."""
    ref = nn.MultiheadAttention(
        mha.embed_dim, mha.num_heads, bias=True, batch_first=True, kdim=mha.kdim, vdim=mha.vdim
    )
    with torch.no_grad():
        if ref._qkv_same_embed_dim:
            ref.in_proj_weight.copy_(torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]))
        else:
            ref.q_proj_weight.copy_(mha.q_proj.weight)
            ref.k_proj_weight.copy_(mha.k_proj.weight)
            ref.v_proj_weight.copy_(mha.v_proj.weight)
        ref.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
        ref.out_proj.weight.copy_(mha.out_proj.weight)
        ref.out_proj.bias.copy_(mha.out_proj.bias)
    return ref


def randomize_biases(mha: MultiHeadAttention) -> None:
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj, mha.out_proj):
            proj.bias.normal_()


def manual(mha: MultiHeadAttention, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Dense masked multi-head self-attention computed by hand; allowed (L, S) bool."""
    B, L, D = x.shape
    H, E = mha.num_heads, mha.head_dim
    q = mha.q_proj(x).view(B, L, H, E).transpose(1, 2)
    k = mha.k_proj(x).view(B, L, H, E).transpose(1, 2)
    v = mha.v_proj(x).view(B, L, H, E).transpose(1, 2)
    s = q @ k.transpose(-1, -2) / math.sqrt(E)
    a = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
    return mha.out_proj((a @ v).transpose(1, 2).reshape(B, L, D))


def test_self_attention_equals_torch():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4)
    randomize_biases(mha)
    ref = copy_into_torch(mha)
    x = torch.randn(3, 7, 16)
    expected, _ = ref(x, x, x, need_weights=False)
    torch.testing.assert_close(mha(x), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mha(x, mask=Full()), expected, atol=1e-5, rtol=1e-5)


def test_key_padding_equals_torch():
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 2)
    randomize_biases(mha)
    ref = copy_into_torch(mha)
    x = torch.randn(3, 6, 16)
    lengths = torch.tensor([6, 3, 1])
    key_padding_mask = torch.arange(6).view(1, -1) >= lengths.view(-1, 1)  # torch: True = ignore
    expected, w_ref = ref(x, x, x, key_padding_mask=key_padding_mask, average_attn_weights=False)
    out, weights = mha(x, mask=Padding(lengths), return_weights=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.to_dense(6, 6, 3), w_ref, atol=1e-5, rtol=1e-5)


def test_cross_attention_equals_torch():
    torch.manual_seed(2)
    mha = MultiHeadAttention(16, 4)
    randomize_biases(mha)
    ref = copy_into_torch(mha)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 9, 16)
    expected, _ = ref(x, memory, memory)
    torch.testing.assert_close(mha(x, memory), expected, atol=1e-5, rtol=1e-5)
    key_padding_mask = torch.arange(9).view(1, -1) >= torch.tensor([[9], [4]])
    expected, _ = ref(x, memory, memory, key_padding_mask=key_padding_mask)
    torch.testing.assert_close(mha(x, memory, mask=Padding([9, 4])), expected, atol=1e-5, rtol=1e-5)


def test_kdim_vdim_equals_torch():
    torch.manual_seed(3)
    mha = MultiHeadAttention(12, 3, kdim=5, vdim=7)
    randomize_biases(mha)
    ref = copy_into_torch(mha)
    x, key, value = torch.randn(2, 4, 12), torch.randn(2, 6, 5), torch.randn(2, 6, 7)
    expected, _ = ref(x, key, value)
    torch.testing.assert_close(mha(x, key, value), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mask", [Causal(), Window(2, 1), Window(0, 0)], ids=repr)
def test_equals_manual_masked(mask):
    torch.manual_seed(4)
    mha = MultiHeadAttention(16, 4)
    randomize_biases(mha)
    x = torch.randn(2, 9, 16)
    torch.testing.assert_close(mha(x, mask=mask), manual(mha, x, mask.dense(9)), atol=1e-5, rtol=1e-5)


def test_packed_graph_matches_padded_per_graph():
    torch.manual_seed(5)
    mha = MultiHeadAttention(8, 2)
    # two graphs of 3 and 4 nodes, fully connected with self loops, packed into N = 7 nodes
    sizes, start, edges = [3, 4], 0, []
    for n in sizes:
        idx = torch.arange(start, start + n)
        edges.append(torch.stack(torch.meshgrid(idx, idx, indexing="ij")).reshape(2, -1))
        start += n
    mask = Graph(torch.cat(edges, dim=1), num_nodes=7)
    x = torch.randn(7, 8)  # (N, D)
    out = mha(x, mask=mask)
    assert out.shape == (7, 8)
    torch.testing.assert_close(out[:3], mha(x[:3].unsqueeze(0))[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[3:], mha(x[3:].unsqueeze(0))[0], atol=1e-5, rtol=1e-5)
    out, weights = mha(x, mask=mask, return_weights=True)
    assert weights.batch is None and weights.values.shape == (mask.num_edges, 2)


def test_gradients_flow():
    torch.manual_seed(6)
    mha = MultiHeadAttention(8, 2, position_bias=RelativePositionBias.for_window(2, 2, 0))
    x = torch.randn(2, 6, 8, requires_grad=True)
    mha(x, mask=Window(2, 0) & Padding([6, 4])).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in mha.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert mha.position_bias.table.grad.abs().sum() > 0


def test_dropout_only_in_training():
    torch.manual_seed(7)
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 6, 8)
    mha.eval()
    torch.testing.assert_close(mha(x), mha(x))
    mha.train()
    assert not torch.allclose(mha(x), mha(x))


def test_rotary_and_position_bias_match_attend():
    torch.manual_seed(8)
    rope = RotaryPE(4)
    rpb = RelativePositionBias.for_window(2, 1, 1)
    mha = MultiHeadAttention(8, 2, rotary=rope, position_bias=rpb, bias=False)
    x, mask = torch.randn(1, 5, 8), Window(1, 1)
    q = rope(mha.q_proj(x).view(1, 5, 2, 4).transpose(1, 2))
    k = rope(mha.k_proj(x).view(1, 5, 2, 4).transpose(1, 2))
    v = mha.v_proj(x).view(1, 5, 2, 4).transpose(1, 2)
    extra = torch.randn(mask.nnz(5))
    o = attend(q, k, v, mask, bias=rpb(mask, 5, 5) + extra.unsqueeze(1), backend="reference")
    expected = mha.out_proj(o.transpose(1, 2).reshape(1, 5, 8))
    torch.testing.assert_close(mha(x, mask=mask, bias=extra), expected, atol=1e-5, rtol=1e-5)
    assert mha.q_proj.bias is None


def test_relu_score():
    mha = MultiHeadAttention(8, 2, score="relu")
    assert mha(torch.randn(2, 5, 8), mask=Causal()).shape == (2, 5, 8)


def test_errors():
    with pytest.raises(ValueError, match="divisible by num_heads, got embed_dim=10, num_heads=4"):
        MultiHeadAttention(10, 4)
    with pytest.raises(ValueError, match="rotary.head_dim must equal embed_dim / num_heads = 4, got 8"):
        MultiHeadAttention(8, 2, rotary=RotaryPE(8))
    with pytest.raises(ValueError, match="position_bias.num_heads must equal num_heads = 2, got 3"):
        MultiHeadAttention(8, 2, position_bias=RelativePositionBias.for_window(3, 1, 1))
    with pytest.raises(ValueError, match="dropout must be in"):
        MultiHeadAttention(8, 2, dropout=1.0)
    with pytest.raises(ValueError, match="score must be"):
        MultiHeadAttention(8, 2, score="sigmoid")
    mha = MultiHeadAttention(8, 2, kdim=3)
    with pytest.raises(ValueError, match=r"key must have 3 features .* got shape \(2, 4, 8\)"):
        mha(torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match=r"query must be \(B, L, D\)"):
        mha(torch.randn(8))
    with pytest.raises(ValueError, match="share the batch size B, got 2, 3, 3"):
        mha(torch.randn(2, 4, 8), torch.randn(3, 4, 3), torch.randn(3, 4, 8))
    with pytest.raises(ValueError, match="same number of keys S, got 4 and 5"):
        mha(torch.randn(2, 4, 8), torch.randn(2, 4, 3), torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="packed"):
        MultiHeadAttention(8, 2, rotary=RotaryPE(4))(torch.randn(5, 8))


def test_repr():
    assert "embed_dim=8, num_heads=2, kdim=3\n" in repr(MultiHeadAttention(8, 2, kdim=3))


def test_inputs_that_do_not_fit_name_the_parameter():
    mha = MultiHeadAttention(32, 4, vdim=8)
    x = torch.randn(2, 10, 32)
    with pytest.raises(ValueError, match=r"built with embed_dim=32, so query must have 32 features in its last dim, "
                       r"shape \(B, L, 32\), got shape \(2, 10, 16\); build it with embed_dim=16"):  # fmt: skip
        mha(torch.randn(2, 10, 16), x, torch.randn(2, 10, 8))
    with pytest.raises(ValueError, match=r"built with vdim=8, so value must have 8 features .* \(B, S, 8\), got shape"):
        mha(x, x, x)
    with pytest.raises(ValueError, match=r"got a 4-D tensor of shape \(2, 4, 10, 8\).*not \(B, H, L, E\)"):
        mha(torch.randn(2, 4, 10, 8))
    with pytest.raises(TypeError, match="query must be a floating-point tensor"):
        mha(x.long(), x, torch.randn(2, 10, 8))
