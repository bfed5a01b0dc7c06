r"""The keyword-spotting peer: a residual CNN of the res8 kind (Tang & Lin, "Deep residual learning for
small-footprint keyword spotting", ICASSP 2018) on the speech adapter's log-mel features, trained by the speech
recipe as an overlay of the keyword config (``studies/kws/configs/kws_res8.yaml``): conv 3x3 -> ReLU -> average
pool (4 frames x 3 bands) -> residual blocks -> the mean over the bands, one token per 40 ms. Not part of the
library."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from attnmm._checks import refuse_encoder_options
from attnmm.adapters import SpeechAdapter
from attnmm.masks import Mask

#: res8's pooling after the first convolution: (mel frames, mel bands)
POOL = (4, 3)


class _Block(nn.Module):
    """Two 3x3 convolutions, each followed by ReLU and batch norm, and an identity shortcut (res8's block)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm1 = nn.BatchNorm2d(channels, affine=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(channels, affine=False)

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm1(torch.relu(self.conv1(x)))
        return x + self.norm2(torch.relu(self.conv2(h)))


class Res8Adapter(SpeechAdapter):
    r"""Log-mel features -> a res8-style residual CNN -> one token per 4 mel frames.

    Args:
        d_model (int, optional): feature maps C of every convolution, the token width. (default: ``45``,
            res8's)
        sample_rate, n_mels, win_ms, hop_ms, freq_mask, time_mask, num_time_masks, dropout,
            utterance_norm, waveform_augment: as :class:`~attnmm.adapters.SpeechAdapter`'s.
        num_blocks (int, optional): residual blocks (3: res8). (default: ``3``)

    Shapes:
        - **input:** a batch with ``waveform`` (B, T) and ``lengths`` (B,) in samples
        - **output:** :class:`~attnmm.adapters.Tokens` with x (B, L, C), L = mel frames // 4, and lengths

    Examples:
        >>> import torch
        >>> adapter = Res8Adapter(sample_rate=16000)
        >>> tokens = adapter({"waveform": torch.randn(2, 16000), "lengths": torch.tensor([16000, 8000])})
        >>> tokens.x.shape, tokens.lengths.tolist()
        (torch.Size([2, 24, 45]), [24, 12])
    """

    def __init__(
        self,
        d_model: int = 45,
        sample_rate: int = 8000,
        n_mels: int = 40,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        freq_mask: int = 8,
        time_mask: int = 10,
        num_time_masks: int = 2,
        dropout: float = 0.1,
        utterance_norm: bool = False,
        waveform_augment: nn.Module | None = None,
        num_blocks: int = 3,
    ) -> None:
        super().__init__(
            d_model, sample_rate, n_mels, win_ms, hop_ms, channels=1, mask=None, freq_mask=freq_mask,
            time_mask=time_mask, num_time_masks=num_time_masks, dropout=dropout, utterance_norm=utterance_norm,
            waveform_augment=waveform_augment,
        )
        del self.subsample, self.proj, self.pos  # the CNN replaces them
        if n_mels < POOL[1]:
            raise ValueError(f"n_mels must be >= {POOL[1]} for res8's pooling over bands, got {n_mels}")
        self.stem = nn.Conv2d(1, d_model, 3, padding=1, bias=False)
        self.pool = nn.AvgPool2d(POOL)
        self.blocks = nn.Sequential(*(_Block(d_model) for _ in range(num_blocks)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if not hasattr(self, "blocks"):  # SpeechAdapter's constructor calls this before the CNN exists
            return
        self.feature_norm.reset_parameters()
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.BatchNorm2d):
                m.reset_parameters()

    def num_frames(self, num_samples: Tensor) -> Tensor:
        return self.num_mel_frames(num_samples) // POOL[0]

    def num_frames_from_mel(self, num_mel: int) -> int:
        return num_mel // POOL[0]

    def frames(self, feats: Tensor, positions: Tensor | None = None) -> Tensor:
        if feats.size(1) < POOL[0]:
            return feats.new_zeros(feats.size(0), 0, self.out_dim)
        h = self.pool(torch.relu(self.stem(feats.unsqueeze(1))))  # (B, C, T_mel / 4, n_mels / 3)
        h = self.blocks(h)
        return self.drop(h.mean(-1).transpose(1, 2))  # (B, L, C): the bands averaged


class PassThrough(nn.Module):
    """The encoder of a model whose adapter did all the work: returns the tokens as they are.

    Shapes:
        - **input:** x (B, L, D)
        - **output:** (B, L, D), the same
    """

    def forward(
        self, x: Tensor, mask: Mask | None = None, *, tokens: Any = None, state: Any = None,
        return_weights: bool = False,
    ) -> Tensor:
        refuse_encoder_options(self, state, return_weights)  # no attention: neither state nor weights
        return x
