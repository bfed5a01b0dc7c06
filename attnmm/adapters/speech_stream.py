r"""Streaming inference for a speech encoder under a mask of bounded look-ahead, and a streaming CTC
recogniser on top of it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, combinations
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from attnmm._checks import check_nonneg_int
from attnmm.adapters.speech import SpeechAdapter
from attnmm.masks import Mask, block_sizes, first_key, grid_size, lookahead_error, without_padding
from attnmm.nn.ctc import BLANK

#: Mel frames between tokens: the two stride-2 convolutions of the adapter.
_SUBSAMPLING = 4


class SpeechStream:
    r"""Runs a :class:`~attnmm.adapters.SpeechAdapter` and an :class:`~attnmm.nn.Encoder`
    on audio that arrives piece by piece, with the same frame outputs as the whole-utterance forward
    under the adapter's mask.

    A frame can be emitted once every frame it depends on, through all layers, has arrived. That
    holds after a bounded wait only if each layer's look-ahead ends at a fixed boundary: the
    stream splits the frames into blocks of ``step`` frames and needs every query :math:`i` of
    block :math:`k` to attend only keys :math:`j < (k + 1) \cdot \mathrm{step}`. Then, each time a
    block is complete, its frames run through every layer attending to a per-layer cache of earlier
    layer inputs and to themselves, under the mask itself evaluated (``mask_mod``) at the absolute
    frame positions. The cache keeps only the frames a later query can still attend.

    Supported masks, and the ``step`` they give:

    - ``Chunk(size, left_chunks)``: a chunk's look-ahead is the rest of the chunk at every layer,
      so ``step = size`` and the delay stays below a chunk however deep the encoder is;
    - ``Causal()``, ``Window(left, 0)``: no look-ahead, ``step = 1``;
    - an intersection ``&`` is bounded as soon as one part is (``Chunk(4, 1) & Window(2, 3)``: by
      the chunk; ``Chunk(4, 1) & Window(2, 0)``: causal, ``step = 1``), and a union ``|`` when
      every part is (``Chunk(4, 1) | Causal()``: ``step = 4``; chunks of sizes 4 and 6 together:
      ``step = 12``);
    - the batch's key padding (:class:`~attnmm.masks.Padding`, as the adapter adds it) is dropped:
      every streamed frame is real.

    The stream asks the mask all it needs (:mod:`attnmm.masks.queries`), so a new mask streams once it
    answers. Anything else is refused with the part at fault: ``Window(left, right)`` with ``right > 0``
    outside an intersection with a chunk (each layer looks ``right`` frames past its input, so the
    look-ahead grows to ``num_layers * right`` frames and crosses every block end), ``Full()`` or no
    mask, complements ``~m``, :class:`~attnmm.masks.Graph` and :class:`~attnmm.masks.Grid`, and
    masks that depend on the batch item.

    The cache of a mask with bounded history (``Chunk``, ``Window``, their intersections) stays a
    few chunks long; under ``Causal()`` (e.g. ``Chunk(4, 1) | Causal()``) a later frame may attend
    every earlier one, so the cache grows with the stream: ``max_cache`` caps it, and the stream
    raises rather than drop a frame the mask still needs.

    The front end is exact too: mel frames are whole windows (no centring), the feature norm is per
    frame and the stride-2 convolutions are valid, so the stream keeps just the samples and mel
    frames that the next outputs still need. Frame :math:`t` reads mel frames :math:`4t \dots 4t+6`;
    frames are ``4 * adapter.hop_length`` samples apart (40 ms at the default 10 ms hop), and the
    first :math:`n` frames need :meth:`samples_for` :math:`(n) = (4n + 2) \cdot \mathrm{hop} +
    \mathrm{win}` samples.

    Args:
        adapter (SpeechAdapter): the trained front end.
        encoder (nn.Module): the trained :class:`~attnmm.nn.Encoder` (pre-norm layers with
            ``norm1``, ``attn``, ``norm2``, ``ffn``; no rotary or relative bias).
        mask (Mask, optional): the frames' mask; default: ``adapter.mask``.
        batch_size (int, optional): number of parallel streams. (default: :obj:`1`)
        max_cache (int, optional): most frames each layer may cache; exceeding it raises.
            (default: :obj:`None`, whatever the mask needs)

    Shapes:
        - **push:** audio (B, T_new) -> frames (B, L_new, D) of the blocks completed so far
        - **flush:** -> frames (B, L_rest, D) of the last, partial block

    Examples:
        >>> import torch
        >>> from attnmm.nn import Encoder
        >>> from attnmm.masks import Causal, Chunk
        >>> adapter = SpeechAdapter(d_model=32, mask=Chunk(4, 1) | Causal()).eval()
        >>> encoder = Encoder(32, 4, 2, 64).eval()
        >>> stream = SpeechStream(adapter, encoder)
        >>> stream.step
        4
        >>> audio = torch.randn(1, 8000)
        >>> parts = [stream.push(piece) for piece in audio.split(1000, dim=1)] + [stream.flush()]
        >>> full = encoder(*(lambda t: (t.x, t.mask))(adapter({"waveform": audio, "lengths": torch.tensor([8000])})))
        >>> torch.allclose(torch.cat(parts, 1), full, atol=1e-5)
        True
    """

    def __init__(
        self, adapter: SpeechAdapter, encoder: nn.Module, mask: Mask | None = None, batch_size: int = 1,
        max_cache: int | None = None,
    ) -> None:
        layers = getattr(encoder, "layers", None)
        if layers is None:
            raise TypeError(f"encoder must be an attnmm Encoder with .layers, got {type(encoder).__name__}")
        for layer in layers:
            if layer.attn.rotary is not None or layer.attn.position_bias is not None:
                raise ValueError("streaming supports absolute positions only (no rotary or relative bias)")
        if getattr(encoder, "position_bias", None) is not None:
            raise ValueError("streaming supports absolute positions only (no relative position bias)")
        if len(getattr(adapter, "residual_blocks", ())):
            raise ValueError(
                f"the adapter has {len(adapter.residual_blocks)} residual_blocks, whose 3 x 3 convolutions read "
                "frames across a chunk's edge: a stream computed chunk by chunk would not equal the whole "
                "utterance; stream a model built with residual_blocks=0"
            )
        max_cache = None if max_cache is None else check_nonneg_int("max_cache", max_cache)
        self.mask, self.step = _stream_plan(mask if mask is not None else adapter.mask)
        self.adapter, self.encoder, self.max_cache = adapter, encoder, max_cache
        self._layers: list[Any] = list(layers)  # pre-norm blocks: norm1, attn, drop, norm2, ffn
        self._norm: Any = encoder.norm
        self.reset(batch_size)

    def reset(self, batch_size: int = 1) -> None:
        """Forget everything: start new streams (on the device the model is on now)."""
        d, n_mels = self.adapter.out_dim, self.adapter.n_mels
        device = _device_of(self.encoder, self.adapter)
        self.batch_size = batch_size
        self._samples = torch.zeros(batch_size, 0, device=device)
        self._sample_offset = 0  # index of _samples[:, 0] in the stream
        self._mel = torch.zeros(batch_size, 0, n_mels, device=device)
        self._mel_offset = 0  # index of _mel[:, 0]
        self._mel_done = 0  # mel frames computed
        self._frames_done = 0  # subsampled frames computed
        self._pending = torch.zeros(batch_size, 0, d, device=device)  # frames waiting for their block to complete
        self._position = 0  # frames encoded: the position of _pending[:, 0]
        self._cache_start = 0  # position of every layer's _cache[i][:, 0]
        self._cache = [torch.zeros(batch_size, 0, d, device=device) for _ in self._layers]

    @property
    def num_samples(self) -> int:
        """Samples received since the last reset."""
        return self._sample_offset + self._samples.size(1)

    def samples_for(self, num_frames: int) -> int:
        """Samples from which the front end yields ``num_frames`` frames: the last one reads mel
        frames up to :math:`4n + 2`, whose window ends at sample :math:`(4n + 2)\\,\\mathrm{hop} +
        \\mathrm{win}`."""
        if num_frames <= 0:
            return 0
        return (_SUBSAMPLING * num_frames + 2) * self.adapter.hop_length + self.adapter.win_length

    @torch.no_grad()
    def push(self, audio: Tensor) -> Tensor:
        """Feed samples (B, T_new), on any device; return the encoder outputs (B, L_new, D) of completed blocks,
        on the model's device."""
        if audio.dim() != 2 or audio.size(0) != self.batch_size:
            raise ValueError(f"audio must be (B={self.batch_size}, T_new), got shape {tuple(audio.shape)}")
        self._samples = torch.cat([self._samples, audio.to(self._samples.device, torch.float32)], 1)
        self._pending = torch.cat([self._pending, self._new_frames()], 1)
        n_ready = self._pending.size(1) // self.step * self.step
        out = self._encode(self._pending[:, :n_ready]) if n_ready else self._pending[:, :0]
        self._pending = self._pending[:, n_ready:]
        return out

    @torch.no_grad()
    def flush(self) -> Tensor:
        """End the streams: return the outputs of the last, partial block, then reset."""
        out = self._encode(self._pending) if self._pending.size(1) else self._pending
        self.reset(self.batch_size)
        return out

    def _new_frames(self) -> Tensor:
        """Front end: the tokens (B, n, D) that the samples received so far newly complete."""
        a = self.adapter
        n_mel = int(a.num_mel_frames(torch.tensor(self.num_samples)))
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
        start = _SUBSAMPLING * self._frames_done - self._mel_offset
        positions = torch.arange(self._frames_done, n_frames, device=self._mel.device)
        frames = a.frames(self._mel[:, start:], positions)  # (B, n_frames - done, D)
        self._frames_done = n_frames
        drop = _SUBSAMPLING * n_frames - self._mel_offset
        self._mel, self._mel_offset = self._mel[:, drop:], self._mel_offset + drop
        return frames

    def _encode(self, x: Tensor) -> Tensor:
        """Run the frames x (B, n, D) at positions [position, position + n) through every layer,
        attending to each layer's cache and to themselves under the mask."""
        start, end = self._position, self._position + x.size(1)
        first = first_key(self.mask, end)  # no later query attends a key before it
        keep_from = self._cache_start if first is None else min(max(self._cache_start, first), end)
        if self.max_cache is not None and end - keep_from > self.max_cache:
            raise ValueError(
                f"SpeechStream(max_cache={self.max_cache}): under {self.mask!r} the frames after {end} may "
                f"still attend {end - keep_from} earlier frames, more than the cache may hold; raise "
                "max_cache, or train with a mask of bounded history (e.g. Chunk(size, left_chunks))"
            )
        mask = self.mask.shifted(start, self._cache_start)  # the step's queries and the cached keys
        h = x
        for i, layer in enumerate(self._layers):
            normed = layer.norm1(h)  # (B, n, D)
            context = torch.cat([self._cache[i], normed], 1)  # (B, cached + n, D)
            h = h + layer.drop(layer.attn(normed, context, mask=mask))
            h = h + layer.drop(layer.ffn(layer.norm2(h)))
            self._cache[i] = context[:, keep_from - self._cache_start :]
        self._position, self._cache_start = end, keep_from
        return self._norm(h)


def _device_of(*modules: nn.Module) -> torch.device:
    """The device of the first parameter or buffer of ``modules`` (the CPU when they hold none)."""
    for module in modules:
        for tensor in chain(module.parameters(), module.buffers()):
            return tensor.device
    return torch.device("cpu")


# ---------------------------------------------------------------------- what a mask lets a stream do


def _stream_plan(mask: Mask | None) -> tuple[Mask, int]:
    """The mask a :class:`SpeechStream` evaluates (``mask`` on real frames only: its key padding
    dropped) and its ``step``: the smallest block length such that no frame attends past the end of
    its block. Raise, naming the mask and the part at fault, when the look-ahead is not bounded so.

    Examples:
        >>> from attnmm.masks import Causal, Chunk, Padding, Window
        >>> _stream_plan(Padding([9]) & Chunk(4, 1) & Window(2, 3))
        (Chunk(size=4, left_chunks=1) & Window(left=2, right=3), 4)
        >>> _stream_plan(Chunk(4, 1) & Window(2, 0))[1], _stream_plan(Chunk(4, 1) | Chunk(6, 0))[1]
        (1, 12)
    """
    how = (
        "; stream a mask whose look-ahead ends at a chunk boundary at every layer: Chunk(size, left_chunks), "
        "alone, intersected (&) with Window(left, right), Causal() or Padding, or united (|) with Causal(), "
        "or a causal mask such as Window(left, 0)"
    )
    stripped = None if mask is None else without_padding(mask)
    if stripped is None or stripped.structure.kind == "full":
        what = "no mask" if stripped is None else repr(stripped)
        raise ValueError(
            f"SpeechStream cannot stream under {mask!r}: {what} is full attention, which sees the whole utterance{how}"
        )
    if stripped.layout == "packed" or grid_size(stripped) is not None:
        kind = "graph" if stripped.layout == "packed" else "2-D patch grid"
        raise ValueError(
            f"SpeechStream cannot stream under {mask!r}: {stripped!r} is not a mask over time frames (a {kind} "
            f"mask){how}"
        )
    if stripped.batched:
        raise ValueError(
            f"SpeechStream cannot stream under {mask!r}: it depends on the batch item, but a batch of streams "
            "shares one mask (only key padding is dropped: every streamed frame is real)"
        )
    sizes = sorted(block_sizes(stripped))
    reason = lookahead_error(stripped, math.lcm(*sizes) if sizes else 1)
    if reason is not None:
        raise ValueError(f"SpeechStream cannot stream under {mask!r}: {reason}{how}")
    # the steps that work are the multiples of the lcm of some of the block sizes: try the smallest first
    steps = sorted({math.lcm(*c) if c else 1 for k in range(len(sizes) + 1) for c in combinations(sizes, k)})
    step = next(s for s in steps if lookahead_error(stripped, s) is None)
    return stripped, step


# ---------------------------------------------------------------------- a streaming CTC recogniser


class Emission(NamedTuple):
    """A label emitted by :class:`StreamingRecognizer`.

    Attributes:
        label (int): the class c (head output c + 1; digit c for spoken digits).
        frame (int): the frame whose greedy output starts the label (its CTC spike).
        chunk_end (int): frames complete when it was emitted: the end of that frame's block.
        sample (int): samples the stream needed to emit it: ``stream.samples_for(chunk_end)``, or
            all the audio for labels emitted by ``flush``.
    """

    label: int
    frame: int
    chunk_end: int
    sample: int


class StreamingRecognizer:
    r"""Greedy CTC decoding ("Connectionist Temporal Classification", Graves et al., 2006) of a
    :class:`SpeechStream`, label by label as its blocks complete.

    .. math::
        k_t = \arg\max_k \, \mathrm{head}(\mathbf{h}_t)_k, \qquad
        \text{emit class } k_t - 1 \text{ at frame } t \text{ iff } k_t \ne 0 \text{ and } k_t \ne k_{t-1}

    with output 0 the blank and output c + 1 class c (the convention of :mod:`attnmm.nn.ctc`). The
    previous frame's output is carried from block to block, so a label spanning a block boundary is
    emitted once and the labels emitted up to :meth:`flush` are the whole-utterance greedy decode.

    A label is emitted when its frame's block of ``stream.step`` frames is complete; each
    :class:`Emission` records the label's frame, the end of its block and the sample at which a stream
    fed sample by sample would emit it (compute time excluded), from which :func:`emission_latency`
    measures latency.

    Args:
        stream (SpeechStream): the streaming adapter and encoder.
        head (nn.Module): maps frames (B, L, D) to logits (B, L, C + 1), blank first, each frame on
            its own, as :class:`~attnmm.nn.ctc.CTCHead` and :class:`~torch.nn.Linear` do.

    Shapes:
        - **push:** audio (B, T_new) -> for each of the B streams, a list of new :class:`Emission`
        - **flush:** -> for each stream, the rest of its emissions

    Examples:
        >>> import torch
        >>> from attnmm.nn import Encoder
        >>> from attnmm.masks import Chunk
        >>> adapter = SpeechAdapter(d_model=32, mask=Chunk(4, 1)).eval()
        >>> encoder, head = Encoder(32, 4, 2, 64).eval(), torch.nn.Linear(32, 11)  # blank + 10 digits
        >>> recognizer = StreamingRecognizer(SpeechStream(adapter, encoder), head)
        >>> audio = torch.randn(1, 8000)
        >>> emitted = [e for piece in audio.split(800, dim=1) for e in recognizer.push(piece)[0]]
        >>> emitted += recognizer.flush()[0]
        >>> tokens = adapter({"waveform": audio, "lengths": torch.tensor([8000])})
        >>> best = head(encoder(tokens.x, tokens.mask)).argmax(-1)[0].unique_consecutive()  # (L',)
        >>> [e.label for e in emitted] == (best[best != 0] - 1).tolist()
        True
    """

    def __init__(self, stream: SpeechStream, head: nn.Module) -> None:
        self.stream, self.head = stream, head
        self.reset()

    def reset(self) -> None:
        """Forget everything: start new streams."""
        self.stream.reset(self.stream.batch_size)
        self._frames = 0  # frames decoded
        self._last = [BLANK] * self.stream.batch_size  # each stream's output at its last frame

    @torch.no_grad()
    def push(self, audio: Tensor) -> list[list[Emission]]:
        """Feed samples (B, T_new); return each stream's labels from the blocks completed."""
        return self._decode(self.stream.push(audio), final_sample=None)

    @torch.no_grad()
    def flush(self) -> list[list[Emission]]:
        """End the streams: return each stream's last labels, then reset."""
        total = self.stream.num_samples
        out = self._decode(self.stream.flush(), final_sample=total)
        self.reset()
        return out

    def _decode(self, frames: Tensor, final_sample: int | None) -> list[list[Emission]]:
        """Emissions of frames (B, n, D) following those decoded; ``final_sample`` at the end."""
        best = self.head(frames).argmax(-1).tolist() if frames.size(1) else [[]] * frames.size(0)  # (B, n)
        start, step = self._frames, self.stream.step
        self._frames += frames.size(1)
        out: list[list[Emission]] = []
        for b, row in enumerate(best):
            emitted = []
            for t, k in enumerate(row, start):
                if k != BLANK and k != self._last[b]:
                    if final_sample is None:  # a complete block: emitted once its last frame arrived
                        end = (t // step + 1) * step
                        emitted.append(Emission(k - 1, t, end, self.stream.samples_for(end)))
                    else:
                        emitted.append(Emission(k - 1, t, self._frames, final_sample))
                self._last[b] = k
            out.append(emitted)
        return out


@dataclass(frozen=True)
class EmissionLatency:
    """Emission latency of the correctly recognised labels (see :func:`emission_latency`).

    Args:
        latencies (Tensor): per matched reference label, emission time minus the end of its audio.
        mean (float): their mean (NaN when none matched).
        p95 (float): their 95th percentile (NaN when none matched).
        num_matched (int): reference labels matched by an emitted one.
        num_reference (int): reference labels in all.
    """

    latencies: Tensor
    mean: float
    p95: float
    num_matched: int
    num_reference: int


def _matches(reference: Sequence[int], hypothesis: Sequence[int]) -> list[tuple[int, int]]:
    """Index pairs (reference, hypothesis) of equal labels on a minimum edit-distance alignment."""
    n, m = len(reference), len(hypothesis)
    cost = [[i + j if i == 0 or j == 0 else 0 for j in range(m + 1)] for i in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            sub = cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1])
            cost[i][j] = min(sub, cost[i - 1][j] + 1, cost[i][j - 1] + 1)
    pairs, i, j = [], n, m
    while i and j:  # from the end, missing labels first: on ties an emission matches the earlier label
        if cost[i][j] == cost[i - 1][j] + 1:
            i -= 1
        elif cost[i][j] == cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]):
            if reference[i - 1] == hypothesis[j - 1]:
                pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        else:
            j -= 1
    return pairs[::-1]


def emission_latency(
    emissions: Sequence[Sequence[Emission]], ends: Sequence[Sequence[float]],
    references: Sequence[Sequence[int]] | None = None, sample_rate: int | None = None,
) -> EmissionLatency:
    r"""Emission latency per reference label (e.g. digit): :math:`\mathrm{emitted}_k - \mathrm{end}_k`, the
    time from the end of label :math:`k`'s audio to the sample at which the stream emitted it
    (:attr:`~attnmm.adapters.Emission.sample`; algorithmic latency, compute time excluded), over utterances.

    With ``references``, each utterance's emitted labels are aligned to its reference labels by
    minimum edit distance and only equal aligned labels count (of two equal reference labels, one
    emission matches the earlier); without, the emissions and the ends
    are paired in order and must be as many.

    Args:
        emissions (list of list of Emission): per utterance, what :class:`StreamingRecognizer` emitted.
        ends (list of list of float): per utterance, where each reference label's audio ends: in
            samples, or in seconds when ``sample_rate`` is given.
        references (list of list of int, optional): per utterance, the reference labels.
            (default: :obj:`None`)
        sample_rate (int, optional): samples per second; latencies are then in seconds.
            (default: :obj:`None`, samples)

    Examples:
        >>> e = [[Emission(3, 5, 8, 2720), Emission(5, 9, 12, 3360)]]  # digits 3 and 5
        >>> lat = emission_latency(e, [[0.25, 0.40]], references=[[3, 5]], sample_rate=8000)
        >>> [round(x, 2) for x in lat.latencies.tolist()], round(lat.mean, 3), lat.num_matched
        ([0.09, 0.02], 0.055, 2)
    """
    if len(emissions) != len(ends) or (references is not None and len(references) != len(ends)):
        raise ValueError(
            f"emissions, ends and references need one entry per utterance, got {len(emissions)}, {len(ends)} "
            f"and {None if references is None else len(references)}"
        )
    scale = 1.0 if sample_rate is None else 1.0 / sample_rate
    latencies: list[float] = []
    total = 0
    for u, (emitted, end) in enumerate(zip(emissions, ends)):
        if references is None:
            if len(emitted) != len(end):
                raise ValueError(
                    f"utterance {u}: {len(emitted)} labels emitted but {len(end)} ends given; pass references= "
                    "to align them"
                )
            pairs = [(k, k) for k in range(len(end))]
        else:
            if len(references[u]) != len(end):
                raise ValueError(f"utterance {u}: {len(references[u])} reference labels but {len(end)} ends")
            pairs = _matches(references[u], [e.label for e in emitted])
        total += len(end)
        latencies.extend(emitted[j].sample * scale - end[i] for i, j in pairs)
    values = torch.tensor(latencies, dtype=torch.float64)
    mean = float(values.mean()) if values.numel() else math.nan
    p95 = float(torch.quantile(values, 0.95)) if values.numel() else math.nan
    return EmissionLatency(values, mean, p95, len(latencies), total)


__all__ = ["Emission", "EmissionLatency", "SpeechStream", "StreamingRecognizer", "emission_latency"]
