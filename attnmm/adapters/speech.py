r"""The speech adapter: waveform -> log-mel -> convolutional subsampling -> frames under a mask."""

from __future__ import annotations

from typing import Any, cast

import torch
import torchaudio
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters._registry import register_adapter
from attnmm.adapters.base import Adapter, Tokens
from attnmm.masks import Mask, Padding
from attnmm.nn.positional import SinusoidalPE

#: Each convolution of the subsampling: kernel 3 over time, stride 2, no padding.
_KERNEL, _STRIDE = 3, 2


class _ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))): two padded 3 x 3 convolutions, the second starting at zero."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.conv1.reset_parameters()
        nn.init.zeros_(self.conv2.weight)
        if self.conv2.bias is not None:
            nn.init.zeros_(self.conv2.bias)

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        """``keep`` (B, 1, L, 1): the real frames; the others are set to 0 before each convolution."""
        if keep is not None:
            x = x * keep
        y = self.conv1(torch.relu(x))
        if keep is not None:
            y = y * keep
        return x + self.conv2(torch.relu(y))


@register_adapter("speech")
class SpeechAdapter(Adapter):
    r"""Speech front end of a truncated-attention encoder ("Conformer", Gulati et al., 2020;
    "SpecAugment", Park et al., 2019).

    .. math::
        \mathbf{F} = \mathrm{LN}\big(\mathrm{N}(\log(\mathrm{Mel}(\mathrm{Aug}(\mathbf{w})) + 10^{-6}))\big), \quad
        \mathbf{X} = \mathbf{W}\, \mathrm{Conv}_{s2}(\mathrm{Conv}_{s2}(\mathbf{F})) + \mathrm{PE}, \quad
        A = \mathrm{Padding}(\text{frames}) \cap A_{\text{mask}}

    The log-mel frames (no centring), the per-frame LayerNorm and the two valid stride-2
    convolutions all look only at a bounded span of samples, so the features of a stream computed
    chunk by chunk equal those of the whole utterance (see :class:`~attnmm.adapters.SpeechStream`).
    SpecAugment frequency and time masks are applied in training only, and so is ``waveform_augment``
    (:math:`\mathrm{Aug}`, e.g. :class:`~attnmm.data.SpeedPerturb` and :class:`~attnmm.data.AddNoise`),
    before the features. :math:`\mathrm{N}` is the identity unless ``utterance_norm``, which
    normalises each mel band of each item over that item's :math:`T_b` real frames (cepstral mean
    and variance normalisation):

    .. math::
        \mathrm{N}(\mathbf{F})_{t,f} = \frac{F_{t,f} - \mu_f}{\sqrt{\sigma_f^2 + 10^{-5}}}, \quad
        \mu_f = \frac{1}{T_b}\sum_{t<T_b} F_{t,f}, \quad
        \sigma_f^2 = \frac{1}{T_b}\sum_{t<T_b} (F_{t,f} - \mu_f)^2

    and sets the padding frames to 0, so an item's features do not depend on the batch it is in. It
    needs the whole utterance: a stream's features, computed chunk by chunk, cannot use it.

    ``residual_blocks`` = R adds R pre-activation residual blocks of two 3 x 3 convolutions,
    :math:`\mathbf{H} + \mathrm{Conv}(\mathrm{ReLU}(\mathrm{Conv}(\mathrm{ReLU}(\mathbf{H}))))`, each
    starting as the identity, on the subsampled map before it becomes tokens (as in keyword-spotting
    CNNs; the speech recipe page tells why). They read across a chunk's edge, so
    :class:`~attnmm.adapters.SpeechStream` refuses a model with them.

    Args:
        d_model (int, optional): token width D. (default: :obj:`144`)
        sample_rate (int, optional): sample rate of the waveforms in Hz. (default: :obj:`8000`)
        n_mels (int, optional): mel bands. (default: :obj:`40`)
        win_ms (float, optional): analysis window in milliseconds. (default: :obj:`25.0`)
        hop_ms (float, optional): hop between mel frames in milliseconds; tokens are 4 hops
            apart. (default: :obj:`10.0`)
        channels (int, optional): channels of the subsampling convolutions. (default: :obj:`64`)
        mask (Mask, optional): the frames' attention pattern, e.g. ``Window(16, 4)`` or
            ``Chunk(8, 2)``, composed with the batch's :class:`~attnmm.masks.Padding`; ``None``
            is full attention over the real frames. (default: :obj:`None`)
        freq_mask (int, optional): SpecAugment maximum frequency-mask width (0: off).
            (default: :obj:`8`)
        time_mask (int, optional): SpecAugment maximum time-mask width in mel frames (0: off).
            (default: :obj:`10`)
        num_time_masks (int, optional): time masks per utterance. (default: :obj:`2`)
        utterance_norm (bool, optional): normalise each item's log-mel bands over its real frames
            (:math:`\mathrm{N}` above). (default: :obj:`False`)
        waveform_augment (nn.Module, optional): a training-only augmentation of the padded waveforms,
            called as ``waveform_augment(waveform, lengths) -> (waveform, lengths)`` (B, T), (B,), e.g.
            :class:`~attnmm.data.SpeedPerturb`; ``None`` is none. (default: :obj:`None`)
        dropout (float, optional): dropout on the tokens. (default: :obj:`0.1`)
        residual_blocks (int, optional): residual 3 x 3 convolution blocks on the subsampled map
            (see above). (default: :obj:`0`)

    Shapes:
        - **input:** a batch with ``waveform`` (B, T) and ``lengths`` (B,) in samples
        - **output:** :class:`Tokens` with x (B, L, D), mask, lengths (B,) in frames

    Examples:
        >>> import torch
        >>> from attnmm.masks import Window
        >>> adapter = SpeechAdapter(d_model=32, mask=Window(8, 2))
        >>> tokens = adapter({"waveform": torch.randn(2, 8000), "lengths": torch.tensor([8000, 4000])})
        >>> tokens.x.shape, tokens.lengths.tolist()
        (torch.Size([2, 23, 32]), [23, 11])
        >>> tokens.mask
        Padding(lengths=[23, 11]) & Window(left=8, right=2)
    """

    def __init__(
        self, d_model: int = 144, sample_rate: int = 8000, n_mels: int = 40, win_ms: float = 25.0, hop_ms: float = 10.0,
        channels: int = 64, mask: Mask | None = None, freq_mask: int = 8, time_mask: int = 10, num_time_masks: int = 2,
        dropout: float = 0.1, utterance_norm: bool = False, waveform_augment: nn.Module | None = None,
        residual_blocks: int = 0,
    ) -> None:
        super().__init__()
        self.out_dim = check_nonneg_int("d_model", d_model, minimum=1)
        self.sample_rate = check_nonneg_int("sample_rate", sample_rate, minimum=1)
        self.n_mels = check_nonneg_int("n_mels", n_mels, minimum=1)
        self.win_length = round(sample_rate * win_ms / 1000)
        self.hop_length = round(sample_rate * hop_ms / 1000)
        if self.win_length < 1 or self.hop_length < 1:
            raise ValueError(f"win_ms and hop_ms must span at least one sample, got {win_ms} and {hop_ms} ms")
        if mask is not None and not isinstance(mask, Mask):
            raise TypeError(f"mask must be an attnmm Mask or None, got {type(mask).__name__}")
        self.mask = mask
        if waveform_augment is not None and not isinstance(waveform_augment, nn.Module):
            raise TypeError(
                "waveform_augment must be an nn.Module called as (waveform, lengths) -> (waveform, lengths), "
                f"e.g. attnmm.data.SpeedPerturb, or None; got {type(waveform_augment).__name__}"
            )
        self.waveform_augment = waveform_augment
        self.utterance_norm = bool(utterance_norm)
        self.melspec = torchaudio.transforms.MelSpectrogram(
            sample_rate, n_fft=self.win_length, win_length=self.win_length, hop_length=self.hop_length,
            n_mels=n_mels, center=False,
        )
        self.feature_norm = nn.LayerNorm(n_mels)
        self.freq_masking = torchaudio.transforms.FrequencyMasking(freq_mask, iid_masks=True) if freq_mask else None
        self.time_masking = torchaudio.transforms.TimeMasking(time_mask, iid_masks=True) if time_mask else None
        self.num_time_masks = check_nonneg_int("num_time_masks", num_time_masks)
        channels = check_nonneg_int("channels", channels, minimum=1)
        conv = nn.Conv2d(channels, channels, _KERNEL, _STRIDE)
        self.subsample = nn.Sequential(nn.Conv2d(1, channels, _KERNEL, _STRIDE), nn.ReLU(), conv, nn.ReLU())
        self.residual_blocks = nn.ModuleList(
            _ResidualBlock(channels) for _ in range(check_nonneg_int("residual_blocks", residual_blocks))
        )
        freq_out = self.num_frames_from_mel(n_mels)  # the convolutions shrink the mel bands as they do time
        if freq_out < 1:
            raise ValueError(f"n_mels must be >= 7 for two stride-2 convolutions, got {n_mels}")
        self.proj = nn.Linear(channels * freq_out, self.out_dim)
        self.pos = SinusoidalPE(self.out_dim)
        self.drop = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.feature_norm.reset_parameters()
        for m in self.subsample:
            if isinstance(m, nn.Conv2d):
                m.reset_parameters()
        for block in self.residual_blocks:
            cast(_ResidualBlock, block).reset_parameters()
        self.proj.reset_parameters()

    # ------------------------------------------------------------------ lengths

    @staticmethod
    def _conv_len(n: Tensor) -> Tensor:
        return ((n - _KERNEL) // _STRIDE + 1).clamp(min=0)

    def num_mel_frames(self, num_samples: Tensor) -> Tensor:
        """Mel frames of ``num_samples`` samples (no centring: whole windows only)."""
        return ((num_samples - self.win_length) // self.hop_length + 1).clamp(min=0)

    def num_frames(self, num_samples: Tensor) -> Tensor:
        """Output frames (tokens) of ``num_samples`` samples."""
        return self._conv_len(self._conv_len(self.num_mel_frames(num_samples)))

    def num_frames_from_mel(self, num_mel: int) -> int:
        """Output frames of ``num_mel`` mel frames."""
        return int(self._conv_len(self._conv_len(torch.tensor(num_mel))))

    # ------------------------------------------------------------------ the pipeline in pieces

    def features(self, waveform: Tensor, lengths: Tensor | None = None) -> Tensor:
        """Normalised log-mel frames (B, T_mel, n_mels) of waveforms (B, T).

        ``lengths`` (B,), the real samples of each item, is needed with ``utterance_norm`` only.
        """
        if self.utterance_norm and lengths is None:
            raise ValueError(
                "utterance_norm normalises over each item's real frames, so features() needs lengths (B,) "
                "(the real samples of each item); a stream's chunks cannot be normalised per utterance: "
                "use a model trained with utterance_norm=False for streaming"
            )
        if waveform.size(-1) < self.win_length:
            return waveform.new_zeros(waveform.size(0), 0, self.n_mels)
        logmel = torch.log(self.melspec(waveform.float()) + 1e-6).transpose(1, 2)  # (B, T_mel, n_mels)
        if self.utterance_norm:
            assert lengths is not None  # (checked above)
            logmel = self.normalize_utterances(logmel, self.num_mel_frames(lengths.to(logmel.device)))
        return self.feature_norm(logmel)

    @staticmethod
    def normalize_utterances(feats: Tensor, num_frames: Tensor, eps: float = 1e-5) -> Tensor:
        r"""Each item's bands normalised over its first ``num_frames`` frames; the rest set to 0.

        Shapes:
            - **feats:** (B, T_mel, n_mels)
            - **num_frames:** (B,), real frames of each item (clamped to T_mel)
            - **output:** (B, T_mel, n_mels)
        """
        n = num_frames.clamp(min=0, max=feats.size(1))
        real = (torch.arange(feats.size(1), device=feats.device) < n[:, None]).unsqueeze(-1)  # (B, T_mel, 1)
        count = n.clamp(min=1).to(feats.dtype)[:, None, None]  # (B, 1, 1)
        mean = feats.masked_fill(~real, 0.0).sum(1, keepdim=True) / count  # (B, 1, n_mels)
        centred = (feats - mean).masked_fill(~real, 0.0)
        var = centred.square().sum(1, keepdim=True) / count  # (B, 1, n_mels)
        return centred * torch.rsqrt(var + eps)

    def augment(self, feats: Tensor) -> Tensor:
        """SpecAugment on (B, T_mel, n_mels) features (training only)."""
        spec = feats.transpose(1, 2)  # (B, n_mels, T_mel)
        if self.freq_masking is not None:
            spec = self.freq_masking(spec)
        if self.time_masking is not None and spec.size(-1) > 1:
            for _ in range(self.num_time_masks):
                spec = self.time_masking(spec)
        return spec.transpose(1, 2)

    def frames(self, feats: Tensor, positions: Tensor | None = None, num_frames: Tensor | None = None) -> Tensor:
        """Tokens (B, L, D) of mel features (B, T_mel, n_mels); ``positions`` offsets the encoding.

        ``num_frames`` (B,), each item's real output frames: with ``residual_blocks`` the map's padding
        frames are set to 0 before each of their convolutions, so that an item's frames do not depend on
        the batch's padding (its last frames see zeros beyond its end, as they would alone)."""
        if feats.size(1) < 2 * _STRIDE + _KERNEL:
            return feats.new_zeros(feats.size(0), self.num_frames_from_mel(feats.size(1)), self.out_dim)
        h = self.subsample(feats.unsqueeze(1))  # (B, C, L, F')
        keep = None
        if len(self.residual_blocks) and num_frames is not None:
            keep = (torch.arange(h.size(2), device=h.device) < num_frames.to(h.device)[:, None])[:, None, :, None]
        for block in self.residual_blocks:
            h = block(h, keep)
        h = self.proj(h.permute(0, 2, 1, 3).flatten(2))  # (B, L, D)
        return self.drop(self.pos(h, positions))

    def forward(self, batch: dict[str, Any]) -> Tokens:
        missing = [key for key in ("waveform", "lengths") if key not in batch]
        if missing:
            raise KeyError(
                f"SpeechAdapter needs a batch with 'waveform' (B, T) and 'lengths' (B,) (real samples of each "
                f"item); missing {missing}, got keys {sorted(batch)}: the speech DataModules' collate functions "
                "add both; for unpadded waveforms of your own pass lengths = torch.full((B,), T)"
            )
        waveform, lengths = batch["waveform"], batch["lengths"]
        if waveform.dim() != 2:
            raise ValueError(f"waveform must be (B, T), got shape {tuple(waveform.shape)}")
        B, T = waveform.shape
        if lengths.shape != (B,):
            raise ValueError(
                f"lengths must be (B,) = ({B},), one sample count per waveform, got shape {tuple(lengths.shape)}"
            )
        if B and not 0 <= int(lengths.min()) <= int(lengths.max()) <= T:
            bad = int(lengths.argmax()) if int(lengths.max()) > T else int(lengths.argmin())
            raise ValueError(
                f"lengths are the real samples of each item, between 0 and T = {T} (the padded waveform's "
                f"length), got lengths[{bad}] = {int(lengths[bad])}: pad the waveforms to the longest item, or "
                "give the lengths before resampling or cropping changed T"
            )
        if self.training and self.waveform_augment is not None:
            waveform, lengths = self.waveform_augment(waveform, lengths)
        feats = self.features(waveform, lengths)
        if self.training:
            feats = self.augment(feats)
        if len(self.residual_blocks):  # they zero the map's padding frames, so they need each item's frames
            frame_lengths = self.num_frames(lengths.to(feats.device)).clamp(max=self.num_frames_from_mel(feats.size(1)))
            x = self.frames(feats, num_frames=frame_lengths)  # (B, L, D)
        else:  # (a subclass's frames() may make its own number of frames)
            x = self.frames(feats)
            frame_lengths = self.num_frames(lengths.to(x.device)).clamp(max=x.size(1))
        padding = Padding(frame_lengths)
        return Tokens(x, padding if self.mask is None else padding & self.mask, lengths=frame_lengths)

    @classmethod
    def example_batch(cls, batch_size: int = 2) -> dict[str, Tensor]:
        lengths = torch.linspace(4000, 8000, batch_size).long()
        label = torch.zeros(batch_size, dtype=torch.long)
        return {"waveform": torch.randn(batch_size, 8000) * 0.1, "lengths": lengths, "label": label}
