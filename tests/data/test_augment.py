from __future__ import annotations

import math

import pytest
import torch
import torchaudio

from attnmm.data import AddNoise, BackgroundNoise, ChainAugment, SpeedPerturb, TimeShift


def padded(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    wave = torch.randn(len(lengths), max(lengths), generator=g)
    for i, n in enumerate(lengths):
        wave[i, n:] = 0
    return wave, torch.tensor(lengths)


@pytest.mark.parametrize("factor", [0.9, 1.0, 1.1, 0.5])
def test_speed_equals_per_item_resampling(factor: float) -> None:
    wave, lengths = padded([800, 333, 1, 0, 640])
    out, new = SpeedPerturb([factor])(wave, lengths)
    orig = round(100 * factor)
    for b, n in enumerate(lengths.tolist()):
        alone = wave[b, :n]
        if orig != 100 and n:
            alone = torchaudio.functional.resample(wave[b : b + 1, :n], orig, 100)[0]
        assert int(new[b]) == alone.numel() == math.ceil(n / factor - 1e-9)
        torch.testing.assert_close(out[b, : alone.numel()], alone, atol=1e-5, rtol=1e-5)
        assert not out[b, alone.numel() :].any()  # padding stays zero
    assert out.size(1) == int(new.max())


def test_speed_mixes_factors_per_item() -> None:
    torch.manual_seed(0)
    wave, lengths = padded([900] * 32)
    out, new = SpeedPerturb([0.9, 1.0, 1.1])(wave, lengths)
    assert set(new.tolist()) == {1000, 900, 819}
    for b in range(32):
        assert not out[b, int(new[b]) :].any()


def test_augmentations_are_identity_in_eval() -> None:
    wave, lengths = padded([500, 200])
    chain = ChainAugment([SpeedPerturb([2.0]), AddNoise(p=1.0)])
    modules = (SpeedPerturb([0.5]), AddNoise(p=1.0), TimeShift(0.5), chain)
    for module in modules:
        out, new = module.eval()(wave, lengths)
        assert out is wave and new is lengths


def test_noise_snr_padding_and_probability() -> None:
    torch.manual_seed(0)
    wave, lengths = padded([20000, 12000, 5])
    out, new = AddNoise(min_snr_db=10.0, max_snr_db=10.0, p=1.0)(wave, lengths)
    assert new is lengths
    for b, n in enumerate(lengths.tolist()[:2]):
        noise = out[b, :n] - wave[b, :n]
        snr = 10 * math.log10(float(wave[b, :n].square().mean() / noise.square().mean()))
        assert abs(snr - 10.0) < 0.2
        assert not out[b, n:].any()
    assert torch.equal(AddNoise(p=0.0)(wave, lengths)[0], wave)
    # p = 0.5: about half of the items get noise
    many, n = padded([100] * 400)
    noisy = (AddNoise(p=0.5)(many, n)[0] != many).any(1).float().mean()
    assert 0.4 < float(noisy) < 0.6


def test_chain_applies_steps_in_order() -> None:
    wave, lengths = padded([700, 300])
    chain = ChainAugment([SpeedPerturb([0.5]), AddNoise(min_snr_db=20.0, max_snr_db=20.0, p=1.0)])
    torch.manual_seed(1)
    out, new = chain(wave, lengths)
    torch.manual_seed(1)
    expected = chain.steps[1](*chain.steps[0](wave, lengths))
    torch.testing.assert_close(out, expected[0])
    assert new.tolist() == expected[1].tolist() == [1400, 600]


def test_errors() -> None:
    with pytest.raises(ValueError, match="factors must be a non-empty list"):
        SpeedPerturb([])
    with pytest.raises(ValueError, match="factors must be a non-empty list"):
        SpeedPerturb([1.0, -0.9])
    with pytest.raises(ValueError, match="whole number"):
        SpeedPerturb([0.915])
    with pytest.raises(ValueError, match="min_snr_db <= max_snr_db"):
        AddNoise(min_snr_db=30.0, max_snr_db=10.0)
    with pytest.raises(ValueError, match="probability"):
        AddNoise(p=1.5)
    with pytest.raises(ValueError, match="non-empty list of nn.Modules"):
        ChainAugment([])
    with pytest.raises(ValueError, match="not modules: \\['function'\\]"):
        ChainAugment([SpeedPerturb(), lambda w, n: (w, n)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"waveform \(B, T\) and lengths \(B,\)"):
        SpeedPerturb()(torch.zeros(2, 10), torch.tensor([10]))
    with pytest.raises(ValueError, match=r"lengths must be sample counts in \[0, T = 10\]"):
        AddNoise()(torch.zeros(2, 10), torch.tensor([10, 11]))


def test_picked_by_class_path_in_a_config() -> None:
    from jsonargparse import ArgumentParser

    from attnmm.adapters import SpeechAdapter

    parser = ArgumentParser()
    parser.add_class_arguments(SpeechAdapter, "adapter")
    steps = [
        {"class_path": "attnmm.data.SpeedPerturb", "init_args": {"factors": [0.9, 1.1]}},
        {"class_path": "attnmm.data.AddNoise", "init_args": {"p": 0.25}},
    ]
    config = {"adapter": {"d_model": 16, "waveform_augment": {"class_path": "attnmm.data.ChainAugment",
                                                              "init_args": {"steps": steps}}}}
    adapter = parser.instantiate(parser.parse_object(config)).adapter
    chain = adapter.waveform_augment
    assert isinstance(chain, ChainAugment) and chain.steps[0].factors == [0.9, 1.1] and chain.steps[1].p == 0.25


def _slice_of(diff: torch.Tensor, clip: torch.Tensor) -> int | None:
    """The offset o with diff = g * clip[o:o+n] (the clip repeated) for some gain g > 0, else None."""
    n, size = diff.numel(), clip.numel()
    for o in range(size):
        piece = clip[(o + torch.arange(n)) % size]
        gain = float(diff @ piece / (piece @ piece))
        if gain > 0 and torch.allclose(diff, gain * piece, atol=1e-5):
            return o
    return None


def test_background_noise_mixes_slices_of_the_bank_at_the_snr() -> None:
    torch.manual_seed(0)
    bank = [torch.randn(1000), 3.0 * torch.randn(700)]
    noise = BackgroundNoise(min_snr_db=10.0, max_snr_db=10.0, p=1.0).set_noise(bank)
    wave, lengths = padded([600, 250, 1, 0, 700] * 4)
    out, new = noise(wave, lengths)
    assert new is lengths and out.shape == wave.shape
    drawn = set()
    for b, n in enumerate(lengths.tolist()):
        assert not out[b, n:].any()  # padding stays zero
        if n < 2:
            continue
        diff = out[b, :n] - wave[b, :n]
        snr = 10 * math.log10(float(wave[b, :n].square().mean() / diff.square().mean()))
        assert abs(snr - 10.0) < 1e-3
        offsets = [_slice_of(diff, clip) for clip in bank]  # a whole slice of one clip of the bank
        assert any(o is not None and o + n <= clip.numel() for o, clip in zip(offsets, bank))
        drawn.update((k, o) for k, o in enumerate(offsets) if o is not None)
    assert {k for k, _ in drawn} == {0, 1} and len(drawn) > 8  # random clips, random offsets


def test_background_noise_repeats_a_short_clip_and_keeps_silence() -> None:
    torch.manual_seed(1)
    noise = BackgroundNoise(min_snr_db=0.0, max_snr_db=20.0, p=1.0).set_noise([torch.randn(7)])
    wave, lengths = padded([40, 30])
    wave[1] = 0.0  # an all-zero item: nothing to scale the noise to, it stays as it is
    out, _ = noise(wave, lengths)
    diff = out[0, :40] - wave[0, :40]
    assert diff.abs().min() > 0 and torch.allclose(diff[:-7], diff[7:])  # the 7-sample clip, repeated
    assert _slice_of(diff, noise.noise[0]) is not None
    assert not out[1].any() and not out[0, 40:].any()


def test_background_noise_probability_eval_and_errors() -> None:
    torch.manual_seed(2)
    many, n = padded([100] * 400)
    noisy = (BackgroundNoise(p=0.5).set_noise([torch.randn(300)])(many, n)[0] != many).any(1).float().mean()
    assert 0.4 < float(noisy) < 0.6
    assert torch.equal(BackgroundNoise(p=0.0).set_noise([torch.randn(3)])(many, n)[0], many)
    idle = BackgroundNoise(p=1.0)
    out, new = idle.eval()(many, n)  # identity in eval, even without a bank
    assert out is many and new is n
    with pytest.raises(RuntimeError, match="no noise clips: pass it to SpeechCommandsDataModule as noise_augment"):
        idle.train()(many, n)
    with pytest.raises(ValueError, match=r"noise clips \[1\] are empty"):
        idle.set_noise([torch.ones(3), torch.ones(0)])
    with pytest.raises(ValueError, match="min_snr_db <= max_snr_db"):
        BackgroundNoise(min_snr_db=30.0, max_snr_db=10.0)
    with pytest.raises(ValueError, match="probability"):
        BackgroundNoise(p=-0.1)
    assert repr(BackgroundNoise()) == "BackgroundNoise(snr_db=[5, 20], p=0.8, noise_clips=0)"


def _shifted(clip: torch.Tensor, s: int) -> torch.Tensor:
    """``clip`` moved by ``s`` samples within its own length (the oracle of TimeShift)."""
    out = torch.zeros_like(clip)
    n = clip.numel()
    if abs(s) < n:  # out[t] = clip[t - s] wherever 0 <= t - s < n
        out[max(s, 0) : n + min(s, 0)] = clip[max(-s, 0) : n - max(s, 0)]
    return out


def test_time_shift_moves_each_item_within_its_length() -> None:
    torch.manual_seed(0)
    wave, lengths = padded([100, 40, 1, 0, 77])
    wave += 10.0 * (wave != 0)  # no real sample is 0, so a shift can be read off
    shift = TimeShift(max_shift=0.2)
    seen: dict[int, set[int]] = {b: set() for b in range(5)}
    for _ in range(60):
        out, new = shift(wave, lengths)
        assert new is lengths and out.shape == wave.shape
        for b, n in enumerate(lengths.tolist()):
            assert not out[b, n:].any()  # the padding stays zero
            clip = wave[b, :n]
            matches = [s for s in range(-n, n + 1) if torch.equal(out[b, :n], _shifted(clip, s))]
            assert matches, f"item {b} is not a shift of itself"
            s = min(matches, key=abs)
            assert abs(s) <= int(0.2 * n)  # at most 20% of the item's own length
            seen[b].add(s)
    assert len(seen[0]) > 10 and min(seen[0]) < 0 < max(seen[0])  # both ways, many shifts
    assert seen[2] == {0} and seen[3] == {0}  # 1 sample: floor(0.2) = 0, no shift


def test_time_shift_probability_and_errors() -> None:
    wave, lengths = padded([200] * 16)
    out, _ = TimeShift(max_shift=0.5, p=0.0)(wave, lengths)
    assert torch.equal(out, wave)
    out, _ = TimeShift(max_shift=0.0)(wave, lengths)
    assert out is wave
    assert repr(TimeShift(0.1, p=0.5)) == "TimeShift(max_shift=0.1, p=0.5)"
    with pytest.raises(ValueError, match=r"share of each item's length, in \[0, 1\)"):
        TimeShift(max_shift=1.0)
    with pytest.raises(ValueError, match="probability"):
        TimeShift(p=-0.1)
    with pytest.raises(ValueError, match=r"waveform \(B, T\) and lengths \(B,\)"):
        TimeShift()(torch.zeros(2, 10), torch.tensor([10]))
