"""TextAdapter: embeddings, character features, positional encodings, masks and word dropout."""

from __future__ import annotations

import pytest
import torch

from attnmm.adapters import CharFeatures, TextAdapter
from attnmm.common.vocab import PAD, UNK
from attnmm.masks import Causal, Padding, Window
from attnmm.nn import Encoder, RotaryPE


def _batch(B: int = 3, L: int = 7, C: int = 5) -> dict[str, torch.Tensor]:
    lengths = torch.tensor([7, 4, 1])[:B]
    real = torch.arange(L) < lengths.view(-1, 1)
    tokens = torch.randint(2, 50, (B, L)).masked_fill(~real, PAD)
    chars = torch.randint(1, 20, (B, L, C)).masked_fill(~real.unsqueeze(-1), PAD)
    return {"tokens": tokens, "lengths": lengths, "chars": chars}


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary", "none"])
def test_shapes_and_masks(positional: str) -> None:
    adapter = TextAdapter(50, 16, positional=positional, max_len=8, mask=Window(2, 0), char_vocab_size=20).eval()
    tokens = adapter(_batch())
    assert tokens.x.shape == (3, 7, 16)
    assert repr(tokens.mask) == "Padding(lengths=[7, 4, 1]) & Window(left=2, right=0)"
    assert tokens.lengths.tolist() == [7, 4, 1]


def test_no_lengths_keeps_the_plain_mask() -> None:
    adapter = TextAdapter(50, 16, mask=Causal())
    tokens = adapter({"tokens": torch.randint(2, 50, (2, 5))})
    assert repr(tokens.mask) == "Causal()" and tokens.lengths is None
    assert TextAdapter(50, 16)({"tokens": torch.randint(2, 50, (2, 5))}).mask is None


def test_padding_only_mask() -> None:
    tokens = TextAdapter(50, 16)(_batch())
    assert isinstance(tokens.mask, Padding)


def test_positions_change_tokens_unless_rotary_or_none() -> None:
    same = {"tokens": torch.full((1, 4), 7)}
    for positional, differs in (("sinusoidal", True), ("learned", True), ("rotary", False), ("none", False)):
        x = TextAdapter(50, 16, positional=positional, max_len=8, dropout=0.0).eval()(same).x
        assert (not torch.allclose(x[0, 0], x[0, 3])) == differs, positional


def test_rotary_encoder_sees_order() -> None:
    adapter = TextAdapter(50, 16, positional="rotary", dropout=0.0).eval()
    encoder = Encoder(16, 2, 1, 32, dropout=0.0, rotary=RotaryPE(8)).eval()
    x = adapter({"tokens": torch.tensor([[3, 4, 5, 3]])}).x
    h = encoder(x)
    assert not torch.allclose(h[0, 0], h[0, 3], atol=1e-4)  # same token, different places


def test_char_features_ignore_padding_characters() -> None:
    feats = CharFeatures(20, channels=8)
    word = torch.tensor([[[3, 4, 5, 0, 0]]])
    longer_pad = torch.tensor([[[3, 4, 5, 0, 0, 0, 0]]])
    assert torch.allclose(feats(word), feats(longer_pad))
    assert torch.equal(feats(torch.zeros(1, 1, 4, dtype=torch.long)), torch.zeros(1, 1, 8))


def test_word_dropout_only_in_training() -> None:
    adapter = TextAdapter(50, 8, positional="none", word_dropout=0.5, dropout=0.0)
    ids = torch.randint(2, 50, (4, 64))
    torch.manual_seed(0)
    adapter.train()
    x_train = adapter({"tokens": ids}).x
    unk = adapter.embed.weight[UNK] * 8**0.5
    replaced = (x_train == unk).all(-1).float().mean()
    assert 0.3 < float(replaced) < 0.7
    adapter.eval()
    assert not (adapter({"tokens": ids}).x == unk).all(-1).any()


def test_gradients_reach_char_features() -> None:
    adapter = TextAdapter(50, 16, char_vocab_size=20)
    adapter(_batch()).x.sum().backward()
    assert adapter.chars is not None and adapter.chars.conv.weight.grad is not None


def test_errors_name_expected_and_actual() -> None:
    with pytest.raises(ValueError, match="token id 60 is outside the embedding of vocab_size=50"):
        TextAdapter(50, 8)({"tokens": torch.tensor([[60]])})
    with pytest.raises(ValueError, match="the batch needs 'chars'"):
        TextAdapter(50, 8, char_vocab_size=10)({"tokens": torch.tensor([[3]])})
    with pytest.raises(ValueError, match="positional must be"):
        TextAdapter(50, 8, positional="absolute")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tokens must be \\(B, L\\) ids, got shape \\(3,\\)"):
        TextAdapter(50, 8)({"tokens": torch.tensor([3, 4, 5])})
    with pytest.raises(ValueError, match="LearnedPE has max_len=4 positions but the input has L=6"):
        TextAdapter(50, 8, positional="learned", max_len=4)({"tokens": torch.full((1, 6), 3)})
    with pytest.raises(KeyError, match=r"needs a batch with 'tokens' \(B, L\).*got keys \['ids', 'lengths'\]"):
        TextAdapter(50, 8)({"ids": torch.tensor([[3]]), "lengths": torch.tensor([1])})


def test_lstm_char_features_match_a_word_by_word_bilstm() -> None:
    torch.manual_seed(0)
    feats = CharFeatures(20, char_dim=6, channels=8, encoder="lstm").double()
    chars = torch.tensor([[[3, 4, 5, 0], [7, 0, 0, 0], [0, 0, 0, 0]], [[9, 8, 7, 6], [2, 2, 0, 0], [5, 0, 0, 0]]])
    out = feats(chars)
    assert out.shape == (2, 3, 8) and out.dtype == torch.float64
    assert torch.equal(out[0, 2], torch.zeros(8, dtype=torch.float64))  # no word, no feature
    for b in range(2):
        for i in range(3):
            word = chars[b, i][chars[b, i] != PAD]
            if word.numel() == 0:
                continue
            marked = torch.cat([torch.tensor([20]), word, torch.tensor([21])])  # begin, chars, end
            _, (h, _) = feats.lstm(feats.embed(marked).unsqueeze(0))
            torch.testing.assert_close(out[b, i], torch.cat([h[0, 0], h[1, 0]]))
    # padding after the word changes nothing, and gradients reach the LSTM
    longer = torch.nn.functional.pad(chars, (0, 3))
    torch.testing.assert_close(feats(longer), out)
    out.sum().backward()
    assert feats.lstm is not None and feats.lstm.weight_ih_l0.grad is not None


def test_lstm_char_features_in_the_adapter_and_bad_options() -> None:
    adapter = TextAdapter(50, 16, char_vocab_size=20, char_channels=12, char_encoder="lstm")
    assert adapter(_batch()).x.shape == (3, 7, 16)
    assert torch.equal(CharFeatures(20, channels=8, encoder="lstm")(torch.zeros(1, 2, 3, dtype=torch.long)),
                       torch.zeros(1, 2, 8))
    with pytest.raises(ValueError, match="even"):
        CharFeatures(20, channels=7, encoder="lstm")
    with pytest.raises(ValueError, match="encoder must be"):
        CharFeatures(20, encoder="gru")  # type: ignore[arg-type]


def test_positional_encoding_and_char_encoder_are_injected_modules() -> None:
    from attnmm.nn import LearnedPE

    class Bag(torch.nn.Module):  # a character encoder of one's own: the mean character embedding
        out_dim = 8

        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(40, self.out_dim, padding_idx=PAD)

        def forward(self, chars: torch.Tensor) -> torch.Tensor:
            return self.embed(chars).mean(-2)  # (B, L, out_dim)

    torch.manual_seed(0)
    pos, bag = LearnedPE(20, 16), Bag()
    adapter = TextAdapter(vocab_size=50, d_model=16, positional=pos, char_encoder=bag, dropout=0.0).eval()
    assert adapter.pos is pos and adapter.chars is bag and adapter.proj is not None
    ids, chars = torch.randint(2, 50, (2, 5)), torch.randint(1, 40, (2, 5, 3))
    x = adapter({"tokens": ids, "chars": chars}).x
    expected = pos(adapter.proj(torch.cat([adapter.embed(ids) * 16**0.5, bag(chars)], -1)))
    torch.testing.assert_close(x, expected)
    with pytest.raises(ValueError, match="needs an int attribute out_dim"):
        TextAdapter(char_encoder=torch.nn.Identity())
    with pytest.raises(ValueError, match="positional must be a module or"):
        TextAdapter(positional="relative")  # type: ignore[arg-type]
