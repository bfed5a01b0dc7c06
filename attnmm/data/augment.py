r"""Waveform augmentations for speech: speed perturbation, time shift, additive and background noise, on
padded batches.

Each is an :class:`~torch.nn.Module` called as ``augment(waveform, lengths) -> (waveform, lengths)``
on a zero-padded batch, waveform (B, T) and real samples per item lengths (B,). They act only in
training mode (``eval()`` makes them the identity), update ``lengths`` and leave the padding at zero,
so they can be handed to :class:`~attnmm.adapters.SpeechAdapter` as ``waveform_augment`` (or chained
with :class:`ChainAugment`) and picked in a config by ``class_path``, as the speech recipe page
(docs/recipes/speech.md) shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torchaudio
from torch import Tensor, nn

__all__ = ["AddNoise", "BackgroundNoise", "ChainAugment", "SpeedPerturb", "TimeShift"]


def _check_batch(name: str, waveform: Tensor, lengths: Tensor) -> None:
    if waveform.dim() != 2 or lengths.shape != (waveform.size(0),):
        raise ValueError(
            f"{name} takes waveform (B, T) and lengths (B,), got shapes {tuple(waveform.shape)} and "
            f"{tuple(lengths.shape)}"
        )
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > waveform.size(1)):
        raise ValueError(
            f"{name}: lengths must be sample counts in [0, T = {waveform.size(1)}], got {lengths.tolist()}"
        )


def _real(lengths: Tensor, size: int) -> Tensor:
    """(B, size) True on each item's real samples."""
    return torch.arange(size, device=lengths.device) < lengths[:, None]


class SpeedPerturb(nn.Module):
    r"""Speed perturbation by resampling ("Audio augmentation for speech recognition", Ko et al., 2015).

    Each item gets a factor :math:`\alpha` drawn uniformly from ``factors`` and is resampled from
    :math:`\alpha r` to :math:`r` Hz (:func:`torchaudio.functional.resample`), so it plays
    :math:`\alpha` times faster: :math:`n` real samples become :math:`\lceil n / \alpha \rceil`, and
    tempo and pitch both change. The batch is re-padded with zeros to its longest new item.

    Args:
        factors (Sequence[float], optional): the speed factors, each > 0, each
            :math:`\alpha \cdot` ``resolution`` a whole number. (default: ``(0.9, 1.0, 1.1)``)
        resolution (int, optional): the rates resampled between are :math:`\alpha` ``resolution`` and
            ``resolution`` (their ratio is all that matters); small values keep the filter short.
            (default: ``100``)

    Shapes:
        - **input:** waveform (B, T), lengths (B,)
        - **output:** waveform (B, T'), lengths (B,), T' the longest new length

    Examples:
        >>> import torch
        >>> speed = SpeedPerturb(factors=[0.5])
        >>> out, lengths = speed(torch.randn(2, 100), torch.tensor([100, 40]))
        >>> out.shape, lengths.tolist()
        (torch.Size([2, 200]), [200, 80])
        >>> speed.eval()(torch.randn(2, 100), torch.tensor([100, 40]))[1].tolist()  # identity in eval
        [100, 40]
    """

    def __init__(self, factors: Sequence[float] = (0.9, 1.0, 1.1), resolution: int = 100) -> None:
        super().__init__()
        factors = [float(f) for f in factors]
        if not factors or any(not f > 0 for f in factors):
            raise ValueError(f"factors must be a non-empty list of speeds > 0, e.g. [0.9, 1.0, 1.1], got {factors}")
        if resolution < 1:
            raise ValueError(f"resolution must be >= 1, got {resolution}")
        rates = [f * resolution for f in factors]
        if any(abs(r - round(r)) > 1e-6 for r in rates):
            raise ValueError(
                f"each factor times resolution must be a whole number (the resampling rates), got {rates} for "
                f"factors {factors} and resolution {resolution}; use factors with at most "
                f"{len(str(resolution)) - 1} decimals or raise resolution"
            )
        self.factors = factors
        self.resolution = resolution

    def forward(self, waveform: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        _check_batch(type(self).__name__, waveform, lengths)
        if not self.training or waveform.numel() == 0:
            return waveform, lengths
        choice = torch.randint(len(self.factors), (waveform.size(0),)).tolist()
        pieces: list[Tensor | None] = [None] * waveform.size(0)
        new_lengths = torch.empty_like(lengths)
        for k, factor in enumerate(self.factors):
            items = [b for b, c in enumerate(choice) if c == k]
            if not items:
                continue
            rows = torch.tensor(items, device=waveform.device)
            orig = round(factor * self.resolution)
            # n samples resampled from orig to resolution Hz: ceil(n * resolution / orig)
            n = (lengths[rows] * self.resolution + orig - 1) // orig  # (b,)
            if orig == self.resolution:
                out = waveform[rows]
            else:
                out = torchaudio.functional.resample(waveform[rows], orig, self.resolution)  # (b, T_k)
            for i, b in enumerate(items):
                pieces[b] = out[i, : int(n[i])]
            new_lengths[rows] = n
        size = int(new_lengths.max())
        result = waveform.new_zeros(waveform.size(0), size)  # (B, T')
        for b, piece in enumerate(pieces):
            assert piece is not None  # every item took one factor
            result[b, : piece.numel()] = piece
        return result, new_lengths

    def extra_repr(self) -> str:
        return f"factors={self.factors}"


class TimeShift(nn.Module):
    r"""A random time shift of each utterance within its own length (the shift augmentation of
    keyword spotting, e.g. Warden 2018 and Tang & Lin 2018's res8).

    With probability ``p`` an item of :math:`n` real samples is shifted by :math:`s` samples,
    :math:`s` drawn uniformly from the integers in :math:`[-\lfloor f n \rfloor, \lfloor f n \rfloor]`,
    :math:`f` = ``max_shift``:

    .. math::
        \tilde{x}_t = x_{t - s} \text{ for } 0 \le t - s < n, \qquad \tilde{x}_t = 0 \text{ otherwise},
        \qquad 0 \le t < n,

    so a positive shift delays the utterance and a negative one advances it; what leaves the item is
    dropped and what enters is silence. The shift is a share of each item's length (10% of a
    one-second clip is 100 ms at any sample rate), so it needs no sample rate. Lengths and padding
    are unchanged; ``eval()`` makes it the identity.

    Args:
        max_shift (float, optional): the largest shift, as a share of the item's real length, in
            ``[0, 1)``. (default: ``0.1``)
        p (float, optional): probability that an item is shifted. (default: ``1.0``)

    Shapes:
        - **input:** waveform (B, T), lengths (B,)
        - **output:** waveform (B, T), lengths (B,) (the same)

    Examples:
        >>> import torch
        >>> shift = TimeShift(max_shift=0.5)
        >>> _ = torch.manual_seed(0)
        >>> wave = torch.tensor([[1.0, 2.0, 3.0, 4.0, 0.0], [5.0, 6.0, 0.0, 0.0, 0.0]])
        >>> out, lengths = shift(wave, torch.tensor([4, 2]))
        >>> out, lengths.tolist()
        (tensor([[0., 0., 1., 2., 0.],
                [0., 5., 0., 0., 0.]]), [4, 2])
    """

    def __init__(self, max_shift: float = 0.1, p: float = 1.0) -> None:
        super().__init__()
        if not 0.0 <= max_shift < 1.0:
            raise ValueError(f"max_shift is a share of each item's length, in [0, 1) (0.1: 10%), got {max_shift}")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p is a probability, in [0, 1]; got {p}")
        self.max_shift, self.p = float(max_shift), float(p)

    def forward(self, waveform: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        _check_batch(type(self).__name__, waveform, lengths)
        if not self.training or waveform.numel() == 0 or self.max_shift == 0.0:
            return waveform, lengths
        B, T = waveform.shape
        n = lengths.to(waveform.device)  # (B,)
        limit = torch.floor(self.max_shift * n.double()).long()  # (B,)
        shift = (torch.rand(B, dtype=torch.float64) * (2 * limit.cpu() + 1)).floor().long() - limit.cpu()
        shift = shift.to(waveform.device) * (torch.rand(B) < self.p).to(waveform.device)  # (B,)
        t = torch.arange(T, device=waveform.device)  # (T,)
        source = t[None, :] - shift[:, None]  # (B, T): where each output sample comes from
        keep = (source >= 0) & (source < n[:, None]) & (t[None, :] < n[:, None])
        out = waveform.gather(1, source.clamp(0, T - 1)) * keep
        return out, lengths

    def extra_repr(self) -> str:
        return f"max_shift={self.max_shift:g}, p={self.p:g}"


class AddNoise(nn.Module):
    r"""White Gaussian noise at a random signal-to-noise ratio, on the real samples only.

    With probability ``p`` an item gets noise of power :math:`P_s / 10^{\mathrm{SNR}/10}`,
    :math:`P_s` the mean square of its real samples and the SNR drawn uniformly in
    ``[min_snr_db, max_snr_db]`` dB; its padding stays zero and its length unchanged.

    Args:
        min_snr_db (float, optional): lowest SNR in dB. (default: ``10.0``)
        max_snr_db (float, optional): highest SNR in dB. (default: ``30.0``)
        p (float, optional): probability that an item gets noise. (default: ``0.5``)

    Shapes:
        - **input:** waveform (B, T), lengths (B,)
        - **output:** waveform (B, T), lengths (B,) (the same)

    Examples:
        >>> import torch
        >>> noise = AddNoise(min_snr_db=20.0, max_snr_db=20.0, p=1.0)
        >>> wave = torch.tensor([[1.0, -1.0, 1.0, -1.0, 1.0, 0.0, 0.0, 0.0]])  # 5 real samples
        >>> out, lengths = noise(wave, torch.tensor([5]))
        >>> bool((out[0, :5] != wave[0, :5]).all()), out[0, 5:].tolist(), lengths.tolist()
        (True, [0.0, 0.0, 0.0], [5])
    """

    def __init__(self, min_snr_db: float = 10.0, max_snr_db: float = 30.0, p: float = 0.5) -> None:
        super().__init__()
        self.min_snr_db, self.max_snr_db, self.p = _check_snr(min_snr_db, max_snr_db, p)

    def forward(self, waveform: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        _check_batch(type(self).__name__, waveform, lengths)
        if not self.training or waveform.numel() == 0:
            return waveform, lengths
        real = _real(lengths.to(waveform.device), waveform.size(1))  # (B, T)
        power = waveform.square().masked_fill(~real, 0.0).sum(1) / lengths.clamp(min=1).to(waveform)  # (B,)
        snr_db = torch.empty_like(power).uniform_(self.min_snr_db, self.max_snr_db)
        on = torch.rand_like(power) < self.p
        std = (power / 10.0 ** (snr_db / 10.0)).sqrt() * on  # (B,)
        noise = torch.randn_like(waveform) * std[:, None]
        return waveform + noise.masked_fill(~real, 0.0), lengths

    def extra_repr(self) -> str:
        return f"snr_db=[{self.min_snr_db:g}, {self.max_snr_db:g}], p={self.p:g}"


def _check_snr(min_snr_db: float, max_snr_db: float, p: float) -> tuple[float, float, float]:
    if not min_snr_db <= max_snr_db or not (math.isfinite(min_snr_db) and math.isfinite(max_snr_db)):
        raise ValueError(f"need finite min_snr_db <= max_snr_db, got {min_snr_db} and {max_snr_db}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p is a probability, in [0, 1]; got {p}")
    return float(min_snr_db), float(max_snr_db), float(p)


class BackgroundNoise(nn.Module):
    r"""Recorded background noise at a random signal-to-noise ratio, on the real samples only (the
    background-noise mixing of Speech Commands' training, Warden 2018).

    With probability ``p`` an item :math:`\mathbf{x}` of :math:`T_b` real samples gets

    .. math::
        \tilde{\mathbf{x}} = \mathbf{x} + g\, \mathbf{n}_{o:o+T_b}, \qquad
        g = \sqrt{\frac{P_x}{P_n\, 10^{\mathrm{SNR}/10}}}

    where :math:`\mathbf{n}` is a clip drawn uniformly from the noise bank, :math:`o` a random offset
    in it (the clip repeats when shorter than the item), :math:`P_x` and :math:`P_n` the mean squares
    of the item's real samples and of the noise slice, and the SNR is drawn uniformly in
    ``[min_snr_db, max_snr_db]`` dB. Padding stays zero and lengths are unchanged; ``eval()`` makes it
    the identity. An all-zero item or noise slice is left as it is.

    The bank is set by :meth:`set_noise`. :class:`~attnmm.data.SpeechCommandsDataModule` does that
    when given the module as ``noise_augment``: it sets the training split's ``_silence_`` clips (or
    slices of ``_background_noise_``) and applies the module to the training batches only, so no noise
    heard in training is in the validation or test clips.

    Args:
        min_snr_db (float, optional): lowest SNR in dB. (default: ``5.0``)
        max_snr_db (float, optional): highest SNR in dB. (default: ``20.0``)
        p (float, optional): probability that an item gets noise. (default: ``0.8``)

    Shapes:
        - **input:** waveform (B, T), lengths (B,)
        - **output:** waveform (B, T), lengths (B,) (the same)

    Examples:
        >>> import torch
        >>> noise = BackgroundNoise(min_snr_db=10.0, max_snr_db=10.0, p=1.0).set_noise([torch.randn(50)])
        >>> noise
        BackgroundNoise(snr_db=[10, 10], p=1, noise_clips=1)
        >>> wave = torch.tensor([[1.0, -1.0, 1.0, -1.0, 1.0, 0.0, 0.0, 0.0]])  # 5 real samples
        >>> out, lengths = noise(wave, torch.tensor([5]))
        >>> bool((out[0, :5] != wave[0, :5]).all()), out[0, 5:].tolist(), lengths.tolist()
        (True, [0.0, 0.0, 0.0], [5])
    """

    def __init__(self, min_snr_db: float = 5.0, max_snr_db: float = 20.0, p: float = 0.8) -> None:
        super().__init__()
        self.min_snr_db, self.max_snr_db, self.p = _check_snr(min_snr_db, max_snr_db, p)
        self.noise: list[Tensor] = []  # the bank: data, not state, so not a buffer (kept out of checkpoints)

    def set_noise(self, clips: Sequence[Tensor]) -> BackgroundNoise:
        r"""Use ``clips`` (1-D tensors of samples, none empty) as the noise bank; returns ``self``."""
        bank = [torch.as_tensor(c, dtype=torch.float32).detach().flatten() for c in clips]
        empty = [i for i, c in enumerate(bank) if c.numel() == 0]
        if empty:
            raise ValueError(f"noise clips {empty[:10]} are empty; every noise clip needs at least one sample")
        self.noise = bank
        return self

    def forward(self, waveform: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        _check_batch(type(self).__name__, waveform, lengths)
        if not self.training or waveform.numel() == 0:
            return waveform, lengths
        if not self.noise:
            raise RuntimeError(
                "BackgroundNoise has no noise clips: pass it to SpeechCommandsDataModule as noise_augment (which "
                "gives it the training split's noise after setup('fit')), or call set_noise(clips) first"
            )
        out = waveform.clone()
        picks = torch.randint(len(self.noise), (waveform.size(0),)).tolist()
        on = (torch.rand(waveform.size(0)) < self.p).tolist()
        snr_db = torch.empty(waveform.size(0)).uniform_(self.min_snr_db, self.max_snr_db)
        for b, n in enumerate(lengths.tolist()):
            if not on[b] or n == 0:
                continue
            clip = self.noise[picks[b]]
            size = clip.numel()
            offset = int(torch.randint(size - n + 1 if size >= n else size, ()))  # a whole slice fits, if it can
            piece = clip[(offset + torch.arange(n)) % size].to(waveform)  # (T_b,), the clip repeated if short
            signal = waveform[b, :n].square().mean()
            noise_power = piece.square().mean()
            if float(signal) == 0.0 or float(noise_power) == 0.0:
                continue
            gain = (signal / (noise_power * 10.0 ** (float(snr_db[b]) / 10.0))).sqrt()
            out[b, :n] += gain * piece
        return out, lengths

    def extra_repr(self) -> str:
        return f"snr_db=[{self.min_snr_db:g}, {self.max_snr_db:g}], p={self.p:g}, noise_clips={len(self.noise)}"


class ChainAugment(nn.Module):
    r"""Waveform augmentations applied one after the other, each ``(waveform, lengths) -> (waveform, lengths)``.

    Args:
        steps (list[nn.Module]): the augmentations, in order, e.g. ``[SpeedPerturb(), AddNoise()]``.

    Shapes:
        - **input:** waveform (B, T), lengths (B,)
        - **output:** waveform (B, T'), lengths (B,), as the last step returns them

    Examples:
        >>> chain = ChainAugment([SpeedPerturb([0.9, 1.1]), AddNoise(p=1.0)])
        >>> chain
        ChainAugment(
          (steps): ModuleList(
            (0): SpeedPerturb(factors=[0.9, 1.1])
            (1): AddNoise(snr_db=[10, 30], p=1)
          )
        )
    """

    def __init__(self, steps: list[nn.Module]) -> None:
        super().__init__()
        bad = [type(s).__name__ for s in steps if not isinstance(s, nn.Module)]
        if not steps or bad:
            raise ValueError(
                "steps must be a non-empty list of nn.Modules called as (waveform, lengths) -> (waveform, lengths), "
                f"e.g. [SpeedPerturb(), AddNoise()]; got {len(steps)} steps, not modules: {bad}"
            )
        self.steps = nn.ModuleList(steps)

    def forward(self, waveform: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        for step in self.steps:
            waveform, lengths = step(waveform, lengths)
        return waveform, lengths


def noise_takers(augment: nn.Module) -> list[nn.Module]:
    """The modules of ``augment`` that take a noise bank (a ``set_noise`` method, e.g. :class:`BackgroundNoise`)."""
    return [m for m in augment.modules() if callable(getattr(m, "set_noise", None))]


def set_noise_bank(augment: nn.Module, noise: Sequence[Tensor], missing: str) -> None:
    """Give ``noise`` to every module of ``augment`` that takes a noise bank; refuse an empty one (``missing``
    says why there is none)."""
    if not noise:
        raise ValueError(f"noise_augment needs noise clips, but {missing}; add them or drop noise_augment")
    for module in noise_takers(augment):
        module.set_noise(noise)  # type: ignore[operator]
