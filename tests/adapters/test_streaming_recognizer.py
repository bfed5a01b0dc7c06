"""The streaming CTC recogniser emits the whole-utterance greedy decode, at the end of each label's
block; emission_latency measures latency from the emissions."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from attnmm.adapters import Emission, SpeechAdapter, SpeechStream, StreamingRecognizer, emission_latency
from attnmm.masks import Causal, Chunk, Mask, Window
from attnmm.nn import Encoder
from attnmm.nn.ctc import CTCHead, ctc_greedy_decode


def greedy(logits: Tensor) -> list[list[tuple[int, int]]]:
    """Whole-utterance greedy CTC decode of logits (B, L, C + 1): (class, frame) of each label."""
    out = []
    for row in logits.argmax(-1).tolist():
        out.append([(k - 1, t) for t, k in enumerate(row) if k != 0 and (t == 0 or row[t - 1] != k)])
    return out


def model(mask: Mask, seed: int, num_classes: int = 10) -> tuple[SpeechAdapter, Encoder, nn.Linear]:
    torch.manual_seed(seed)
    adapter = SpeechAdapter(d_model=32, channels=8, mask=mask).eval()
    encoder = Encoder(32, 4, 2, 64).eval()
    head = nn.Linear(32, num_classes + 1)
    return adapter, encoder, head


def full_logits(adapter: SpeechAdapter, encoder: Encoder, head: nn.Module, audio: Tensor) -> Tensor:
    with torch.no_grad():
        tokens = adapter({"waveform": audio, "lengths": torch.full((audio.size(0),), audio.size(1))})
        return head(encoder(tokens.x, tokens.mask))  # (B, L, C + 1)


def recognise(recognizer: StreamingRecognizer, audio: Tensor, seed: int) -> list[list[Emission]]:
    """Push ``audio`` (B, T) in random pieces, checking each emission against the samples pushed."""
    g = torch.Generator().manual_seed(seed)
    emitted: list[list[Emission]] = [[] for _ in range(audio.size(0))]
    start = 0
    while start < audio.size(1):
        n = int(torch.randint(1, 3000, (1,), generator=g))
        for b, new in enumerate(recognizer.push(audio[:, start : start + n])):
            for e in new:  # emitted once its block is complete, from the samples pushed so far
                assert e.chunk_end % recognizer.stream.step == 0 and e.frame < e.chunk_end
                assert e.sample == recognizer.stream.samples_for(e.chunk_end) <= start + n
            emitted[b] += new
        start += n
    for b, new in enumerate(recognizer.flush()):
        assert all(e.sample == audio.size(1) for e in new)
        emitted[b] += new
    return emitted


@pytest.mark.parametrize(
    "mask,seed",
    [
        (Chunk(4, 1), 0),
        (Chunk(3, 2), 1),
        (Chunk(2, 0), 2),
        (Chunk(4, 1) | Causal(), 3),
        (Chunk(6, 1) & Window(4, 2), 4),
        (Window(8, 0), 5),
    ],
    ids=repr,
)
def test_streamed_labels_equal_the_whole_utterance_greedy_decode(mask: Mask, seed: int) -> None:
    adapter, encoder, head = model(mask, seed)
    with torch.no_grad():
        head.weight.mul_(4)  # sharper, more varied labels frame to frame
    recognizer = StreamingRecognizer(SpeechStream(adapter, encoder, batch_size=2), head)
    decoded = 0
    for utterance in range(3):  # several random inputs; flush resets for the next
        audio = torch.randn(2, 6000 + 1500 * utterance) * 0.3
        expected = greedy(full_logits(adapter, encoder, head, audio))
        emitted = recognise(recognizer, audio, seed + 10 * utterance)
        assert [[(e.label, e.frame) for e in row] for row in emitted] == expected
        decoded += sum(len(row) for row in expected)
    assert decoded >= 6  # the test decodes something


def test_equals_ctc_greedy_decode_with_the_ctc_head() -> None:
    adapter, encoder, _ = model(Chunk(3, 1) | Causal(), seed=7)
    head = CTCHead(32, num_classes=10).eval()
    with torch.no_grad():
        head.linear.weight.mul_(4)
    recognizer = StreamingRecognizer(SpeechStream(adapter, encoder, batch_size=2), head)
    audio = torch.randn(2, 9000) * 0.3
    emitted = recognise(recognizer, audio, seed=7)
    assert [[e.label for e in row] for row in emitted] == ctc_greedy_decode(full_logits(adapter, encoder, head, audio))


def test_a_label_spanning_a_block_boundary_is_emitted_once() -> None:
    adapter, encoder, head = model(Chunk(2, 0), seed=0, num_classes=2)
    with torch.no_grad():  # output 1 (class 0) where feature 0 is positive, else the blank
        head.weight.zero_()
        head.bias.zero_()
        head.weight[1, 0], head.weight[0, 0] = 1.0, -1.0
    audio = torch.randn(1, 8000) * 0.3
    best = full_logits(adapter, encoder, head, audio).argmax(-1)[0].tolist()
    spans = [t for t in range(2, len(best), 2) if best[t] == best[t - 1] == 1]
    assert spans, "no run of class 0 across a block boundary: pick another seed"
    recognizer = StreamingRecognizer(SpeechStream(adapter, encoder), head)
    emitted = recognise(recognizer, audio, seed=0)[0]
    assert [(e.label, e.frame) for e in emitted] == greedy(full_logits(adapter, encoder, head, audio))[0]
    assert not any(e.frame in spans for e in emitted)

    with torch.no_grad():  # one label all along: emitted once, at the end of the first block
        head.bias[3 - 1] = 100.0
    emitted = recognise(StreamingRecognizer(SpeechStream(adapter, encoder), head), audio, seed=1)[0]
    assert emitted == [Emission(1, 0, 2, recognizer.stream.samples_for(2))]


def test_emission_latency_aligns_and_summarises() -> None:
    e = [
        [Emission(3, 5, 8, 3000), Emission(1, 9, 12, 4000), Emission(4, 14, 16, 5000)],
        [Emission(7, 2, 4, 1600)],
    ]
    # utterance 0: reference 3 9 4 (1 substituted for 9), utterance 1: reference 7 7 (one deleted)
    lat = emission_latency(e, [[2800, 3900, 4500], [1000, 2000]], references=[[3, 9, 4], [7, 7]])
    assert lat.latencies.tolist() == [200, 500, 600] and lat.num_matched == 3 and lat.num_reference == 5
    assert lat.mean == pytest.approx(1300 / 3)
    assert lat.p95 == pytest.approx(float(torch.quantile(torch.tensor([200.0, 500, 600]), 0.95)))

    seconds = emission_latency([e[0]], [[0.35, 0.45, 0.55]], sample_rate=10000)  # paired in order
    assert seconds.latencies.tolist() == pytest.approx([-0.05, -0.05, -0.05])
    empty = emission_latency([[]], [[0.1]], references=[[2]], sample_rate=8000)
    assert empty.num_matched == 0 and math.isnan(empty.mean) and math.isnan(empty.p95)
    with pytest.raises(ValueError, match="3 labels emitted but 2 ends given; pass references="):
        emission_latency([e[0]], [[1, 2]])
    with pytest.raises(ValueError, match="one entry per utterance"):
        emission_latency(e, [[1, 2, 3]])
