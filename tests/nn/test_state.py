"""IncrementalState: key/value caches read one token at a time equal the whole-sequence forward."""

from __future__ import annotations

import pytest
import torch

from attnmm.masks import Causal, Chunk, Full, Padding, Window
from attnmm.nn import Encoder, IncrementalState, MultiHeadAttention, RelativePositionBias, RotaryPE

D, H = 16, 4


def _read_incrementally(model, x, mask, state, first: int):
    """The prompt's ``first`` tokens in one call, then one token per call."""
    outs = [model(x[:, :first], mask, state=state)]
    state.advance(first)
    for t in range(first, x.size(1)):
        outs.append(model(x[:, t : t + 1], mask, state=state))
        state.advance(1)
    return torch.cat(outs, 1)


MASKS = [Causal(), Window(3, 0), Window(0, 0), Causal() & Window(2, 0), Window(5, 0) & Full()]


@pytest.mark.parametrize("mask", MASKS, ids=repr)
@pytest.mark.parametrize("max_keys", [None, 1, 4])
@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("first", [1, 3])
def test_encoder_read_token_by_token_equals_one_call(mask, max_keys, rotary, first) -> None:
    torch.manual_seed(0)
    enc = Encoder(D, H, 2, 32, dropout=0.0, rotary=RotaryPE(D // H) if rotary else None).eval().double()
    x = torch.randn(2, 11, D, dtype=torch.float64)
    reference = enc(x, mask if max_keys is None else mask & Window(max_keys - 1, 0))
    got = _read_incrementally(enc, x, mask, IncrementalState(max_keys), first)
    torch.testing.assert_close(got, reference)


def test_the_cache_grows_under_causal_and_stays_bounded_under_a_window() -> None:
    mha = MultiHeadAttention(D, H).eval()
    x = torch.randn(1, 20, D)
    sizes = {}
    for name, mask in (("causal", Causal()), ("window", Window(4, 0))):
        state = IncrementalState()
        sizes[name] = []
        for t in range(20):
            mha(x[:, t : t + 1], mask=mask, state=state)
            state.advance(1)
            sizes[name].append(state.num_bytes())
    per_key = 2 * D * 4  # a key and a value of D float32s
    assert sizes["causal"] == [per_key * (t + 1) for t in range(20)]
    assert sizes["window"] == [per_key * min(t + 1, 4) for t in range(20)]  # the last `left` keys
    assert repr(state) == "IncrementalState(offset=20, layers=1)"


def test_one_state_serves_several_models() -> None:
    a, b = MultiHeadAttention(D, H).eval(), MultiHeadAttention(D, H).eval()
    x = torch.randn(1, 6, D)
    state = IncrementalState()
    outs_a, outs_b = [], []
    for t in range(6):
        outs_a.append(a(x[:, t : t + 1], mask=Causal(), state=state))
        outs_b.append(b(x[:, t : t + 1], mask=Causal(), state=state))
        state.advance(1)
    torch.testing.assert_close(torch.cat(outs_a, 1), a(x, mask=Causal()))
    torch.testing.assert_close(torch.cat(outs_b, 1), b(x, mask=Causal()))


@pytest.mark.parametrize(
    "mask",
    [None, Full(), Window(2, 1), Chunk(2, 1), Causal() & Padding([3]), Causal() | Window(1, 1), ~Causal()],
    ids=repr,
)
def test_masks_that_see_later_keys_or_depend_on_the_item_are_refused(mask) -> None:
    with pytest.raises(ValueError, match="incrementally, which needs a causal mask shared by the batch"):
        MultiHeadAttention(D, H)(torch.randn(1, 3, D), mask=mask, state=IncrementalState())


def test_other_errors() -> None:
    mha = MultiHeadAttention(D, H)
    with pytest.raises(ValueError, match="cross-attention and packed inputs have no incremental form"):
        mha(torch.randn(1, 3, D), torch.randn(1, 4, D), mask=Causal(), state=IncrementalState())
    with pytest.raises(ValueError, match="cross-attention and packed inputs have no incremental form"):
        mha(torch.randn(3, D), mask=Causal(), state=IncrementalState())
    state = IncrementalState()
    mha(torch.randn(1, 3, D), mask=Causal(), state=state)
    with pytest.raises(ValueError, match="after the first call, state= reads one token at a time, got 2 tokens"):
        mha(torch.randn(1, 2, D), mask=Causal(), state=state)
    biased = Encoder(D, H, 1, 32, position_bias=RelativePositionBias(H, max_offset=4))
    with pytest.raises(ValueError, match="state= does not support score biases"):
        biased(torch.randn(1, 3, D), Causal(), state=IncrementalState())
    with pytest.raises(ValueError, match="max_keys must be an int >= 1, got 0"):
        IncrementalState(max_keys=0)
