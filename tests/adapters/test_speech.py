from __future__ import annotations

import pytest
import torch

from attnmm.adapters import SpeechAdapter
from attnmm.masks import Chunk, Intersection, Padding, Window
from attnmm.nn import Encoder


def batch(lengths: list[int], seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    wave = torch.randn(len(lengths), max(lengths), generator=g) * 0.1
    for i, n in enumerate(lengths):
        wave[i, n:] = 0
    return {"waveform": wave, "lengths": torch.tensor(lengths), "label": torch.zeros(len(lengths), dtype=torch.long)}


def test_frame_counts_and_mask() -> None:
    adapter = SpeechAdapter(d_model=16, mask=Window(4, 1)).eval()
    lengths = [8000, 3000, 1200, 100]
    tokens = adapter(batch(lengths))
    expected = [int(adapter.num_frames(torch.tensor(n))) for n in lengths]
    assert tokens.lengths is not None and tokens.lengths.tolist() == expected
    assert expected[-1] == 0  # shorter than one window: no frames, an empty allowed set
    assert tokens.x.shape == (4, expected[0], 16)
    assert isinstance(tokens.mask, Intersection) and tokens.mask.structure.kind == "band"
    # 8 kHz, 10 ms hop, two stride-2 convolutions: ~25 tokens per second
    assert expected[0] == 23


@pytest.mark.parametrize("blocks", [0, 2])
def test_padding_does_not_change_real_frames(blocks: int) -> None:
    # an item's encoder output is the same alone or in a padded batch (with residual blocks too: the map's
    # padding frames are zeroed before each block)
    torch.manual_seed(0)
    adapter = SpeechAdapter(d_model=16, mask=Window(4, 1), residual_blocks=blocks).eval()
    for block in adapter.residual_blocks:  # not the identity they start as
        torch.nn.init.normal_(block.conv2.weight, std=0.1)
    encoder = Encoder(16, 2, 2, 32, dropout=0.0).eval()
    b = batch([8000, 3000])
    tokens = adapter(b)
    h = encoder(tokens.x, tokens.mask)
    alone = adapter({"waveform": b["waveform"][1:, :3000], "lengths": torch.tensor([3000])})
    h1 = encoder(alone.x, alone.mask)
    n = int(alone.lengths[0])  # type: ignore[index]
    torch.testing.assert_close(h[1, :n], h1[0, :n], atol=1e-5, rtol=1e-5)


def test_specaugment_only_in_training() -> None:
    adapter = SpeechAdapter(d_model=16, freq_mask=10, time_mask=20)
    b = batch([8000, 8000])
    adapter.eval()
    torch.testing.assert_close(adapter(b).x, adapter(b).x)
    adapter.train()
    torch.manual_seed(0)
    masked = adapter.augment(adapter.features(b["waveform"]))
    assert (masked == 0).any()
    adapter_off = SpeechAdapter(d_model=16, freq_mask=0, time_mask=0, dropout=0.0).train()
    torch.testing.assert_close(adapter_off(b).x, adapter_off(b).x)


def test_no_mask_is_padding_only() -> None:
    tokens = SpeechAdapter(d_model=8).eval()(batch([4000, 2000]))
    assert isinstance(tokens.mask, Padding)


def test_sample_rate_sets_window() -> None:
    a = SpeechAdapter(d_model=8, sample_rate=16000)
    assert (a.win_length, a.hop_length) == (400, 160)


def test_errors() -> None:
    with pytest.raises(TypeError, match="mask must be an attnmm Mask or None, got str"):
        SpeechAdapter(mask="window")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_mels must be >= 7"):
        SpeechAdapter(n_mels=6)
    with pytest.raises(ValueError, match=r"waveform must be \(B, T\), got shape \(8000,\)"):
        SpeechAdapter()({"waveform": torch.randn(8000), "lengths": torch.tensor([8000])})
    with pytest.raises(ValueError, match="d_model must be an int >= 1, got 0"):
        SpeechAdapter(d_model=0)
    assert Chunk(4, 1)  # keep the import used


def test_batch_errors_name_the_key_the_value_and_the_fix() -> None:
    adapter = SpeechAdapter(d_model=8)
    with pytest.raises(KeyError, match=r"missing \['lengths'\], got keys \['label', 'waveform'\]: .*torch.full"):
        adapter({"waveform": torch.randn(1, 8000), "label": torch.tensor([0])})
    with pytest.raises(KeyError, match=r"missing \['waveform', 'lengths'\], got keys \[\]"):
        adapter({})
    with pytest.raises(ValueError, match=r"between 0 and T = 800 .*got lengths\[1\] = 900: pad the waveforms"):
        adapter({"waveform": torch.randn(2, 800), "lengths": torch.tensor([10, 900])})  # not clamped silently
    with pytest.raises(ValueError, match=r"got lengths\[0\] = -1"):
        adapter({"waveform": torch.randn(2, 800), "lengths": torch.tensor([-1, 800])})
    with pytest.raises(
        ValueError, match=r"lengths must be \(B,\) = \(2,\), one sample count per waveform, got shape \(1,\)"
    ):
        adapter({"waveform": torch.randn(2, 800), "lengths": torch.tensor([800])})
    assert adapter({"waveform": torch.randn(2, 800), "lengths": torch.tensor([800, 0])}).lengths is not None


def _cmvn(feats: torch.Tensor) -> torch.Tensor:
    """Per-band mean and variance normalisation of one item's real frames (T, n_mels): the oracle."""
    return (feats - feats.mean(0)) / torch.sqrt(feats.var(0, unbiased=False) + 1e-5)


def test_utterance_norm_equals_per_item_computation() -> None:
    lengths = [8000, 3000, 1200, 300, 100]
    b = batch(lengths, seed=3)
    feats = torch.randn(5, 40, 7) * 3 + 5  # (B, T_mel, n_mels)
    num = torch.tensor([40, 17, 1, 0, 25])
    out = SpeechAdapter.normalize_utterances(feats, num)
    for i, n in enumerate(num.tolist()):
        if n:
            torch.testing.assert_close(out[i, :n], _cmvn(feats[i, :n]))
        assert not out[i, n:].any()  # padding frames are 0
    # the adapter: an item's features are the same alone and in a padded batch, and normalised
    adapter = SpeechAdapter(d_model=16, utterance_norm=True).eval()
    batched = adapter.features(b["waveform"], b["lengths"])
    for i, n in enumerate(lengths):
        alone = adapter.features(b["waveform"][i : i + 1, :n], torch.tensor([n]))[0]
        real = int(adapter.num_mel_frames(torch.tensor(n)))
        assert alone.shape[0] == real
        torch.testing.assert_close(batched[i, :real], alone, atol=1e-4, rtol=1e-4)  # FFTs of other sizes
    logmel = torch.log(adapter.melspec(b["waveform"][:1]) + 1e-6).transpose(1, 2)[0]  # (T_mel, n_mels)
    torch.testing.assert_close(batched[0], adapter.feature_norm(_cmvn(logmel)))


def test_utterance_norm_needs_lengths() -> None:
    adapter = SpeechAdapter(d_model=16, utterance_norm=True)
    with pytest.raises(ValueError, match="features\\(\\) needs lengths"):
        adapter.features(torch.randn(1, 800))
    # without it, features() takes the waveform alone (what a stream does)
    assert SpeechAdapter(d_model=16).features(torch.randn(1, 800)).shape == (1, 8, 40)


class _Stretch(torch.nn.Module):
    """Doubles every item by repeating each sample, and counts its calls."""

    calls = 0

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        return waveform.repeat_interleave(2, dim=1), 2 * lengths


def test_waveform_augment_only_in_training_and_lengths_follow() -> None:
    stretch = _Stretch()
    adapter = SpeechAdapter(d_model=16, waveform_augment=stretch, freq_mask=0, time_mask=0)
    b = batch([4000, 1500])
    tokens = adapter.train()(b)
    assert stretch.calls == 1
    assert tokens.lengths.tolist() == adapter.num_frames(torch.tensor([8000, 3000])).tolist()
    tokens = adapter.eval()(b)
    assert stretch.calls == 1
    assert tokens.lengths.tolist() == adapter.num_frames(torch.tensor([4000, 1500])).tolist()


def test_waveform_augment_must_be_a_module() -> None:
    with pytest.raises(TypeError, match="waveform_augment must be an nn.Module"):
        SpeechAdapter(waveform_augment=lambda w, n: (w, n))  # type: ignore[arg-type]


def test_residual_blocks_start_as_the_identity_and_refuse_streaming() -> None:
    from attnmm.adapters import SpeechStream

    torch.manual_seed(0)
    plain = SpeechAdapter(d_model=16, channels=8).eval()
    deep = SpeechAdapter(d_model=16, channels=8, residual_blocks=3).eval()
    assert set(plain.state_dict()) < set(deep.state_dict())  # no new key without blocks: old weights load
    assert not [k for k in plain.state_dict() if "residual" in k]
    deep.load_state_dict(plain.state_dict(), strict=False)
    b = batch([8000, 5000])
    n = int(plain(b).lengths[1])  # type: ignore[index]
    torch.testing.assert_close(deep(b).x[1, :n], plain(b).x[1, :n])  # each block starts as the identity
    deep.train()
    deep(b).x.sum().backward()
    assert all(p.grad is not None for p in deep.residual_blocks.parameters())
    encoder = Encoder(16, 2, 1, 32).eval()
    with pytest.raises(ValueError, match="residual_blocks.*cannot|residual_blocks, whose"):
        SpeechStream(deep, encoder)
    with pytest.raises(ValueError, match="residual_blocks"):
        SpeechAdapter(residual_blocks=-1)
