r"""Streaming inference for a speech encoder under a :class:`~attnmm.masks.Chunk` mask."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnmm.adapters.speech import SpeechAdapter
from attnmm.masks import Chunk
from attnmm.masks.compose import find_part


class SpeechStream:
    r"""Runs a :class:`~attnmm.adapters.SpeechAdapter` and an :class:`~attnmm.attention.Encoder`
    on audio that arrives piece by piece, with the same frame outputs as the whole-utterance forward
    under ``Chunk(size, left_chunks)``.

    Under the chunk mask, frame :math:`i` of every layer depends only on its own chunk and the
    ``left_chunks`` chunks before it, never on a later chunk. So the stream keeps, per layer, a
    cache of the normalised layer inputs of the last ``left_chunks`` chunks; each time ``size`` new
    frames are complete it runs them through every layer, attending to the cache and to
    themselves, and emits them. The front end is exact too: mel frames are whole windows (no
    centring), the feature norm is per frame and the stride-2 convolutions are valid, so the stream
    keeps just the samples and mel frames that the next outputs still need.

    A ``Window(left, right)`` mask with ``right > 0`` would not stream this way: each layer looks
    ``right`` frames ahead of its input, so the encoder's look-ahead grows to ``num_layers * right``
    frames and every output waits for that many future frames. A chunk's look-ahead is the rest of
    its own chunk at every layer, so the delay stays ``size`` frames whatever the depth.

    Args:
        adapter (SpeechAdapter): the trained front end.
        encoder (nn.Module): the trained :class:`~attnmm.attention.Encoder` (pre-norm layers with
            ``norm1``, ``attn``, ``norm2``, ``ffn``; no rotary or relative bias).
        chunk (Chunk, optional): the chunk mask; default: the one in ``adapter.mask``.
        batch_size (int, optional): number of parallel streams. (default: :obj:`1`)

    Shapes:
        - **push:** audio (B, T_new) -> frames (B, L_new, D) of the chunks completed so far
        - **flush:** -> frames (B, L_rest, D) of the last, partial chunk

    Examples:
        >>> import torch
        >>> from attnmm.attention import Encoder
        >>> from attnmm.masks import Chunk
        >>> adapter = SpeechAdapter(d_model=32, mask=Chunk(4, 1)).eval()
        >>> encoder = Encoder(32, 4, 2, 64).eval()
        >>> stream = SpeechStream(adapter, encoder)
        >>> audio = torch.randn(1, 8000)
        >>> parts = [stream.push(piece) for piece in audio.split(1000, dim=1)] + [stream.flush()]
        >>> full = encoder(*(lambda t: (t.x, t.mask))(adapter({"waveform": audio, "lengths": torch.tensor([8000])})))
        >>> torch.allclose(torch.cat(parts, 1), full, atol=1e-5)
        True
    """

    def __init__(
        self, adapter: SpeechAdapter, encoder: nn.Module, chunk: Chunk | None = None, batch_size: int = 1
    ) -> None:
        chunk = chunk if chunk is not None else find_part(adapter.mask, Chunk)
        if chunk is None:
            raise ValueError(
                f"streaming needs a Chunk mask (exact chunk by chunk), got adapter.mask={adapter.mask!r}; "
                "pass chunk=Chunk(size, left_chunks) or train with one"
            )
        layers = getattr(encoder, "layers", None)
        if layers is None:
            raise TypeError(f"encoder must be an attnmm Encoder with .layers, got {type(encoder).__name__}")
        for layer in layers:
            if layer.attn.rotary is not None or layer.attn.position_bias is not None:
                raise ValueError("streaming supports absolute positions only (no rotary or relative bias)")
        if getattr(encoder, "position_bias", None) is not None:
            raise ValueError("streaming supports absolute positions only (no relative position bias)")
        self.adapter, self.encoder, self.chunk = adapter, encoder, chunk
        self.reset(batch_size)

    def reset(self, batch_size: int = 1) -> None:
        """Forget everything: start new streams."""
        d, n_mels = self.adapter.out_dim, self.adapter.n_mels
        self.batch_size = batch_size
        self._samples = torch.zeros(batch_size, 0)
        self._sample_offset = 0  # index of _samples[:, 0] in the stream
        self._mel = torch.zeros(batch_size, 0, n_mels)
        self._mel_offset = 0  # index of _mel[:, 0]
        self._mel_done = 0  # mel frames computed
        self._frames_done = 0  # subsampled frames computed
        self._pending = torch.zeros(batch_size, 0, d)  # frames waiting for their chunk to complete
        self._cache = [torch.zeros(batch_size, 0, d) for _ in self.encoder.layers]

    @torch.no_grad()
    def push(self, audio: Tensor) -> Tensor:
        """Feed samples (B, T_new); return the encoder outputs (B, L_new, D) of completed chunks."""
        if audio.dim() != 2 or audio.size(0) != self.batch_size:
            raise ValueError(f"audio must be (B={self.batch_size}, T_new), got shape {tuple(audio.shape)}")
        self._samples = torch.cat([self._samples, audio.float()], 1)
        self._pending = torch.cat([self._pending, self._new_frames()], 1)
        size = self.chunk.size
        n_full = self._pending.size(1) // size * size
        out = self._encode(self._pending[:, :n_full]) if n_full else self._pending[:, :0]
        self._pending = self._pending[:, n_full:]
        return out

    @torch.no_grad()
    def flush(self) -> Tensor:
        """End the streams: return the outputs of the last, partial chunk, then reset."""
        out = self._encode(self._pending) if self._pending.size(1) else self._pending
        self.reset(self.batch_size)
        return out

    def _new_frames(self) -> Tensor:
        """Front end: the tokens (B, n, D) that the samples received so far newly complete."""
        a = self.adapter
        total = self._sample_offset + self._samples.size(1)
        n_mel = int(a.num_mel_frames(torch.tensor(total)))
        if n_mel > self._mel_done:
            start = self._mel_done * a.hop_length - self._sample_offset
            stop = (n_mel - 1) * a.hop_length + a.win_length - self._sample_offset
            feats = a.features(self._samples[:, start:stop])  # (B, new mel frames, n_mels)
            self._mel = torch.cat([self._mel, feats], 1)
            self._mel_done = n_mel
            keep = n_mel * a.hop_length - self._sample_offset  # the next mel frame starts here
            self._samples, self._sample_offset = self._samples[:, keep:], self._sample_offset + keep
        n_frames = a.num_frames_from_mel(self._mel_done)
        if n_frames <= self._frames_done:
            return self._pending[:, :0]
        step = 2 * 2  # two stride-2 convolutions: token t reads mel frames 4t .. 4t + 6
        start = step * self._frames_done - self._mel_offset
        positions = torch.arange(self._frames_done, n_frames)
        frames = a.frames(self._mel[:, start:], positions)  # (B, n_frames - done, D)
        self._frames_done = n_frames
        drop = step * n_frames - self._mel_offset
        self._mel, self._mel_offset = self._mel[:, drop:], self._mel_offset + drop
        return frames

    def _encode(self, x: Tensor) -> Tensor:
        """Run whole chunks x (B, k * size, D) (or the final partial chunk) through every layer."""
        size, keep = self.chunk.size, self.chunk.left_chunks * self.chunk.size
        outs = []
        for chunk in x.split(size, dim=1):
            h = chunk
            for i, layer in enumerate(self.encoder.layers):
                normed = layer.norm1(h)  # (B, n, D)
                context = torch.cat([self._cache[i], normed], 1)  # (B, cached + n, D)
                h = h + layer.drop(layer.attn(normed, context))
                h = h + layer.drop(layer.ffn(layer.norm2(h)))
                self._cache[i] = context[:, context.size(1) - keep :] if keep else context[:, :0]
            outs.append(self.encoder.norm(h))
        return torch.cat(outs, 1)
