from __future__ import annotations

import math

import pytest
import torch
import torchaudio

from attnmm.data import AddNoise, ChainAugment, SpeedPerturb


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
    for module in (SpeedPerturb([0.5]), AddNoise(p=1.0), ChainAugment([SpeedPerturb([2.0]), AddNoise(p=1.0)])):
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
