"""The corruptions of audio-visual pairs: exact SNR, clipped pixel noise, one zeroed square; RandomCorruption
draws each modality's corruption on its own, leaves a missing modality alone, and checks its options."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnmm.data import RandomCorruption
from attnmm.data.corruptions import add_audio_noise, add_image_noise, occlude


def _item(audio: bool = True, image: bool = True) -> dict:
    return {
        "waveform": torch.sin(torch.arange(800) / 3.0) if audio else torch.zeros(0),
        "image": torch.full((1, 28, 28), 0.5) if image else torch.zeros(1, 28, 28),
        "audio_present": audio, "image_present": image, "label": 7,
    }


@pytest.mark.parametrize("snr", [-10.0, 0.0, 12.5])
def test_audio_noise_has_the_snr(snr: float) -> None:
    w = torch.sin(torch.arange(1000) / 7.0)
    noisy = add_audio_noise(w, snr, np.random.default_rng(1))
    assert 10 * math.log10(float(w.pow(2).sum() / (noisy - w).pow(2).sum())) == pytest.approx(snr, abs=1e-3)
    assert add_audio_noise(torch.zeros(0), snr, np.random.default_rng(1)).numel() == 0


def test_image_noise_is_clipped_and_occlusion_is_one_square() -> None:
    image = torch.full((1, 28, 28), 0.5)
    noisy = add_image_noise(image.clone(), 0.5, np.random.default_rng(0))
    assert float(noisy.min()) == 0.0 and float(noisy.max()) == 1.0  # clipped at both ends
    assert float((noisy - image).std()) > 0.3
    hidden = occlude(image.clone(), 9, np.random.default_rng(0))
    rows, cols = (hidden[0] == 0).nonzero(as_tuple=True)
    assert int((hidden == 0).sum()) == 81 and int(rows.max() - rows.min()) == 8 and int(cols.max() - cols.min()) == 8


def test_random_corruption_draws_each_modality_on_its_own() -> None:
    corrupt = RandomCorruption(audio_p=0.5, image_p=0.5)
    rng = np.random.default_rng(0)
    audio = image = both = occluded = 0
    for _ in range(400):
        ref = _item()
        out = corrupt(ref, rng)
        a, i = not torch.equal(out["waveform"], ref["waveform"]), not torch.equal(out["image"], ref["image"])
        audio, image, both = audio + a, image + i, both + (a and i)
        if i:
            occluded += int((out["image"] == 0).sum()) >= 36 and float(out["image"].max()) == 0.5
        if a:  # the SNR in the range
            noise = out["waveform"] - ref["waveform"]
            snr = 10 * math.log10(float(ref["waveform"].pow(2).sum() / noise.pow(2).sum()))
            assert -10.0 - 1e-3 <= snr <= 20.0 + 1e-3
        assert torch.equal(ref["image"], torch.full((1, 28, 28), 0.5))  # the input item is not changed
        assert out["label"] == 7 and out["audio_present"] and out["image_present"]
    assert 150 < audio < 250 and 150 < image < 250 and 60 < both < 140  # independent, about half each
    assert 0.3 < occluded / image < 0.7  # occlusion or noise, about equally


def test_random_corruption_leaves_a_missing_modality_alone() -> None:
    corrupt = RandomCorruption(audio_p=1.0, image_p=1.0)
    out = corrupt(_item(audio=False), np.random.default_rng(0))
    assert out["waveform"].numel() == 0 and not out["audio_present"]
    out = corrupt(_item(image=False), np.random.default_rng(0))
    assert not bool(out["image"].any()) and not out["image_present"]
    nothing = RandomCorruption(audio_p=0.0, image_p=0.0)(_item(), np.random.default_rng(0))
    assert torch.equal(nothing["waveform"], _item()["waveform"]) and torch.equal(nothing["image"], _item()["image"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"audio_p": 1.5}, "audio_p is a probability"),
        ({"snr_db": (20.0, -10.0)}, "snr_db is a range"),
        ({"image_noise": (-0.1, 0.5)}, "image_noise is a range"),
        ({"occlusion": (0, 10)}, r"occlusion is a range .* \[1, 28\]"),
        ({"occlusion": (2.5, 10)}, "whole pixels"),
        ({"occlusion_share": -0.1}, "occlusion_share is a probability"),
    ],
)
def test_bad_options_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RandomCorruption(**kwargs)


def test_repr() -> None:
    assert repr(RandomCorruption()) == (
        "RandomCorruption(audio_p=0.5, snr_db=[-10.0, 20.0], image_p=0.5, image_noise=[0.1, 0.8], "
        "occlusion=[6, 20], occlusion_share=0.5)"
    )
